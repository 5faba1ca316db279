"""Queries with Spark's own stateful operators, for the provider tests.

Each query is a function of a DataFrame with the barriered source's columns (``user_id``,
``amount``, ``_channel``, ``_seq``), so the same code runs on the stream (after
``barriered.records``) and, as the batch computation the tests compare with, on every
record of the upstream at once. :func:`state_rows` reads what Spark's own state reader
shows for a query's store, :func:`expected_rows` what it must show after all input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

import barriered
from barriered.datasource.upstreams.rate import RateUpstream
from barriered.examples import RecordNumbers

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
    # As in tests/runs.py: channel 0 lags, so an alignment outlasts 10 ms and switches.
    "aligned_with_timeout": {
        "unaligned.enabled": "true",
        "alignedCheckpointTimeout": "10ms",
        "unaligned.adaptive": "false",
    },
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


def session(df: DataFrame) -> DataFrame:
    """Session windows (gap 30 s) per user with a count and a total. A user's records
    are 25 s apart within each block of 100 positions and a block starts 60 s after the
    previous one ends (``ts``), so each user has one session per block, extended batch
    after batch and merged across channels; the watermark (an hour) evicts none."""
    ts = F.timestamp_seconds(F.col("_seq") + F.floor(F.col("_seq") / 100) * 60)
    return (
        df.withColumn("ts", ts)
        .withWatermark("ts", "1 hour")
        .groupBy(F.session_window("ts", "30 seconds"), "user_id")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    )


def dedup(df: DataFrame) -> DataFrame:
    """dropDuplicates on (user_id, amount)."""
    return df.dropDuplicates(["user_id", "amount"])


def _running(
    key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    n, total = state.get if state.exists else (0, 0)
    for frame in frames:
        n, total = n + len(frame), total + int(frame["amount"].sum())
    state.update((n, total))
    yield pd.DataFrame({"user_id": [key[0]], "n": [n], "total": [total]})


def pandas_state(df: DataFrame) -> DataFrame:
    """A user's ``applyInPandasWithState``: running count and total per user (GroupState)."""
    return df.groupBy("user_id").applyInPandasWithState(
        _running,
        "user_id string, n long, total long",
        "n long, total long",
        "Update",
        GroupStateTimeout.NoTimeout,
    )


def mixed(events: DataFrame) -> DataFrame:
    """``barriered.keyed`` numbering each user's records (its state: the count so far),
    followed by Spark's aggregation of the numbers: per user, how many and the highest.
    Both equal the user's record count only if the keyed state restored exactly."""
    numbered = barriered.keyed(events, "user_id").process(RecordNumbers())
    return numbered.groupBy("user_id").agg(F.count("*").alias("n"), F.max("n").alias("last"))


def join(df: DataFrame) -> DataFrame:
    """A stream-stream inner join of one barriered stream with itself: channel 0 (left)
    against channels 1 and 2 (right) on user and amount. Both sides keep the stream's
    column names, so Spark's analyzer gives the right side a new instance of the source
    relation and runs two source instances (the second mirrors the first). Without
    watermarks every row of both sides stays in the join's state, so after all input it
    holds exactly the rows of each side."""
    left = df.where(F.col("_channel") == 0).select("user_id", "amount", "_seq").alias("l")
    right = df.where(F.col("_channel") != 0).select("user_id", "amount", "_channel", "_seq")
    right = right.alias("r")
    return left.join(
        right,
        (F.col("l.user_id") == F.col("r.user_id")) & (F.col("l.amount") == F.col("r.amount")),
    )


def join_renamed(df: DataFrame) -> DataFrame:
    """The same join with the right side's columns renamed: no attribute conflicts, so
    Spark runs one source instance for both sides."""
    left = df.where(F.col("_channel") == 0).select(
        "user_id", F.col("amount").alias("l_amount"), F.col("_seq").alias("l_seq")
    )
    right = df.where(F.col("_channel") != 0).select(
        F.col("user_id").alias("r_user"),
        F.col("amount").alias("r_amount"),
        F.col("_channel").alias("r_channel"),
        F.col("_seq").alias("r_seq"),
    )
    return left.join(
        right, (left["user_id"] == right["r_user"]) & (left["l_amount"] == right["r_amount"])
    )


# Eviction: queries whose state Spark removes as the watermark passes (append mode).
#
# The source orders event time per channel only (the watermark is the maximum over every
# row seen), so these queries read channel 0 alone, event time = its position in seconds:
# then no record is ever late, whatever the batch boundaries, crash point and restore (a
# restored query's operators start at the checkpoint's watermark, the watermark Spark
# reports starts anew, lower: test_provider_watermark.py). With ``availableNow`` Spark runs a
# no-data batch after the last records, so the final watermark is the last event time
# minus the delay: what is emitted and what stays in state follow from the input alone.
# The delay's fraction keeps every window end and expiry off the watermark (no ties);
# event time starts at 1 s (position 0 at time 0 would be late against the initial
# watermark 0 for ``dropDuplicatesWithinWatermark``, which drops it).

#: Watermark delay of the eviction queries (seconds).
EVICTION_DELAY = 40.25
#: Tumbling window of :func:`window_append` (seconds): the state holds about two.
WINDOW = 60
#: :func:`dedup_watermark` deduplicates per user and block of this many positions: a
#: user's records in one block span 75 positions (25 keys), less than twice the delay, so
#: the first one's state outlives them all and every (user, block) is emitted once.
BLOCK = 100


def _channel0(df: DataFrame) -> DataFrame:
    return (
        df.where(F.col("_channel") == 0)
        .withColumn("ts", F.timestamp_seconds(F.col("_seq") + 1))
        .withWatermark("ts", f"{int(EVICTION_DELAY * 1000)} milliseconds")
    )


def window_counts(df: DataFrame) -> DataFrame:
    """Count and total per user and tumbling window, with a short watermark."""
    return (
        _channel0(df)
        .groupBy(F.window("ts", f"{WINDOW} seconds"), "user_id")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    )


def window_append(df: DataFrame) -> DataFrame:
    """:func:`window_counts` in append mode: a window is emitted when the watermark passes
    its end (and removed from the state), with its start in seconds."""
    return window_counts(df).select(
        F.unix_seconds("window.start").alias("start"), "user_id", "n", "total"
    )


def dedup_watermark(df: DataFrame) -> DataFrame:
    """``dropDuplicatesWithinWatermark`` per user and block of :data:`BLOCK` positions."""
    blocks = _channel0(df).withColumn("block", F.floor(F.col("_seq") / BLOCK))
    return blocks.dropDuplicatesWithinWatermark(["user_id", "block"]).select(
        "user_id", "block", "_seq", "amount"
    )


QUERIES: dict[str, tuple[Callable[[DataFrame], DataFrame], str]] = {
    "aggregation": (aggregation, "update"),
    "window": (window, "update"),
    "session": (session, "append"),
    "dedup": (dedup, "append"),
    "pandas_state": (pandas_state, "update"),
    "mixed": (mixed, "update"),
    "join": (join, "append"),
    "join_renamed": (join_renamed, "append"),
    "window_append": (window_append, "append"),
    "dedup_watermark": (dedup_watermark, "append"),
}
#: Queries built on the source's DataFrame itself (barrier markers included).
ON_EVENTS = {"mixed"}


def stream(name: str, events: DataFrame) -> DataFrame:
    """Query ``name`` on the barriered source's DataFrame ``events``."""
    build = QUERIES[name][0]
    return build(events) if name in ON_EVENTS else build(barriered.records(events))


def stream_of(name: str) -> Callable[[DataFrame], DataFrame]:
    """Query ``name`` as a function of the barriered source's DataFrame."""
    return lambda events: stream(name, events)


#: The state stores of the join's operator (0), in Spark's names.
JOIN_STORES = [
    f"{side}-{store}"
    for side in ("left", "right")
    for store in ("keyToNumValues", "keyWithIndexToValue")
]


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


def operator_id(spark: Any, checkpoint: str, name: str) -> int:
    """The id of the operator of query ``name`` whose state the tests compare: the
    aggregation of ``mixed`` (``barriered.keyed``'s store is not the provider's)."""
    if name != "mixed":
        return 0
    ops = spark.read.format("state-metadata").load(checkpoint).collect()
    return next(int(r.operatorId) for r in ops if r.operatorName == "stateStoreSave")


def state_rows(
    spark: Any,
    checkpoint: str,
    batch_id: int | None = None,
    operator: int = 0,
    store: str | None = None,
) -> set[tuple[Any, Any]]:
    """``(key, value)`` of every row Spark's state reader shows (at ``batch_id``) for
    operator ``operator`` (of its store ``store``: a join has four)."""
    reader = spark.read.format("statestore").option("operatorId", operator)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    if store is not None:
        reader = reader.option("storeName", store)
    return {(_plain(r.key), _plain(r.value)) for r in reader.load(checkpoint).collect()}


def join_sides(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, Counter[Any]]:
    """The rows Spark's state reader shows for each side of the join (``joinSide``), as
    multisets of ``(key, row)``; with ``batch_id``, also ``partitions`` (the partition
    ids the rows came from)."""
    sides: dict[str, Counter[Any]] = {}
    for side in ("left", "right"):
        reader = spark.read.format("statestore").option("joinSide", side)
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        rows = reader.load(checkpoint).collect()
        sides[side] = Counter((_plain(r.key), _plain(r.value)) for r in rows)
        sides[side + "-partitions"] = Counter(r.partition_id for r in rows)
    return sides


def expected_join_sides(spark: Any) -> dict[str, Counter[tuple[Any, Any]]]:
    """What each side of the join's state must hold after every record: its rows."""
    data = all_records(spark)
    left = data.where(F.col("_channel") == 0).collect()
    right = data.where(F.col("_channel") != 0).collect()
    return {
        "left": Counter(((r.user_id, r.amount), (r.user_id, r.amount, r._seq)) for r in left),
        "right": Counter(
            ((r.user_id, r.amount), (r.user_id, r.amount, r._channel, r._seq)) for r in right
        ),
    }


def expected_rows(spark: Any, name: str) -> set[tuple[Any, Any]]:
    """The state ``name`` must hold after every record: the batch computation."""
    data = all_records(spark)
    if name == "aggregation":
        out = aggregation(data).collect()
        return {((r.user_id,), (r.n, r.total)) for r in out}
    if name == "window":
        out = window(data).collect()
        return {(((r.window.start, r.window.end), r.user_id), (r["count"],)) for r in out}
    if name == "session":  # key: the user and the session's start; value: the row
        return {
            (
                (r.user_id, r.session_window.start),
                (tuple(r.session_window), r.user_id, r.n, r.total),
            )
            for r in session(data).collect()
        }
    if name == "dedup":
        return {((r.user_id, r.amount), None) for r in dedup(data).collect()}
    counts = aggregation(data).collect()
    if name == "pandas_state":  # the value: the GroupState
        return {((r.user_id,), (r.n, r.total)) for r in counts}
    if name == "mixed":
        return {((r.user_id,), (r.n, r.n)) for r in counts}
    raise ValueError(name)


def _flat(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return tuple(x for v in value for x in _flat(v))
    return (value,)


def by_key(rows: set[tuple[Any, Any]], name: str) -> set[Any]:
    """What a query's state is compared on: keys only for dropDuplicates (its value is a
    placeholder), keys and values otherwise (flattened for applyInPandasWithState: its
    GroupState fields, however Spark's state format nests them)."""
    if name == "dedup":
        return {k for k, _ in rows}
    if name == "pandas_state":
        return {(k, _flat(v)) for k, v in rows}
    return rows


def channel0_records() -> list[tuple[int, str, int]]:
    """``(seq, user_id, amount)`` of every record of channel 0, in order (its event time:
    ``seq + 1`` seconds)."""
    up = upstream()
    table = up.read(0, 0, up.available()[0])
    users, amounts = table["user_id"].to_pylist(), table["amount"].to_pylist()
    return [(s, u, a) for s, (u, a) in enumerate(zip(users, amounts, strict=True))]


def final_watermark() -> float:
    """The watermark after the no-data batch that ends an availableNow run (seconds)."""
    return channel0_records()[-1][0] + 1 - EVICTION_DELAY


def expected_eviction(name: str) -> tuple[list[tuple[Any, ...]], set[Any]]:
    """What query ``name`` emits over all input (sorted output rows) and the keys its
    state holds at the end (those the final watermark did not evict)."""
    records, final = channel0_records(), final_watermark()
    if name == "window_append":
        groups: dict[tuple[int, str], tuple[int, int]] = {}
        for seq, user, amount in records:
            key = (seq + 1 - (seq + 1) % WINDOW, user)
            n, total = groups.get(key, (0, 0))
            groups[key] = (n + 1, total + amount)
        out = sorted((s, u, n, t) for (s, u), (n, t) in groups.items() if s + WINDOW <= final)
        return out, {(s, u) for s, u in groups if s + WINDOW > final}
    if name == "dedup_watermark":
        first: dict[tuple[str, int], tuple[int, int]] = {}
        for seq, user, amount in records:
            first.setdefault((user, seq // BLOCK), (seq, amount))
        rows = sorted((u, b, s, a) for (u, b), (s, a) in first.items())
        kept = {(u, b) for (u, b), (s, _) in first.items() if s + 1 + EVICTION_DELAY > final}
        return rows, kept
    raise ValueError(name)
