"""Helpers shared by the Spark tests: a skewed deterministic upstream, real runs, recounts.

Every run reads a skewed ``rate`` upstream (channel 0 holds four times the records of the
others and every channel is admitted at most 40 rows per micro-batch, so channel 0 lags),
keeps a running total per user, and takes checkpoints as often as it can. The recounts
compute, from the upstream's own records, what a snapshot must contain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from deltalake import DeltaTable

import barriered
from barriered.control.offsets import SourceOffset
from barriered.control.record import ControlRecord
from barriered.datasource.upstreams.rate import RateUpstream
from barriered.examples import RecordNumbers, RunningTotals
from barriered.files.storage import delta_options
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import scan
from barriered.statestore.layout import SnapshotLayout
from barriered.testing.expected import running_totals

PREFIX = "spark.sql.streaming.barriered."
T = TypeVar("T")

#: Run a test that takes ``session`` on a classic session and over Spark Connect.
BOTH = pytest.mark.parametrize(
    "session",
    ["classic", pytest.param("connect", marks=pytest.mark.connect)],
    indirect=True,
)
#: Classic in the default suite, Spark Connect behind ``full`` (make test under 20 min).
CLASSIC_THEN_CONNECT = pytest.mark.parametrize(
    "session",
    ["classic", pytest.param("connect", marks=(pytest.mark.connect, pytest.mark.full))],
    indirect=True,
)
CHANNELS, ROWS, SKEW, KEYS = 3, 160, "0:4", 25
SOURCE = {
    "upstream": "rate",
    "channels": str(CHANNELS),
    "rowsPerSecond": "0",
    "rowsPerChannel": str(ROWS),
    "skew": SKEW,
    "keys": str(KEYS),
    "maxRowsPerChannel": "40",
}
MODES: dict[str, dict[str, str]] = {
    "aligned": {"unaligned.enabled": "false"},
    "unaligned": {"unaligned.enabled": "true", "alignedCheckpointTimeout": "0s"},
    "aligned_with_timeout": {
        "unaligned.enabled": "true",
        "alignedCheckpointTimeout": "10ms",
        "unaligned.adaptive": "false",
    },
    "at_least_once": {"mode": "atLeastOnce"},
}


def write_files(
    data: Path, sizes: dict[str, int], parts: int = 3, tag: str = "part"
) -> Counter[str]:
    """Write JSON-lines files, one folder per channel; return the totals they hold."""
    expected: Counter[str] = Counter()
    for folder, rows in sizes.items():
        (data / folder).mkdir(parents=True, exist_ok=True)
        for part in range(parts):
            lines = []
            for i in range(rows // parts):
                user, amount = f"user-{(i * 7 + part) % 11}", i % 5 + 1
                expected[user] += amount
                lines.append(json.dumps({"user_id": user, "amount": amount}))
            (data / folder / f"{tag}-{part}.json").write_text("\n".join(lines) + "\n")
    return expected


def write_records(data: Path, tag: str, rows: int, users: int) -> Counter[str]:
    """One JSON-lines file ``<tag>.json`` of ``rows`` records in each of the channel
    folders ``a`` and ``b`` over ``users`` users; return the records per user."""
    counts: Counter[str] = Counter()
    for channel in ("a", "b"):
        (data / channel).mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(rows):
            user = f"user-{(i * 7 + len(channel + tag)) % users}"
            counts[user] += 1
            lines.append(json.dumps({"user_id": user, "amount": i % 5}))
        (data / channel / f"{tag}.json").write_text("\n".join(lines) + "\n")
    return counts


#: Source options reading the folders of :func:`write_files`.
FILES_SOURCE = {
    "upstream": "files",
    "channelBy": "folder",
    "schema": "user_id string, amount long",
    "maxRowsPerChannel": "10",
}


def upstream() -> RateUpstream:
    """The upstream of :data:`SOURCE`, to recount its records."""
    return RateUpstream(CHANNELS, 0, ROWS, KEYS, {0: 4.0}, state_dir="/nonexistent")


def totals_before(limits: dict[int, int]) -> dict[str, int]:
    """Running totals over the records of each channel before ``limits[c]``."""
    return running_totals(upstream(), limits)


def start(
    session: Any,
    tmp_path: Path,
    conf: dict[str, str],
    source: dict[str, str] | None = None,
    snap: str | None = None,
    checkpoint: str = "ck",
    processor: Any = None,
    sink: dict[str, str] | None = None,
    keys: tuple[str, ...] = ("user_id",),
    name: str | None = None,
    sink_format: str = "barriered-delta",
    output: Any = None,
) -> Any:
    """Start one availableNow query of running totals (or ``processor`` keyed by ``keys``,
    operator ``name``); return it.

    With ``sink`` (its options, ``path`` included) the query writes to the
    ``sink_format`` sink of the same snapshot path (``output``: what it writes, from the
    processor's output); else to ``noop``. Its checkpoint location is ``checkpoint``
    under ``tmp_path``, or ``checkpoint`` itself when it is a URI (``s3://...``).
    """
    for key, value in conf.items():
        session.conf.set(PREFIX + key, value)
    snap = snap or str(tmp_path / "snap")
    location = checkpoint if "://" in checkpoint else str(tmp_path / checkpoint)
    events = session.readStream.format("barriered").options(**(source or SOURCE))
    events = events.option("snapshotPath", snap).load()
    out = barriered.keyed(events, *keys).process(processor or RunningTotals(), name)
    if output is not None:
        out = output(out)
    writer = out.writeStream.format("noop")
    if sink is not None:
        writer = out.writeStream.format(sink_format).options(snapshotPath=snap, **sink)
    return writer.option("checkpointLocation", location).trigger(availableNow=True).start()


def wait_final_checkpoint(
    layout: SnapshotLayout, final: tuple[int, ...], query: Any, after_id: int = 0
) -> dict[str, Any]:
    """Wait for a completed checkpoint (with id > ``after_id``) at positions ``final``
    with nothing in flight (its state alone covers the whole input); return its row.

    ``query`` is the finished run: its last checkpoint is the highest id its source started
    (a cut at ``final`` in the batch of the last records is followed by the run's final
    checkpoint, in a batch of its own).

    The coordinator records the completion in its control record last, after retention and
    maintenance: once it is there, nothing of the run writes to the snapshot path."""
    if query.lastProgress is not None:
        offset = json.loads(query.lastProgress.sources[0].endOffset)
        after_id = max(after_id, SourceOffset.from_dict(offset).last_id - 1)
    deadline = time.time() + 60
    while time.time() < deadline:
        last = ControlRecord.read(layout).last_completed or 0
        for row in checkpoints_table.completed(layout)[::-1]:
            at_end = tuple(json.loads(row["barrier_positions"]).values()) == final
            cid = row["checkpoint_id"]
            if cid > after_id and at_end and not row["inflight_rows"] and last >= cid:
                return row
        time.sleep(0.2)
    raise AssertionError(f"no completed checkpoint at {final} under {layout.root}")


def run(
    session: Any,
    tmp_path: Path,
    conf: dict[str, str],
    source: dict[str, str] | None = None,
    snap: str | None = None,
    final: tuple[int, ...] | None = None,
    checkpoint: str = "ck",
    after_id: int = 0,
    processor: Any = None,
    sink: dict[str, str] | None = None,
    keys: tuple[str, ...] = ("user_id",),
    name: str | None = None,
    sink_format: str = "barriered-delta",
    output: Any = None,
) -> tuple[Any, SnapshotLayout]:
    """Run one availableNow query to its end and wait for its last checkpoint.

    ``final`` are the channels' end positions (default: the rate upstream's); the last
    checkpoint must have an id above ``after_id`` (a restored run's own).
    """
    query = start(
        session,
        tmp_path,
        conf,
        source,
        snap,
        checkpoint,
        processor,
        sink,
        keys,
        name,
        sink_format,
        output,
    )
    query.awaitTermination()
    layout = SnapshotLayout.configured(snap or str(tmp_path / "snap"))
    wait_final_checkpoint(layout, final or tuple(upstream().available()), query, after_id)
    return query, layout


def state_at(layout: SnapshotLayout, version: int) -> dict[str, int]:
    """The ``total`` per user in the state table at ``version`` (each key once)."""
    table = scan(  # the deletion vectors applied, as any Delta reader does
        DeltaTable(
            layout.state_table, version=version, storage_options=dict(layout.storage_options)
        )
    )
    keys = table["user_id"].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice in one snapshot"
    return dict(zip(keys, table["total"].to_pylist(), strict=True))


def commit_metadata(layout: SnapshotLayout) -> dict[int, dict[str, Any]]:
    """Commit metadata of every checkpoint commit of the state table, by id."""
    return {
        int(h["barriered.checkpoint_id"]): h
        for h in DeltaTable(
            layout.state_table, storage_options=dict(layout.storage_options)
        ).history()
        if "barriered.checkpoint_id" in h
    }


def checkpoint_cut(
    row: dict[str, Any], metadata: dict[int, dict[str, Any]]
) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Where a completed checkpoint's state stops on each channel (its barrier, or the
    start of its in-flight range), and its in-flight ranges ``[start, end)``."""
    barrier = {int(c): b for c, b in json.loads(row["barrier_positions"]).items()}
    raw = metadata[row["checkpoint_id"]]["barriered.inflight"]
    inflight = {int(c): r for c, r in json.loads(raw).items()}
    return {c: (inflight[c][0] if c in inflight else b) for c, b in barrier.items()}, inflight


def sink_query(kind: str, out: str) -> tuple[Any, dict[str, str]]:
    """The processor and ``barriered-delta`` sink options of a query kind: ``append``
    (one row per record: ``RecordNumbers``) or ``update`` (running totals merged by key)."""
    if kind == "append":
        return RecordNumbers(), {"path": out}
    return RunningTotals(), {"path": out, "mode": "update", "keyColumns": "user_id"}


def expected_output(kind: str, ends: dict[int, int]) -> list[tuple[str, int]]:
    """What one uninterrupted run of a :func:`sink_query` over the records before ``ends``
    writes, sorted: ``(user, n)`` for n = 1..count (append), ``(user, total)`` (update)."""
    if kind == "update":
        return sorted(totals_before(ends).items())
    counts: Counter[str] = Counter()
    for channel, end in ends.items():
        counts.update(upstream().read(channel, 0, end)["user_id"].to_pylist())
    return sorted((user, n) for user, count in counts.items() for n in range(1, count + 1))


def output_rows(out: str, version: int | None = None) -> list[tuple[str, int]]:
    """The rows of a sink's output table (at ``version``), sorted, as (user, number)."""
    table = DeltaTable(out, version=version, storage_options=delta_options(out)).to_pyarrow_table()
    second = "n" if "n" in table.column_names else "total"
    return sorted(zip(table["user_id"].to_pylist(), table[second].to_pylist(), strict=True))


def launch_driver(
    script: Path, args: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``script args`` as a driver process of its own (a new process group, output
    to ``log``, this interpreter and Python path; ``env`` adds environment variables)."""
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_driver_until(
    proc: subprocess.Popen[bytes], log: Path, ready: Callable[[], T | None], timeout_s: float
) -> T:
    """Wait until ``ready()`` returns something other than None (returned); fails showing
    the driver's last output when the driver ends first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while (found := ready()) is None:
        assert proc.poll() is None, f"the driver ended first: {log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"not ready in {timeout_s} s: {log.read_text()[-4000:]}"
        time.sleep(0.2)
    return found


def run_until_killed(query: Any) -> int:
    """The end of a crash-test driver script: print ``STARTED``, wait for ``query`` to end
    and for its coordinator to finish with it (or for the test's SIGKILL), print ``ENDED``;
    return 0, the script's exit code.

    ``barriered.await_termination``, not Spark's ``awaitTermination``: an ``availableNow``
    run can end before the coordinator has handled its last batches, and the script would
    exit before a fault armed at the final checkpoint fired (seen on a loaded CI machine)."""
    print("STARTED", flush=True)
    barriered.await_termination(query)
    print("ENDED", flush=True)
    return 0


def kill_driver(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a driver's whole process group (its Python process and Spark's JVM, as a
    lost driver machine), if it still runs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def kill_driver_when(
    script: Path,
    args: Sequence[str],
    log: Path,
    ready: Callable[[], T | None],
    timeout_s: float = 240.0,
    env: dict[str, str] | None = None,
) -> T:
    """Run ``script args`` in a driver process of its own (:func:`launch_driver`) until
    ``ready()`` returns something other than None, then SIGKILL the driver's whole process
    group (:func:`kill_driver`); return it.

    Fails showing the driver's last output when the driver ends first or ``timeout_s``
    passes. ``env`` adds environment variables.
    """
    proc = launch_driver(script, args, log, env)
    try:
        found = wait_driver_until(proc, log, ready, timeout_s)
        kill_driver(proc)
    finally:
        kill_driver(proc)
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-4000:]
    return found


def state_counts(layout: SnapshotLayout, version: int) -> dict[str, int]:
    """``RecordNumbers``' count per user in the state table at ``version``."""
    table = scan(DeltaTable(layout.state_table, version=version))
    return dict(zip(table["user_id"].to_pylist(), table["count"].to_pylist(), strict=True))


#: Session keys of the crash-test drivers: a checkpoint as often as possible, all kept.
DRIVER_KEYS = {
    "checkpointInterval": "10ms",
    "maxParallelism": "8",
    "bufferPerChannel": "100",
    "retainedCheckpoints": "100",
}


def driver_session(app: str, keys: dict[str, str] | None = None) -> Any:
    """The local session of a crash-test driver process, with barriered installed and
    :data:`DRIVER_KEYS` (and ``keys``) set."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    for key, value in {**DRIVER_KEYS, **(keys or {})}.items():
        spark.conf.set(PREFIX + key, value)
    return spark
