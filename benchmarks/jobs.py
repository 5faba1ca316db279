"""The job every workload measures: a keyed running count per ``user_id``.

The processor is shipped to the Python workers by value (the ``benchmarks`` package is
not installed, so the workers could not import it by name).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql import functions as F

import barriered
from barriered.control.columns import CHANNEL
from benchmarks.harness import barriered_stream

#: The keyed state the benchmarks keep, and the rows they emit per key and batch.
STATE_SCHEMA = "count long"
OUTPUT_SCHEMA = "user_id string, count long"


def _counted(rows: pd.DataFrame, state: pd.DataFrame) -> pd.DataFrame:
    """The new count of every key of ``rows``: its rows in this batch plus its state."""
    seen = rows["user_id"].value_counts(sort=False)
    before = pd.Series(state["count"].to_numpy(), index=state["user_id"].to_numpy())
    count = seen.add(before, fill_value=0).astype("int64")
    return pd.DataFrame({"user_id": count.index, "count": count.to_numpy()})


class RunningCount:
    """Records seen per key; emits the new count of every key that got records.

    Vectorized (``process_batch``: one call per slot of key groups and micro-batch).
    """

    state_schema = STATE_SCHEMA
    output_schema = OUTPUT_SCHEMA

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """Add this batch's records to the counts of the keys present."""
        new = _counted(rows, state)
        return new, new


class SilentCount(RunningCount):
    """:class:`RunningCount` that emits nothing: seeds large states faster (same state)."""

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """Add this batch's records to the counts of the keys present."""
        return None, _counted(rows, state)


#: The operator id on the snapshot path, the same for both processors.
OPERATOR = "running_count"

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def rate_options(
    channels: int,
    keys: int,
    per_batch: int,
    rows_per_second: float = 0,
    rows_per_channel: int | None = None,
    skew: str = "",
) -> dict[str, str]:
    """Options of a ``rate`` upstream admitted ``per_batch`` rows per channel and batch.

    ``rows_per_second=0`` makes every record available at once (a backlog on every
    channel: the job runs as fast as it can).
    """
    options = {
        "upstream": "rate",
        "channels": str(channels),
        "keys": str(keys),
        "rowsPerSecond": str(rows_per_second),
        "maxRowsPerChannel": str(per_batch),
    }
    if rows_per_channel is not None:
        options["rowsPerChannel"] = str(rows_per_channel)
    if skew:
        options["skew"] = skew
    return options


def per_record_cost(channel: int, cost_ms: float) -> Callable[[Any], Any]:
    """A transform of the source's records that spends ``cost_ms`` per record of ``channel``.

    A scalar pandas UDF passes ``amount`` through and sleeps ``cost_ms`` times the number
    of ``channel``'s rows in each Arrow batch it gets (marker rows have channel -1). It runs
    in the source's read tasks, before the keyed operator's shuffle, and a read task holds
    one channel's range: the cost lands on that channel's tasks only, as a slow operator on
    one channel's path in Flink. Sleeping, not spinning, keeps the cost the same on a busy
    machine (it takes a task slot, not a core).
    """

    @F.pandas_udf("long")
    def costly(channels: pd.Series, amount: pd.Series) -> pd.Series:
        time.sleep(cost_ms / 1000 * int((channels == channel).sum()))
        return amount

    def transform(events: Any) -> Any:
        return events.withColumn("amount", costly(F.col(CHANNEL), F.col("amount")))

    return transform


def running_count(
    spark: Any,
    snapshot_path: str,
    options: dict[str, str],
    silent: bool = False,
    key_from: str | None = None,
    transform: Callable[[Any], Any] | None = None,
) -> Any:
    """The keyed running count over a barriered source (``silent``: no output rows), per
    ``user_id``, or per the column ``key_from`` as a string (e.g. a Kafka record's key),
    on the source's records passed through ``transform`` (e.g. :func:`per_record_cost`)."""
    events = barriered_stream(spark, snapshot_path, options)
    if key_from is not None:
        events = events.withColumn("user_id", F.col(key_from).cast("string"))
    if transform is not None:
        events = transform(events)
    processor = SilentCount() if silent else RunningCount()
    return barriered.keyed(events, "user_id").process(processor, name=OPERATOR)
