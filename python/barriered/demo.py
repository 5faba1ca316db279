"""The local demo: a skewed multi-channel stream through a keyed running total.

It runs one query per checkpoint mode (aligned, unaligned, aligned with timeout) on a
local Spark, prints a line per finished checkpoint while the query runs, and a summary
table at the end. The input is the ``rate`` upstream, or with ``kafka`` (a bootstrap
server) a topic of 4 partitions the demo creates and fills, partition 0 with 4 times the
records of the others: every phase reads it from its earliest offsets. The Delta
tables stay under ``OUT/snapshots/<mode>``, each mode's checkpoint plot is written to
``OUT/plots/<mode>.png``, and the last lines name the commands that look further. The
console output of the Spark it starts (JVM log lines, pyspark's worker prints) goes to
``OUT/spark.log``, so that the screen shows only the demo's own lines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from barriered.config import (
    ALIGNED_CHECKPOINT_TIMEOUT,
    BUFFER_PER_CHANNEL,
    CHECKPOINT_INTERVAL,
    MAX_PARALLELISM,
    METRICS_HOST,
    METRICS_PROMETHEUS_PORT,
    SNAPSHOT_PATH,
    UNALIGNED_ADAPTIVE,
    UNALIGNED_ENABLED,
)
from barriered.config.source_options import KAFKA_CLIENT, MAX_ROWS_PER_CHANNEL
from barriered.config.upstream_options import (
    CHANNELS,
    KEYS,
    ROWS_PER_SECOND,
    SKEW,
    STARTING_OFFSETS,
    SUBSCRIBE,
    UPSTREAM,
)
from barriered.errors import BarrieredError, ConfigError
from barriered.monitoring import hub as monitoring_hub
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.progress import Progress

log = logging.getLogger(__name__)

#: Session keys per demo phase (on top of the common ones in :func:`run_demo`).
PHASES: dict[str, dict[str, str]] = {
    "aligned": {UNALIGNED_ENABLED.key: "false"},
    "unaligned": {UNALIGNED_ENABLED.key: "true", ALIGNED_CHECKPOINT_TIMEOUT.key: "0s"},
    "aligned_with_timeout": {
        UNALIGNED_ENABLED.key: "true",
        ALIGNED_CHECKPOINT_TIMEOUT.key: "1500ms",
        UNALIGNED_ADAPTIVE.key: "false",
    },
}
#: Session keys of every phase.
COMMON_KEYS = {
    CHECKPOINT_INTERVAL.key: "2s",
    MAX_PARALLELISM.key: "32",
    BUFFER_PER_CHANNEL.key: "600",
    # the live checkpoint page and Prometheus metrics of the demo's queries, on a free port
    METRICS_PROMETHEUS_PORT.key: "0",
    METRICS_HOST.key: "127.0.0.1",
}

#: Seconds a phase's query may take to run its first micro-batch.
START_TIMEOUT_S = 120.0

#: The skewed upstream: channel 0 produces 4x the others but is admitted like them.
SOURCE = {
    UPSTREAM.name: "rate",
    CHANNELS.name: "4",
    ROWS_PER_SECOND.name: "150",
    SKEW.name: "0:4",
    KEYS.name: "1000",
    MAX_ROWS_PER_CHANNEL.name: "250",
}

#: The Kafka variant: records per second of demo ``duration`` written to partitions
#: 1..3 of the topic (4 times as many to partition 0), admitted like the rate upstream.
KAFKA_ROWS_PER_SECOND = 150
KAFKA_PARTITIONS = 4


def kafka_topic(bootstrap: str, duration: float) -> tuple[str, dict[str, str]]:
    """Create a new topic of :data:`KAFKA_PARTITIONS` partitions on ``bootstrap`` and
    fill it: key ``user-<k>`` (1000 users), value an amount 1..10 as text.

    Returns
    -------
    tuple of (str, dict)
        The topic and the source options that read it from its earliest offsets.

    Raises
    ------
    ConfigError
        Without the Python package confluent-kafka.
    BarrieredError
        When the topic cannot be created or filled.
    """
    try:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
    except ImportError:
        raise ConfigError(
            "demo --kafka needs the Python package confluent-kafka: "
            "pip install 'spark-barriered[kafka]'"
        ) from None
    topic = f"barriered-demo-{uuid.uuid4().hex[:8]}"
    # librdkafka's lines (a fresh broker's "GETPID ... retrying" notice) go to logging
    client: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log}
    new = NewTopic(topic, num_partitions=KAFKA_PARTITIONS, replication_factor=1)
    admin = AdminClient(client)  # kept while its future runs: it fails once it is gone
    try:
        admin.create_topics([new])[topic].result(60)
    except Exception as exc:
        raise BarrieredError(
            f"demo: creating topic {topic!r} on {bootstrap} failed: {exc}"
        ) from exc
    producer = Producer({**client, "enable.idempotence": True, "linger.ms": 20})
    per_partition = int(KAFKA_ROWS_PER_SECOND * duration)
    for partition in range(KAFKA_PARTITIONS):
        for i in range(per_partition * (4 if partition == 0 else 1)):
            amount = str(i % 10 + 1)
            producer.produce(topic, key=f"user-{i % 1000}", value=amount, partition=partition)
            if i % 10_000 == 0:
                producer.poll(0)
    if producer.flush(60) != 0:
        raise BarrieredError(f"demo: records to topic {topic!r} were not acknowledged")
    options = {
        UPSTREAM.name: "kafka",
        KAFKA_CLIENT.name + "bootstrap.servers": bootstrap,
        SUBSCRIBE.name: topic,
        STARTING_OFFSETS.name: "earliest",
        MAX_ROWS_PER_CHANNEL.name: SOURCE[MAX_ROWS_PER_CHANNEL.name],
    }
    return topic, options


@contextlib.contextmanager
def console_to(log_file: Path) -> Iterator[None]:
    """Point this process's stdout and stderr file descriptors at ``log_file`` meanwhile.

    A JVM started meanwhile keeps them for good, and so does every Python worker it
    starts: Spark's log lines and pyspark's worker prints (``Streaming
    TransformWithStateInPandas Python worker Starting execution of UDF ...``) go to the
    file, while ``sys.stdout``/``sys.stderr`` of this process get the screen back after.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with open(log_file, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def local_session(log_file: Path | None = None) -> Any:
    """Return the active SparkSession, or start a local[2] one with RocksDB state.

    A new session's console output (the JVM's and its Python workers') goes to
    ``log_file`` when given; an active session keeps its own.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    with console_to(log_file) if log_file is not None else contextlib.nullcontext():
        return _new_session()


def _new_session() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("barriered-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # keep the checkpoint lines readable
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("FATAL")  # stopping a demo query logs aborted writes
    return spark


def format_row(phase: str, row: dict[str, Any]) -> str:
    """One live line per finished checkpoint."""
    status = row["status"]
    if status != "completed":
        return f"[{phase}] checkpoint {row['checkpoint_id']:>3} {status}: {row['failure_reason']}"
    mode = row["effective_mode"] or row["mode"]
    return (
        f"[{phase}] checkpoint {row['checkpoint_id']:>3} {mode:<10}"
        f" {row['end_to_end_duration_ms'] or 0:>6} ms"
        f"  alignment {row['alignment_duration_ms'] or 0:>6} ms"
        f"  batches {row['barrier_batch_id']}->{row['cut_batch_id']}"
        f"  state {row['state_bytes']:>7} B  in-flight {row['inflight_rows']:>6} rows"
        f" {row['inflight_bytes']:>7} B  acks {row['num_acknowledged']}/{row['num_expected']}"
    )


def run_phase(
    spark: Any,
    phase: str,
    out: Path,
    seconds: float,
    progress: Progress,
    source: dict[str, str] = SOURCE,
    announced: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Run one mode for ``seconds`` on ``source`` (options of the barriered source) and
    return its checkpoint rows; the monitoring endpoint's address is printed once it is
    up, unless it is in ``announced``."""
    from pyspark.sql import functions as F

    import barriered
    from barriered.examples import RunningTotals

    for key, value in PHASES[phase].items():
        spark.conf.set(key, value)
    snap = out / "snapshots" / phase
    events = (
        spark.readStream.format("barriered")
        .options(**source)
        .option(SNAPSHOT_PATH.name, str(snap))
        .load()
    )
    if source.get(UPSTREAM.name) == "kafka":
        events = events.withColumn("user_id", F.col("key").cast("string")).withColumn(
            "amount", F.col("value").cast("string").cast("long")
        )
    totals = barriered.keyed(events, "user_id").process(RunningTotals())
    query = (
        totals.writeStream.format("noop")
        .option("checkpointLocation", str(out / "spark-checkpoints" / phase))
        .start()
    )
    layout = SnapshotLayout.configured(str(snap))
    seen: set[tuple[int, str]] = set()

    def report() -> list[dict[str, Any]]:
        url = monitoring_hub.address()
        if url is not None and announced is not None and url not in announced:
            announced.add(url)
            progress.log(f"live checkpoint page: {url} (Prometheus metrics: {url}metrics)")
        rows = checkpoints_table.read_rows(layout)
        for row in rows:
            if (row["checkpoint_id"], row["status"]) not in seen:
                seen.add((row["checkpoint_id"], row["status"]))
                progress.log(format_row(phase, row))
        return rows

    progress.step(f"{phase}: starting")
    try:
        started = time.time() + START_TIMEOUT_S
        while query.lastProgress is None and query.isActive and time.time() < started:
            time.sleep(0.2)  # the phase's time counts from the first micro-batch on
        progress.step(f"{phase}: {seconds:.0f} s", total=seconds)
        deadline = time.time() + seconds
        while time.time() < deadline and query.isActive:
            time.sleep(1.0)
            progress.advance(1.0)
            report()
    finally:
        query.stop()
    if query.exception() is not None:
        raise BarrieredError(f"demo phase {phase} failed: {query.exception()}")
    barriered.await_termination(query, timeout=60)  # the coordinator saw the last batch
    return report()


def summary(results: dict[str, list[dict[str, Any]]]) -> str:
    """The final table: one line per mode."""
    lines = [
        f"{'mode':<22}{'completed':>10}{'p50 ms':>9}{'max ms':>9}{'align p50':>11}"
        f"{'in-flight rows':>16}{'state MB':>10}"
    ]
    for phase, rows in results.items():
        done = [r for r in rows if r["status"] == "completed"]
        durations = [r["end_to_end_duration_ms"] or 0 for r in done] or [0]
        aligns = [r["alignment_duration_ms"] or 0 for r in done] or [0]
        lines.append(
            f"{phase:<22}{len(done):>10}{statistics.median(durations):>9.0f}{max(durations):>9}"
            f"{statistics.median(aligns):>11.0f}{sum(r['inflight_rows'] for r in done):>16}"
            f"{sum(r['state_bytes'] for r in done) / 1e6:>10.2f}"
        )
    return "\n".join(lines)


def run_demo(
    out: str,
    duration: float,
    progress: Progress | None = None,
    stop_session: bool = False,
    kafka: str | None = None,
) -> dict[str, Any]:
    """Run every phase for ``duration / 3`` seconds; return the rows per phase.

    ``progress`` shows the phases and prints a line per finished checkpoint (default:
    plain lines on stdout). With ``stop_session``, a SparkSession the demo started is
    stopped at the end (also after an error); an active one it found is left running.
    With ``kafka`` (bootstrap servers), the phases read a topic :func:`kafka_topic`
    creates and fills instead of the ``rate`` upstream.
    """
    from pyspark.sql import SparkSession

    import barriered

    progress = progress or Progress(sys.stdout, sys.stdout)
    target = Path(out).resolve()
    for sub in ("snapshots", "spark-checkpoints"):
        shutil.rmtree(target / sub, ignore_errors=True)
    spark_log = target / "spark.log"
    spark_log.unlink(missing_ok=True)
    found = SparkSession.getActiveSession()
    spark = local_session(spark_log)
    if found is None:
        progress.log(f"Spark's console output: {spark_log}")
    source = SOURCE
    if kafka is not None:
        progress.step(f"creating and filling a topic on {kafka}")
        topic, source = kafka_topic(kafka, duration)
        rows = int(KAFKA_ROWS_PER_SECOND * duration)
        progress.log(
            f"Kafka topic {topic}: partition 0 holds {4 * rows} records, "
            f"partitions 1..{KAFKA_PARTITIONS - 1} {rows} each"
        )
    try:
        barriered.install(spark)
        for key, value in COMMON_KEYS.items():
            spark.conf.set(key, value)
        results = {}
        announced: set[str] = set()
        for phase in PHASES:
            seconds = duration / len(PHASES)
            results[phase] = run_phase(spark, phase, target, seconds, progress, source, announced)
    finally:
        if stop_session and found is None:
            spark.stop()
    progress.log(summary(results))
    progress.log(next_steps(target, results, write_plots(target, results)))
    return results


def write_plots(target: Path, results: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Write the checkpoint plot of each mode that finished a checkpoint to
    ``target/plots/<mode>.png``; return the files (none without matplotlib, the ``plot``
    extra)."""
    from barriered.tools.plot import save_checkpoint_plot

    if importlib.util.find_spec("matplotlib") is None:
        return []
    folder = target / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for phase, rows in results.items():
        if rows:
            path = folder / f"{phase}.png"
            save_checkpoint_plot(rows, str(path), title=f"demo: {phase}")
            written.append(path)
    return written


def next_steps(target: Path, results: dict[str, list[dict[str, Any]]], plots: list[Path]) -> str:
    """Where the demo left its snapshot paths and plots, and the commands that look
    further: each path one the CLI takes (the snapshot path of the mode with the most
    completed checkpoints; ``inspect`` and ``plot`` only once one completed)."""
    snaps = target / "snapshots"
    lines = [f"Snapshot paths (Delta tables), one per mode: {snaps}/<mode>"]
    if plots:
        lines.append(f"Checkpoint plots: {', '.join(str(p) for p in plots)}")
    completed = {p: sum(r["status"] == "completed" for r in rows) for p, rows in results.items()}
    phase = max(completed, key=lambda p: completed[p])
    snap = snaps / phase
    lines += ["Look further:", f"  barriered checkpoints {snap}", f"  barriered ui {snap}"]
    if completed[phase]:
        lines.append(f"  barriered inspect {snap}")
        lines.append(f"  barriered inspect {snap} --key user-1 --partitions 2")
        lines.append(f"  barriered plot {snap} -o {phase}.png")
    return "\n".join(lines)
