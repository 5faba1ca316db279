"""Stateful processors that are not barriered.keyed(), for the refusal tests.

They live in a module on the Python path of Spark's workers (``tests/``), which unpickle
them by module name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor


class CountRows(StatefulProcessor):
    """A transformWithStateInPandas processor that is not barriered.keyed()."""

    def init(self, handle: Any) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Any:
        yield pd.DataFrame({"user_id": [key[0]], "n": [sum(len(r) for r in rows)]})

    def close(self) -> None:
        pass


class CountRowsRow(StatefulProcessor):
    """The Row-based transformWithState."""

    def init(self, handle: Any) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Any:
        yield Row(user_id=key[0], n=len(list(rows)))

    def close(self) -> None:
        pass


def count_per_key(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame({"user_id": [key[0]], "n": [sum(len(f) for f in frames)]})
