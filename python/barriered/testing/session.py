"""Session helpers for tests and notebooks that run several barriered queries."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from barriered.config import PREFIX


@contextmanager
def barriered_keys(spark: Any, keys: Mapping[str, str]) -> Iterator[None]:
    """Set ``spark.sql.streaming.barriered.*`` keys for a block, then restore the session.

    Parameters
    ----------
    spark : SparkSession
        The session.
    keys : mapping of str to str
        Short key names (``"checkpointInterval"``) and values.

    On exit every barriered key is as it was before the block: keys set inside the
    block (by ``keys`` or by the code in it) are unset, earlier values come back.
    """
    before = {k: v for k, v in spark.conf.getAll.items() if k.startswith(PREFIX)}
    try:
        for name, value in keys.items():
            spark.conf.set(PREFIX + name, value)
        yield
    finally:
        for key in list(spark.conf.getAll):
            if key.startswith(PREFIX) and key not in before:
                spark.conf.unset(key)
        for key, value in before.items():
            spark.conf.set(key, value)
