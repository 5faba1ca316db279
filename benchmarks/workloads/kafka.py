"""Kafka: the ``kafka`` upstream's records/s against the client's own limit, and backpressure.

The workload starts its own Apache Kafka broker (``tests/kafka_broker.py``: KRaft, free
localhost ports, the jars ``make install`` put in ``build/kafka/``) and stops it by pid.

**Throughput.** One topic of ``PARTITIONS`` partitions holds ``records_per_partition``
small records per partition (key ``user-<i mod 1000>``, value a digit), produced before
anything is timed. The query is a stateless count, the same on both sides:

a. ``reference``: a plain confluent-kafka consumer per partition on the executors
   (``sparkContext.parallelize(partitions).map(read_all)``: assign, seek to the start,
   read every record's key and value up to the end offset, count them), the client's own
   limit on this machine; records / wall-clock time of the Spark job;
b. ``upstream``: ``barriered.records()`` of the barriered source with ``upstream=kafka``
   (``startingOffsets=earliest``, ``per_batch`` offsets per partition and micro-batch) into
   the ``noop`` sink, checkpoints off (``checkpointInterval=1d``, as the overhead workload
   turns them off), until every record is delivered; records/s over the whole read, from
   the start of the first batch to the end of the last one that delivered records (like
   the reference's whole job), and, as the harness measures it, over every batch but the
   first (``steady``);
c. ``upstream_checkpoints``: the same with aligned checkpoints every 5 s.

Spark's own Kafka source (``spark-sql-kafka-0-10_2.13``) is not published on Maven Central
for Spark 4.3.x (the newest is 4.2.0, checked with ``mvn dependency:get
-Dartifact=org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0``), and a 4.2 build is not
binary compatible with the 4.3 runtime, so the reference is the client's own limit.
The variants run in rounds (forward, then backward order) after a warm-up of each.

**Backpressure.** As the backpressure workload does for the ``rate`` upstream: a producer
thread writes ``rate`` records/s to partitions 1-3 and ``SKEW`` times as many to partition
0 while the keyed running count (per record key) reads the topic, every partition
admitted ``per_batch`` offsets per batch (``maxRowsPerChannel``), so partition 0 lags;
aligned and unaligned checkpoints every 5 s, each mode on a topic of its own.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import cloudpickle

from barriered.api import records
from benchmarks.harness import (
    Context,
    Progress,
    barriered_stream,
    checkpoint_rows,
    configure,
    delivered,
    from_tests,
    percentile,
    ratio,
    run_until,
    start,
    target,
    throughput,
)
from benchmarks.markdown import table
from benchmarks.workloads import backpressure
from benchmarks.workloads.backpressure import LAGGING, SKEW, modes_table, run_mode

PARTITIONS, KEYS = 4, 1000
#: Target: the upstream's records/s against a plain consumer's (b/a and c/a).
TARGET = 0.80
INTERVAL = "5s"
WHY_MISSED = {
    "upstream": "each micro-batch of the upstream plans on the driver (admin calls for "
    "every partition's offsets, the coordinator's barrier planning), starts one Python task "
    "per partition whose consumer connects, seeks and fetches from scratch, and hands its "
    "records to the JVM through Arrow; the plain consumer connects once per partition and "
    "streams the whole topic. Larger batches (maxRowsPerChannel) amortize the fixed cost.",
}

SIZES = {
    "full": {
        "records_per_partition": 1_500_000,
        "per_batch": 100_000,
        "rounds": 2,
        "backpressure": {"per_batch": 1000, "rate": 250, "buffer_batches": 4, "seconds": 40},
    },
    "quick": {
        "records_per_partition": 40_000,
        "per_batch": 10_000,
        "rounds": 1,
        "backpressure": {"per_batch": 1000, "rate": 250, "buffer_batches": 4, "seconds": 15},
    },
}
VARIANTS: dict[str, dict[str, str]] = {
    "reference": {},
    "upstream": {"checkpointInterval": "1d"},
    "upstream_checkpoints": {"checkpointInterval": INTERVAL, "unaligned.enabled": "false"},
}
MODES = ("aligned", "unaligned")
TIMEOUT_S = 600.0


@contextmanager
def kafka_broker(ctx: Context) -> Iterator[Any]:
    """A local broker for the workload, stopped by pid at the end."""
    broker = from_tests("kafka_broker").KafkaBroker().start()
    ctx.emit(f"  Kafka broker on {broker.bootstrap}")
    try:
        yield broker
    finally:
        broker.stop()


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "1"}
    )


def _produce(producer: Any, topic: str, partition: int, first: int, count: int) -> None:
    """``count`` records to ``partition``, numbered from ``first``."""
    for i in range(first, first + count):
        while True:
            try:
                producer.produce(
                    topic, key=f"user-{i % KEYS}", value=str(i % 10), partition=partition
                )
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
    producer.poll(0)


def _fill(bootstrap: str, topic: str, per_partition: int) -> None:
    """Produce ``per_partition`` records to every partition of ``topic`` and wait for them."""
    producer = _producer(bootstrap)
    for partition in range(PARTITIONS):
        _produce(producer, topic, partition, 0, per_partition)
    if producer.flush(120) != 0:
        raise RuntimeError(f"records to {topic!r} still unacknowledged")


def _read_all(bootstrap: str, topic: str, partition: int, end: int) -> int:
    """Every record of ``topic``'s ``partition`` below offset ``end``, by a plain consumer
    (assign and seek, no group); returns how many it read. Runs on an executor."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    count, last = 0, -1
    try:
        while last < end - 1:
            for msg in consumer.consume(num_messages=10_000, timeout=10):
                if msg.error() is not None:
                    raise RuntimeError(f"kafka reference read failed: {msg.error()}")
                msg.key(), msg.value()
                count += 1
                last = msg.offset()
    finally:
        consumer.close()
    return count


def _reference(ctx: Context, bootstrap: str, topic: str, total: int) -> dict[str, Any]:
    """Variant a: the plain consumer, one Spark task per partition."""
    end = total // PARTITIONS
    began = time.perf_counter()
    counts = (
        ctx.spark.sparkContext.parallelize(range(PARTITIONS), PARTITIONS)
        .map(lambda p: _read_all(bootstrap, topic, p, end))
        .collect()
    )
    seconds = time.perf_counter() - began
    if sum(counts) != total:
        raise RuntimeError(f"the reference read {sum(counts)} records of {total}")
    return {
        "records": total,
        "seconds": round(seconds, 2),
        "records_per_s": round(total / seconds, 1),
    }


def _all_delivered(total: int) -> Any:
    def done(seen: list[Progress]) -> bool:
        return sum(sum(delivered(p)) for p in seen) >= total

    return done


def _upstream(
    ctx: Context, name: str, options: dict[str, str], total: int, tag: str
) -> dict[str, Any]:
    """Variants b and c: the stateless count of the barriered source until it has read
    every record of the topic."""
    configure(ctx.spark, VARIANTS[name])
    snap, ck = ctx.path(tag, name, "snap"), ctx.path(tag, name, "ck")
    query = start(records(barriered_stream(ctx.spark, snap, options)), ck)
    try:
        batches = run_until(query, _all_delivered(total), TIMEOUT_S)
    finally:
        query.stop()
    busy = [p for p in batches if sum(delivered(p))]
    done = [r for r in checkpoint_rows(snap) if r["status"] == "completed"]
    steady = throughput(busy)
    return {
        **throughput(busy, skip_first=0),
        "steady_records": steady["records"],
        "steady_seconds": steady["seconds"],
        "checkpoints_completed": len(done),
        "checkpoint_ms_p50": percentile([r["end_to_end_duration_ms"] for r in done], 50),
    }


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant over its rounds: records and seconds added up."""
    total = sum(r["records"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    out: dict[str, Any] = {
        "records": total,
        "seconds": round(seconds, 2),
        "records_per_s": round(total / seconds, 1) if seconds else None,
        "rounds_records_per_s": [r["records_per_s"] for r in runs],
    }
    if "batches" in runs[0]:
        steady = sum(r["steady_seconds"] for r in runs)
        out["steady_records_per_s"] = (
            round(sum(r["steady_records"] for r in runs) / steady, 1) if steady else None
        )
        out["batches"] = sum(r["batches"] for r in runs)
        out["batch_ms_p50"] = percentile([r["batch_ms_p50"] for r in runs], 50)
        out["checkpoints_completed"] = sum(r["checkpoints_completed"] for r in runs)
        out["checkpoint_ms_p50"] = percentile(
            [r["checkpoint_ms_p50"] for r in runs if r["checkpoint_ms_p50"] is not None], 50
        )
    return out


def _throughput(ctx: Context, broker: Any, size: dict[str, Any]) -> dict[str, Any]:
    topic, per_partition = "bench-throughput", size["records_per_partition"]
    total = per_partition * PARTITIONS
    broker.create_topic(topic, PARTITIONS)
    began = time.perf_counter()
    _fill(broker.bootstrap, topic, per_partition)
    ctx.emit(f"  produced {total} records in {time.perf_counter() - began:.1f} s")
    options = {
        "upstream": "kafka",
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxRowsPerChannel": str(size["per_batch"]),
    }

    def one(name: str, tag: str) -> dict[str, Any]:
        if name == "reference":
            return _reference(ctx, broker.bootstrap, topic, total)
        return _upstream(ctx, name, options, total, tag)

    for name in VARIANTS:  # warm-up: Python workers, JIT, the client's connections
        one(name, "warmup")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for i in range(size["rounds"]):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            runs[name].append(one(name, f"round{i}"))
            ctx.emit(f"  round {i} {name}: {runs[name][-1]['records_per_s']} records/s")
    variants = {name: _combine(r) for name, r in runs.items()}
    if variants["upstream_checkpoints"]["checkpoints_completed"] < size["rounds"]:
        ctx.notes.append(
            "the variant with checkpoints completed fewer than one checkpoint per read: "
            "its read of the topic is shorter than the checkpoint interval"
        )
    rate = {name: v["records_per_s"] for name, v in variants.items()}
    ratios = {
        "b_over_a": ratio(rate["upstream"], rate["reference"]),
        "c_over_a": ratio(rate["upstream_checkpoints"], rate["reference"]),
        "c_over_b": ratio(rate["upstream_checkpoints"], rate["upstream"]),
        "b_over_a_steady": ratio(variants["upstream"]["steady_records_per_s"], rate["reference"]),
        "c_over_a_steady": ratio(
            variants["upstream_checkpoints"]["steady_records_per_s"], rate["reference"]
        ),
    }
    return {"variants": variants, "ratios": ratios, "topic_records": total}


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _read_all, for the executors


class _SkewedProducer:
    """Writes ``rate`` records/s to partitions 1-3 and ``SKEW`` times as many to partition
    0 of ``topic``, in a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.producer = _producer(bootstrap)
        self.topic, self.rate = topic, rate
        self.written = [0] * PARTITIONS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skewed-producer", daemon=True)

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.wait(0.1):
            elapsed = time.monotonic() - began
            for partition in range(PARTITIONS):
                rate = self.rate * (SKEW if partition == LAGGING else 1)
                due = int(elapsed * rate) - self.written[partition]
                _produce(self.producer, self.topic, partition, self.written[partition], due)
                self.written[partition] += due
        self.producer.flush(30)

    def __enter__(self) -> _SkewedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def _backpressure(ctx: Context, broker: Any, size: dict[str, Any]) -> dict[str, Any]:
    modes = {}
    for mode in MODES:
        topic = f"bench-lagging-{mode}"
        broker.create_topic(topic, PARTITIONS)
        options = {
            "upstream": "kafka",
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "maxRowsPerChannel": str(size["per_batch"]),
        }
        with _SkewedProducer(broker.bootstrap, topic, size["rate"]) as producer:
            modes[mode] = run_mode(ctx, mode, size, options, f"lagging-{mode}", key_from="key")
        modes[mode]["produced_per_partition"] = producer.written
    ratios = {
        f"aligned_over_unaligned_{q}": ratio(
            modes["aligned"]["end_to_end_ms"][q], modes["unaligned"]["end_to_end_ms"][q]
        )
        for q in ("p50", "p90")
    }
    return {"modes": modes, "ratios": ratios}


def run(ctx: Context) -> dict[str, Any]:
    """Start a broker, measure throughput, then backpressure; stop the broker."""
    size = SIZES["quick" if ctx.quick else "full"]
    with kafka_broker(ctx) as broker:
        measured = _throughput(ctx, broker, size)
        lagging = _backpressure(ctx, broker, size["backpressure"])
    r = measured["ratios"]
    targets = {
        **target(
            f"upstream, checkpoints off / consumer (b/a) >= {TARGET}",
            r["b_over_a"],
            TARGET,
            at_least=True,
        ),
        **target(
            f"upstream, checkpoints every {INTERVAL} / consumer (c/a) >= {TARGET}",
            r["c_over_a"],
            TARGET,
            at_least=True,
        ),
    }
    bp = size["backpressure"]
    params = {
        "partitions": PARTITIONS,
        "keys": KEYS,
        "records_per_partition": size["records_per_partition"],
        "offsets_per_partition_per_batch": size["per_batch"],
        "rounds": size["rounds"],
        "checkpoint_interval": INTERVAL,
        "backpressure": {
            "lagging_partition": LAGGING,
            "skew": SKEW,
            "records_per_second_per_partition": bp["rate"],
            "offsets_per_partition_per_batch": bp["per_batch"],
            "buffer_per_channel": bp["per_batch"] * bp["buffer_batches"],
            "seconds_per_mode": bp["seconds"],
            "max_parallelism": backpressure.MAX_PARALLELISM,
        },
    }
    return {
        "params": params,
        "results": {"throughput": measured, "backpressure": lagging},
        "targets": targets,
    }


LABELS = {
    "reference": "(a) confluent-kafka consumer per partition on the executors",
    "upstream": "(b) `upstream=kafka`, checkpoints off",
    "upstream_checkpoints": "(c) `upstream=kafka`, aligned checkpoints every {interval}",
}


def markdown(record: dict[str, Any]) -> str:
    """The kafka section of RESULTS.md."""
    params, results = record["params"], record["results"]
    measured, lagging = results["throughput"], results["backpressure"]
    bp = params["backpressure"]
    rows = [
        [
            LABELS[name].format(interval=params["checkpoint_interval"]),
            v["records_per_s"],
            v.get("steady_records_per_s", "-"),
            ", ".join(str(x) for x in v["rounds_records_per_s"]),
            v.get("batches", "-"),
            v.get("batch_ms_p50", "-"),
            v.get("checkpoints_completed", "-"),
            v.get("checkpoint_ms_p50", "-"),
        ]
        for name, v in measured["variants"].items()
    ]
    r, b = measured["ratios"], lagging["ratios"]
    return "\n".join(
        [
            f"A local Kafka broker (KRaft, started by the workload); one topic of "
            f"{params['partitions']} partitions x {params['records_per_partition']:,} small "
            f"records, produced before the timed part; a stateless count on both sides; the "
            f"upstream admits {params['offsets_per_partition_per_batch']:,} offsets per "
            f"partition and batch; {params['rounds']} round(s) per variant in forward then "
            "backward order after a warm-up of each. Spark's own Kafka source is not "
            "published for Spark 4.3.x, so the reference is a plain confluent-kafka consumer "
            "(the client's own limit).",
            "",
            table(
                [
                    "variant",
                    "records/s (whole read)",
                    "records/s (all batches but the first)",
                    "whole read, per round",
                    "batches",
                    "batch p50 ms",
                    "checkpoints",
                    "checkpoint p50 ms",
                ],
                rows,
            ),
            "",
            f"**b/a = {r['b_over_a']}, c/a = {r['c_over_a']}** (whole reads, target ≥ "
            f"{TARGET}); without the first batch (query start, planning, the manifest): "
            f"b/a = {r['b_over_a_steady']}, c/a = {r['c_over_a_steady']}; c/b = "
            f"{r['c_over_b']}. The reference is one Spark job of one task per partition; "
            "its time includes launching the tasks and connecting the consumers.",
            "",
            f"Backpressure: a producer writes {bp['records_per_second_per_partition']} "
            f"records/s to partitions 1-3 and {bp['skew']}x that to partition "
            f"{bp['lagging_partition']}; every partition is admitted "
            f"{bp['offsets_per_partition_per_batch']} offsets per batch; bufferPerChannel "
            f"{bp['buffer_per_channel']}; keyed running count per record key; a checkpoint "
            f"every {params['checkpoint_interval']}; ~{bp['seconds_per_mode']} s per mode.",
            "",
            modes_table(lagging["modes"]),
            "",
            f"**Aligned / unaligned end-to-end duration: {b['aligned_over_unaligned_p50']} "
            f"(p50), {b['aligned_over_unaligned_p90']} (p90).**",
        ]
    )
