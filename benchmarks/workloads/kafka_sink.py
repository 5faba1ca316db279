"""Kafka sink: records/s of the exactly-once ``barriered-kafka`` sink against a plain
idempotent producer writing the same rows.

The workload starts its own broker (:func:`benchmarks.workloads.kafka.kafka_broker`). The
same availableNow query (``barriered.keyed(df, "user_id").process(RecordNumbers())``:
one output row per record, as key = user, value = the number as text) over the same
finite ``rate`` upstream (4 channels, 1,000 keys), unaligned checkpoints every 2 s, into

a. ``idempotent_producer``: ``foreachBatch`` producing each task's rows with a plain
   idempotent confluent-kafka producer on the executors (flushed per task: at-least-once
   after a failure, the shape of Spark's own Kafka sink);
b. ``barriered_kafka``: the ``barriered-kafka`` sink (rows staged per batch, published
   per checkpoint in one Kafka transaction from the driver).

records/s = the rows / the wall-clock time from the query's start until a
``read_committed`` consumer can read every row (b: after the last checkpoint's
transaction). Spark's own Kafka sink (``spark-sql-kafka-0-10_2.13``) is not published for
Spark 4.3 (see :mod:`benchmarks.workloads.kafka`), so (a) is the reference.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

from pyspark import cloudpickle

import barriered
from barriered.examples import RecordNumbers
from benchmarks.harness import Context, barriered_stream, configure, ratio, start, target
from benchmarks.jobs import rate_options
from benchmarks.markdown import table
from benchmarks.workloads.kafka import kafka_broker

CHANNELS, KEYS, MAX_PARALLELISM, PARTITIONS = 4, 1000, 64, 4
SIZES = {
    "full": {"rows_per_channel": 100_000, "per_batch": 5000},
    "quick": {"rows_per_channel": 10_000, "per_batch": 2500},
}
TARGET = 0.8
VARIANTS = ("idempotent_producer", "barriered_kafka")
KEYS_CONF = {"checkpointInterval": "2s", "unaligned.enabled": "true"}


def _produce_partition(bootstrap: str, topic: str, rows: Any) -> None:
    """Produce a task's rows with an idempotent producer (runs on an executor)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for row in rows:
        while True:
            try:
                producer.produce(topic, row.value, row.key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"records to {topic!r} still unacknowledged")


def _readable(broker: Any, topic: str) -> int:
    return sum(broker.end_offsets(topic).values())


def _run_variant(
    ctx: Context, broker: Any, name: str, size: dict[str, Any], tag: str
) -> dict[str, Any]:
    configure(
        ctx.spark,
        {
            "maxParallelism": str(MAX_PARALLELISM),
            "bufferPerChannel": str(size["per_batch"]),
            **KEYS_CONF,
        },
    )
    topic = f"{name}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, PARTITIONS)
    snap, ck = ctx.path(tag, name, "snap"), ctx.path(tag, name, "ck")
    total = CHANNELS * size["rows_per_channel"]
    options = rate_options(
        CHANNELS, KEYS, size["per_batch"], rows_per_channel=size["rows_per_channel"]
    )
    df = barriered.keyed(barriered_stream(ctx.spark, snap, options), "user_id").process(
        RecordNumbers()
    )
    df = df.selectExpr("user_id AS key", "CAST(n AS STRING) AS value")
    bootstrap = broker.bootstrap
    began = time.perf_counter()
    if name == "barriered_kafka":
        sink = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "snapshotPath": snap}
        query = start(df, ck, available_now=True, sink="barriered-kafka", options=sink)
    else:
        query = (
            df.writeStream.foreachBatch(
                lambda batch, _id: batch.foreachPartition(
                    lambda rows: _produce_partition(bootstrap, topic, rows)
                )
            )
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
    barriered.await_termination(query, timeout=1800)
    ended = time.perf_counter()
    while _readable(broker, topic) < total and time.perf_counter() - ended < 120:
        time.sleep(0.05)
    seconds = time.perf_counter() - began
    readable = _readable(broker, topic)
    if readable < total:  # (b) also counts one commit marker per partition and checkpoint
        raise RuntimeError(f"{name}: only {readable} of {total} rows readable in {topic!r}")
    return {
        "records": total,
        "readable": readable,
        "seconds": round(seconds, 2),
        "records_per_s": round(total / seconds, 1),
    }


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _produce_partition


def run(ctx: Context) -> dict[str, Any]:
    """Start a broker, run both variants once (after a warm-up of each); stop the broker."""
    size = SIZES["quick" if ctx.quick else "full"]
    variants = {}
    with kafka_broker(ctx) as broker:
        warm = {**size, "rows_per_channel": size["per_batch"] * 2}
        for name in VARIANTS:
            ctx.emit(f"  warm-up {name}: {_run_variant(ctx, broker, name, warm, 'warmup')}")
        for name in VARIANTS:
            variants[name] = _run_variant(ctx, broker, name, size, "run")
            ctx.emit(f"  {name}: {variants[name]['records_per_s']} records/s")
    r = ratio(
        variants["barriered_kafka"]["records_per_s"],
        variants["idempotent_producer"]["records_per_s"],
    )
    return {
        "params": {
            "channels": CHANNELS,
            "keys": KEYS,
            "partitions": PARTITIONS,
            "rows_per_channel": size["rows_per_channel"],
            "rows_per_channel_per_batch": size["per_batch"],
            "checkpoint_interval": KEYS_CONF["checkpointInterval"],
        },
        "results": {"variants": variants, "ratios": {"b_over_a": r}},
        "targets": target(
            f"barriered-kafka / idempotent producer (b/a) >= {TARGET}", r, TARGET, True
        ),
    }


LABELS = {
    "idempotent_producer": "(a) idempotent producer per task (`foreachBatch`)",
    "barriered_kafka": "(b) `barriered-kafka`, one transaction per checkpoint",
}


def markdown(record: dict[str, Any]) -> str:
    """The kafka_sink section of RESULTS.md."""
    params, results = record["params"], record["results"]
    rows = [
        [LABELS[n], v["records"], v["readable"], v["seconds"], v["records_per_s"]]
        for n, v in results["variants"].items()
    ]
    return "\n".join(
        [
            f"One output row per record (`RecordNumbers`) over {params['keys']} keys from "
            f"{params['channels']} channels ({params['rows_per_channel']} rows each), "
            f"availableNow, unaligned checkpoints every {params['checkpoint_interval']}, "
            f"into a topic of {params['partitions']} partitions; one run of each.",
            "",
            table(["sink", "rows", "readable (read_committed)", "seconds", "records/s"], rows),
            "",
            f"**b/a = {results['ratios']['b_over_a']}**: records/s until a `read_committed` "
            "consumer can read every row.",
        ]
    )
