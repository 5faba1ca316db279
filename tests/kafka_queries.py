"""The Kafka query of the Kafka tests and its recount from the topic itself.

Records are ``(user, amount)`` as key and value text; the query keeps each user's running
total with ``barriered.keyed`` and ``RunningTotals``; :func:`recount` computes, from every
record a ``read_committed`` consumer sees in the topic, what that state must hold.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pyspark.sql import functions as F

import barriered
from barriered.examples import RunningTotals
from runs import MODES

#: The checkpoint modes of the Kafka tests: ``runs.MODES``, and unaligned checkpoints
#: whose in-flight ranges are kept by reference (re-read from the topic on restore).
KAFKA_MODES = {
    **MODES,
    "unaligned_by_reference": {**MODES["unaligned"], "inflight.capture": "reference"},
}


def reader(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """``spark.readStream`` of the barriered source on ``topic``, from its earliest offsets,
    at most 20 offsets per partition and micro-batch."""
    return (
        spark.readStream.format("barriered")
        .option("upstream", "kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxRowsPerChannel", "20")
        .options(**options)
    )


def _parsed(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    return (
        reader(spark, bootstrap, topic, **options)
        .load()
        .withColumn("user_id", F.col("key").cast("string"))
        .withColumn("amount", F.col("value").cast("string").cast("long"))
    )


def kafka_totals(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """The running total per user of ``topic``'s records (``barriered.keyed``)."""
    records = _parsed(spark, bootstrap, topic, **options)
    return barriered.keyed(records, "user_id").process(RunningTotals())


def kafka_sums(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """The same totals with Spark's own ``groupBy().agg()`` (under the barriered state
    store provider; output mode update)."""
    records = barriered.records(_parsed(spark, bootstrap, topic, **options))
    return records.groupBy("user_id").agg(F.sum("amount").alias("total"))


#: The Kafka test queries by name: the query and its output mode.
QUERIES = {"keyed": (kafka_totals, "append"), "aggregation": (kafka_sums, "update")}


def records(n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """``n`` records: 11 users, amounts 1..5."""
    return [(f"user-{i % 11}".encode(), str(i % 5 + 1).encode()) for i in range(start, start + n)]


def recount(broker: Any, topic: str) -> dict[str, int]:
    """Each user's total over every committed record of ``topic``."""
    totals: Counter[str] = Counter()
    for record in broker.read_committed(topic):
        assert record.key is not None and record.value is not None
        totals[record.key.decode()] += int(record.value.decode())
    return dict(totals)


def state_totals(spark: Any, snap: str) -> dict[str, int]:
    """The running totals of the latest checkpoint of ``snap``."""
    return {r["user_id"]: r["total"] for r in barriered.state_table(spark, snap).collect()}
