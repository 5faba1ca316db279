"""Ready-made keyed processors, used by the demo, the notebooks and the tests.

A processor passed to :meth:`barriered.api.KeyedStream.process` is pickled to the
executors, so it must live in an importable module (or be defined in the notebook or
``__main__``, which cloudpickle ships by value).
"""

from __future__ import annotations

from typing import Any

import pandas as pd


class RunningTotals:
    """Running sum and count of ``amount`` per key; emits the new total per key."""

    state_schema = "total long, count long"
    output_schema = "user_id string, total long"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> pd.DataFrame:
        """Add this batch's amounts to the key's total."""
        current = state.get() or {"total": 0, "count": 0}
        current = {
            "total": int(current["total"]) + int(rows["amount"].sum()),
            "count": int(current["count"]) + len(rows),
        }
        state.update(current)
        return pd.DataFrame({"user_id": [key[0]], "total": [current["total"]]})
