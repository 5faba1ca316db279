"""A restored query starts at the watermark of the checkpoint it was restored from.

Spark keeps a query's watermark in its checkpoint location's offset log, so a query
restored into a new location would start at watermark 0 and accept records that the
checkpoint's watermark had made late. In append mode such a record re-creates a window
that was emitted and evicted before the cut, and the window is emitted a second time.
The provider records the cut batch's watermark with each store's acknowledgement, the
restore manifest carries it, and the session extension ``RestoredWatermark`` raises every
stateful operator's watermark of the restored query to it.

The test reads a ``files`` upstream: a first ``availableNow`` run reads event times 1..300 s
(its final checkpoint is cut at watermark 260 s, after windows up to 240 s were emitted and
evicted). Then a file arrives with a record at 5 s (late by the checkpoint's watermark,
in the emitted window [0, 60)) and one at 301 s, and a second ``availableNow`` run restores
the checkpoint at another parallelism. Its first batch delivers both records: at watermark 0
the late one would come back as window [0, 60) with one record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import barriered
from barriered.provider import EXTENSION_CLASS
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from runs import commit_metadata, wait_final_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.provider]

HERE = Path(__file__).parent
PREFIX = "spark.sql.streaming.barriered."
#: Event times (s) of the first run's records; the watermark delay and window (s).
FIRST, DELAY, WINDOW = range(1, 301), 40, 60
#: The records that arrive after the first run: (event time s, user, amount).
LATE, ON_TIME = (5, "u0", 1000), (301, "u1", 7)


def _write(folder: Path, name: str, rows: list[tuple[int, str, int]]) -> None:
    """A complete JSON-lines file, renamed into place (as the upstream requires)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    lines = (json.dumps({"t": t, "user_id": u, "amount": a}) + "\n" for t, u, a in rows)
    tmp.write_text("".join(lines))
    os.replace(tmp, folder / name)


def _windows(events: DataFrame) -> DataFrame:
    """Count and total per user and tumbling window, appended when the watermark passes."""
    return (
        barriered.records(events)
        .withColumn("ts", F.timestamp_seconds("t"))
        .withWatermark("ts", f"{DELAY} seconds")
        .groupBy(F.window("ts", f"{WINDOW} seconds"), "user_id")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .select(F.unix_seconds("window.start").alias("start"), "user_id", "n", "total")
    )


def _start(spark: Any, tmp: Path, checkpoint: str, partitions: int, restore: bool) -> Any:
    """Start the windowed count availableNow into the ``barriered-delta`` sink."""
    for key, value in {"checkpointInterval": "1h", "maxParallelism": "16"}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set(PREFIX + "unaligned.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    snap = str(tmp / "snap")
    events = spark.readStream.format("barriered").options(
        upstream="files",
        path=str(tmp / "in"),
        schema="t long, user_id string, amount long",
        maxRowsPerChannel="40",
        snapshotPath=snap,
    )
    if restore:
        events = events.option("restoreFrom", "latest")
    return (
        _windows(events.load())
        .writeStream.format("barriered-delta")
        .options(snapshotPath=snap, path=str(tmp / "out"))
        .outputMode("append")
        .option("checkpointLocation", str(tmp / checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _run(spark: Any, tmp: Path, checkpoint: str, partitions: int, restore: bool) -> None:
    """One availableNow run, until its final checkpoint completed."""
    query = _start(spark, tmp, checkpoint, partitions, restore)
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    rows = sum(len(f.read_text().splitlines()) for f in (tmp / "in" / "c0").glob("*.jsonl"))
    wait_final_checkpoint(SnapshotLayout.configured(str(tmp / "snap")), (rows,), query)


def _output(tmp: Path) -> list[tuple[Any, ...]]:
    table = DeltaTable(str(tmp / "out")).to_pyarrow_table()
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names), strict=True))


def _expected(records: list[tuple[int, str, int]], watermark: int) -> list[tuple[Any, ...]]:
    """The windows whose end the watermark passed, over ``records``."""
    groups: dict[tuple[int, str], tuple[int, int]] = {}
    for t, user, amount in records:
        n, total = groups.get((t - t % WINDOW, user), (0, 0))
        groups[(t - t % WINDOW, user)] = (n + 1, total + amount)
    return sorted((s, u, n, a) for (s, u), (n, a) in groups.items() if s + WINDOW <= watermark)


def _first_run(spark: Any, tmp: Path) -> tuple[list[tuple[int, str, int]], list[Any]]:
    """The first run and the late file after it; return its records and its output."""
    first = [(t, f"u{t % 3}", t) for t in FIRST]
    _write(tmp / "in" / "c0", "part-000.jsonl", first)
    _run(spark, tmp, "ck1", 2, restore=False)
    emitted = _expected(first, FIRST[-1] - DELAY)
    assert _output(tmp) == emitted
    _write(tmp / "in" / "c0", "part-001.jsonl", [LATE, ON_TIME])
    return first, emitted


def test_a_restored_query_drops_what_the_checkpoints_watermark_made_late(
    provider_spark: Any, tmp_path: Path
) -> None:
    first, emitted = _first_run(provider_spark, tmp_path)
    cut_watermark = FIRST[-1] - DELAY

    layout = SnapshotLayout.configured(str(tmp_path / "snap"))
    last = checkpoints_table.completed(layout)[-1]["checkpoint_id"]
    stores = operators.stores_of(commit_metadata(layout)[last])
    assert {s["watermark_ms"] for s in stores.values()} == {cut_watermark * 1000}

    _run(provider_spark, tmp_path, "ck2", 3, restore=True)
    # The late record is dropped: window [0, 60) is not emitted again; [300, 360) is open.
    assert _output(tmp_path) == emitted
    assert _expected([*first, ON_TIME], ON_TIME[0] - DELAY) == emitted


def _unextended(tmp: Path, checkpoint: str, restore: bool) -> str:
    """Run ``unextended_driver.py``; return what it printed (it must have failed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    driver = [HERE / "unextended_driver.py", tmp, checkpoint, "1" if restore else "0"]
    done = subprocess.run(
        [sys.executable, *map(str, driver)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    return done.stdout


@pytest.mark.full  # two driver processes of their own: their session lacks the extension
def test_without_the_extension_a_restore_is_refused(provider_spark: Any, tmp_path: Path) -> None:
    """On a session with the provider but without ``RestoredWatermark`` in
    ``spark.sql.extensions``, restoring a checkpoint with a watermark is refused when the
    source is loaded, naming the conf, and writes nothing. A restored checkpoint location
    restarted on such a session fails at its first batch (the provider refuses), and its
    output stays as it was."""
    _, emitted = _first_run(provider_spark, tmp_path)
    before = {"snap": tree(tmp_path / "snap"), "out": tree(tmp_path / "out")}
    message = _unextended(tmp_path, "ck-unextended", restore=True)
    assert "RestoreError: cannot restore checkpoint" in message, message
    assert "its watermark was 260000 ms" in message
    assert f"spark.sql.extensions includes {EXTENSION_CLASS}" in message
    assert {"snap": tree(tmp_path / "snap"), "out": tree(tmp_path / "out")} == before
    assert not (tmp_path / "ck-unextended").exists()

    _run(provider_spark, tmp_path, "ck2", 3, restore=True)
    _write(tmp_path / "in" / "c0", "part-002.jsonl", [(302, "u2", 5)])
    message = _unextended(tmp_path, "ck2", restore=False)
    assert "restored from a checkpoint whose watermark was 260000 ms" in message, message
    assert f"only when spark.sql.extensions includes {EXTENSION_CLASS}" in message
    assert _output(tmp_path) == emitted
