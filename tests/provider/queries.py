"""Queries with Spark's own stateful operators, for the provider tests.

Each query is a function of a DataFrame with the barriered source's columns (``user_id``,
``amount``, ``_channel``, ``_seq``), so the same code runs on the stream (after
``barriered.records``) and, as the batch computation the tests compare with, on every
record of the upstream at once. :func:`state_rows` reads what Spark's own state reader
shows for a query's store, :func:`expected_rows` what it must show after all input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from barriered.datasource.upstreams.rate import RateUpstream

PREFIX = "spark.sql.streaming.barriered."
#: All records at once, channel 0 four times the others, at most 40 rows per channel and
#: batch: dozens of micro-batches, with checkpoints completing in between.
CHANNELS, ROWS, KEYS = 3, 300, 25
SOURCE = {
    "upstream": "rate",
    "channels": str(CHANNELS),
    "rowsPerSecond": "0",
    "rowsPerChannel": str(ROWS),
    "skew": "0:4",
    "keys": str(KEYS),
    "maxRowsPerChannel": "40",
}
CONF = {
    "checkpointInterval": "300ms",
    "maxParallelism": "16",
    "bufferPerChannel": "100",
    "retainedCheckpoints": "100",
    "leaseTimeout": "3s",
}
MODES: dict[str, dict[str, str]] = {
    "aligned": {"unaligned.enabled": "false"},
    "unaligned": {"unaligned.enabled": "true", "alignedCheckpointTimeout": "0s"},
}


def aggregation(df: DataFrame) -> DataFrame:
    """A grouped aggregation: count and total per user."""
    return df.groupBy("user_id").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))


def window(df: DataFrame) -> DataFrame:
    """A windowed count with a watermark (an hour: nothing is late, nothing evicted)."""
    return (
        df.withColumn("ts", F.timestamp_seconds("_seq"))
        .withWatermark("ts", "1 hour")
        .groupBy(F.window("ts", "20 seconds"), "user_id")
        .count()
    )


def dedup(df: DataFrame) -> DataFrame:
    """dropDuplicates on (user_id, amount)."""
    return df.dropDuplicates(["user_id", "amount"])


QUERIES: dict[str, tuple[Callable[[DataFrame], DataFrame], str]] = {
    "aggregation": (aggregation, "update"),
    "window": (window, "update"),
    "dedup": (dedup, "append"),
}


def upstream() -> RateUpstream:
    """The upstream of :data:`SOURCE`, to recount its records."""
    return RateUpstream(CHANNELS, 0, ROWS, KEYS, {0: 4.0}, state_dir="/nonexistent")


def all_records(spark: Any) -> DataFrame:
    """Every record of the upstream, with the source's channel and position columns."""
    up = upstream()
    rows = []
    for channel, end in enumerate(up.available()):
        table = up.read(channel, 0, end)
        for seq, (user, amount) in enumerate(
            zip(table["user_id"].to_pylist(), table["amount"].to_pylist(), strict=True)
        ):
            rows.append((user, amount, channel, seq))
    return spark.createDataFrame(rows, "user_id string, amount long, _channel int, _seq long")


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return tuple(_plain(v) for v in value)
    return value


def state_rows(spark: Any, checkpoint: str, batch_id: int | None = None) -> set[tuple[Any, Any]]:
    """``(key, value)`` of every row Spark's state reader shows (at ``batch_id``)."""
    reader = spark.read.format("statestore")
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    return {(_plain(r.key), _plain(r.value)) for r in reader.load(checkpoint).collect()}


def expected_rows(spark: Any, name: str) -> set[tuple[Any, Any]]:
    """The state ``name`` must hold after every record: the batch computation."""
    data = all_records(spark)
    if name == "aggregation":
        out = aggregation(data).collect()
        return {((r.user_id,), (r.n, r.total)) for r in out}
    if name == "window":
        out = window(data).collect()
        return {(((r.window.start, r.window.end), r.user_id), (r["count"],)) for r in out}
    if name == "dedup":
        return {((r.user_id, r.amount), None) for r in dedup(data).collect()}
    raise ValueError(name)


def by_key(rows: set[tuple[Any, Any]], name: str) -> set[Any]:
    """What a query's state is compared on: keys only for dropDuplicates (its value is a
    placeholder), keys and values otherwise."""
    return {k for k, _ in rows} if name == "dedup" else rows
