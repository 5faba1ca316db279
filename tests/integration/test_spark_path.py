"""End to end on local Spark: the barriered source, keyed state, Delta snapshots, coordinator.

Runs are made with the helpers of ``tests/runs.py`` (a skewed, deterministic ``rate``
upstream, a running total per user, checkpoints as often as possible). The assertions
recompute, from the upstream's own records, what each completed checkpoint must contain.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import barriered
from barriered import cli
from barriered.control.offsets import SourceOffset
from barriered.errors import ConfigError, WorkerPythonError
from barriered.examples import RunningTotals
from barriered.files import storage
from barriered.session import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from runs import (
    CHANNELS,
    FILES_SOURCE,
    MODES,
    PREFIX,
    SOURCE,
    checkpoint_cut,
    commit_metadata,
    run,
    state_at,
    totals_before,
    upstream,
    write_files,
)

pytestmark = pytest.mark.spark


def offsets(query: Any) -> list[tuple[int, SourceOffset]]:
    return [
        (p.batchId, SourceOffset.from_dict(json.loads(p.sources[0].endOffset)))
        for p in query.recentProgress
    ]


def inflight_rows(layout: SnapshotLayout, version: int, checkpoint_id: int) -> set[tuple[int, int]]:
    table = DeltaTable(layout.inflight_table, version=version).to_pyarrow_table()
    rows = table.filter(pa.compute.equal(table["checkpoint_id"], checkpoint_id)).to_pylist()
    return {(r["_channel"], r["_seq"]) for r in rows}


@pytest.mark.parametrize(
    ("session", "mode"),
    [
        ("classic", "aligned"),
        ("classic", "unaligned"),
        # make test under 20 min: aligned_with_timeout's default case is the crash matrix's
        pytest.param("classic", "aligned_with_timeout", marks=pytest.mark.full),
        # Connect drives the same planner: one mode by default, the others under full
        pytest.param("connect", "unaligned", marks=pytest.mark.connect),
        *(
            pytest.param("connect", mode, marks=(pytest.mark.connect, pytest.mark.full))
            for mode in ("aligned", "aligned_with_timeout")
        ),
    ],
    indirect=["session"],
)
def test_completed_checkpoints_hold_exactly_the_records_before_the_barrier(
    session: Any, tmp_path: Path, mode: str
) -> None:
    _query, layout = run(session, tmp_path, MODES[mode])
    done = checkpoints_table.completed(layout)
    assert len(done) >= 2, f"expected several completed checkpoints, got {done}"
    metadata = commit_metadata(layout)
    for row in done:
        cid = row["checkpoint_id"]
        in_state, inflight = checkpoint_cut(row, metadata)
        assert state_at(layout, row["state_table_version"]) == totals_before(in_state), cid
        expected_inflight = {(c, s) for c, (a, b) in inflight.items() for s in range(a, b)}
        assert row["inflight_rows"] == len(expected_inflight)
        if expected_inflight:
            assert row["effective_mode"] == "unaligned"
            got = inflight_rows(layout, row["inflight_table_version"], cid)
            assert got == expected_inflight
    # The last checkpoint covers the whole input.
    assert state_at(layout, done[-1]["state_table_version"]) == totals_before(
        dict(enumerate(upstream().available()))
    )


def test_aligned_checkpoints_block_the_fast_channels(
    session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query, layout = run(session, tmp_path, MODES["aligned"])
    aligning_batches = 0
    for _, end in offsets(query):
        if end.active is None:
            continue
        aligning_batches += 1
        for c in range(CHANNELS):
            assert end.positions[c] <= end.active.barrier[c]
            if c in end.active.arrived:
                assert end.positions[c] == end.active.barrier[c]
    assert aligning_batches > 0, "the lagging channel never made an alignment wait"
    done = checkpoints_table.completed(layout)
    assert all(r["effective_mode"] == "aligned" and r["inflight_rows"] == 0 for r in done)
    waited = [r for r in done if r["cut_batch_id"] > r["barrier_batch_id"]]
    assert waited and all(r["alignment_duration_ms"] > 0 for r in waited)
    # The same history through the public API (by path and by query) and the CLI.
    rows = checkpoints_table.read_rows(layout)
    by_path = barriered.checkpoints(session, layout.root).orderBy("id").collect()
    assert [r.id for r in by_path] == [r["checkpoint_id"] for r in rows]
    assert barriered.checkpoints(session, query).count() == len(rows)
    assert cli.main(["checkpoints", layout.root, "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["checkpoint_id"] for p in printed] == [r["checkpoint_id"] for r in rows]
    assert cli.main(["checkpoints", str(tmp_path / "nothing-here")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_unaligned_checkpoints_complete_within_two_batches(session: Any, tmp_path: Path) -> None:
    query, layout = run(session, tmp_path, MODES["unaligned"])
    done = checkpoints_table.completed(layout)
    assert all(r["cut_batch_id"] - r["barrier_batch_id"] <= 1 for r in done)
    assert any(r["inflight_rows"] > 0 for r in done), "no checkpoint overtook a backlog"
    blocked = [end for _, end in offsets(query) if end.active is not None]
    assert blocked == [], "an unaligned checkpoint stayed open across batches"


def test_a_due_unaligned_checkpoint_is_cut_in_the_first_batch_planned_after(
    session: Any, tmp_path: Path
) -> None:
    """The planner starts the coordinator's scheduled checkpoint itself: its unaligned
    cut is the first batch planned once it is due, not the one after (the listener hears
    of batch k only when Spark already planned k + 1)."""
    conf = {
        **MODES["unaligned"],
        "checkpointInterval": "3s",
        "maxConcurrentCheckpoints": "2",  # the due time alone decides, not a pending one
    }
    for key, value in conf.items():
        session.conf.set(PREFIX + key, value)
    source = {**SOURCE, "rowsPerSecond": "400", "rowsPerChannel": "1000000"}
    events = session.readStream.format("barriered").options(**source)
    events = events.option("snapshotPath", str(tmp_path / "snap")).load()
    out = barriered.keyed(events, "user_id").process(RunningTotals())
    query = (
        out.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    )
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    try:
        deadline = time.monotonic() + 120
        while len(checkpoints_table.completed(layout)) < 4:
            assert time.monotonic() < deadline, "fewer than 3 checkpoints in 120 s"
            time.sleep(0.5)
    finally:
        query.stop()
    progress = {p.batchId: p for p in query.recentProgress}
    planned = {
        b: SourceOffset.from_dict(json.loads(p.sources[0].endOffset)) for b, p in progress.items()
    }
    starts = {s.checkpoint_id: (b, s) for b, end in planned.items() for s in end.started}
    checked = 0
    rows = checkpoints_table.completed(layout)
    for previous, row in itertools.pairwise(rows):
        cid = row["checkpoint_id"]
        batch, started = starts[cid]
        assert row["barrier_batch_id"] == row["cut_batch_id"] == batch, row
        assert row["effective_mode"] == "unaligned"
        # Due by the coordinator's rules: the interval after the previous start, and not
        # before the previous end (minPauseBetweenCheckpoints 0).
        at_previous = starts[previous["checkpoint_id"]][1].at_ms
        due = at_previous + 3_000
        if previous["end_timestamp_ms"] <= started.at_ms:
            due = max(due, previous["end_timestamp_ms"])
        assert started.requested_ms == due, (cid, started, previous)
        assert started.at_ms >= due  # not before it was due
        if batch - 1 in progress:  # the batch before began planning before it was due
            began = datetime.fromisoformat(progress[batch - 1].timestamp.replace("Z", "+00:00"))
            assert began.timestamp() * 1000 < due, (cid, batch)
            checked += 1
    assert checked >= 2
    assert any(r["inflight_rows"] > 0 for r in checkpoints_table.completed(layout))


def test_at_least_once_never_blocks(session: Any, tmp_path: Path) -> None:
    _query, layout = run(session, tmp_path, MODES["at_least_once"])
    done = checkpoints_table.completed(layout)
    # the run's final checkpoint, in a batch of its own after the last records, is aligned
    assert done and all(r["mode"] == "at_least_once" for r in done[:-1])
    assert all(r["inflight_rows"] == 0 for r in done)
    for row in done:
        barrier = {int(c): b for c, b in json.loads(row["barrier_positions"]).items()}
        state = state_at(layout, row["state_table_version"])
        floor = totals_before(barrier)
        assert all(state.get(k, 0) >= v for k, v in floor.items())


def test_a_cut_writes_the_changed_keys_in_one_file_per_partition(
    session: Any, tmp_path: Path
) -> None:
    _query, layout = run(session, tmp_path, MODES["aligned"])
    done = checkpoints_table.completed(layout)
    # every file the operator wrote is named after its partition and cut: one per pair
    written: dict[tuple[str, str], int] = defaultdict(int)
    for path in Path(layout.state_table, "operator=running_totals").glob("*.parquet"):
        partition, cut, _ = path.name.split("-", 2)
        written[(partition, cut)] += 1
    assert written and set(written.values()) == {1}
    assert {p for p, _ in written} <= {"p0", "p1"}
    keys = len(state_at(layout, done[-1]["state_table_version"]))
    assert all(r["state_rows"] <= keys for r in done)  # (every key changes in every batch)
    for row in done:  # each version reads as the state: every key once (state_at)
        state_at(layout, row["state_table_version"])


def test_retention_keeps_what_the_retained_checkpoints_read(session: Any, tmp_path: Path) -> None:
    conf = {
        **MODES["unaligned"],
        "retainedCheckpoints": "2",
        "retention.minAge": "0s",  # no grace period: unread files go at once
        "retention.maintenanceInterval": "2",
    }
    _query, layout = run(session, tmp_path, conf)
    done = checkpoints_table.completed(layout)
    assert len(done) >= 4
    # Maintenance cut the Delta logs; the retained checkpoints' commits (their restore
    # points, read below) are still there.
    for table in (layout.state_table, layout.checkpoints_table):
        assert not (Path(table) / "_delta_log" / f"{0:020d}.json").exists()
    metadata = commit_metadata(layout)
    for row in done[-2:]:
        barrier = {int(c): b for c, b in json.loads(row["barrier_positions"]).items()}
        inflight = {
            int(c): r
            for c, r in json.loads(metadata[row["checkpoint_id"]]["barriered.inflight"]).items()
        }
        in_state = {c: (inflight[c][0] if c in inflight else b) for c, b in barrier.items()}
        assert state_at(layout, row["state_table_version"]) == totals_before(in_state)
    on_disk = {
        p.name for p in Path(layout.state_table).rglob("*.parquet") if "_delta_log" not in p.parts
    }
    read_by_retained = {
        uri.rsplit("/", 1)[1]
        for row in done[-2:]
        for uri in DeltaTable(layout.state_table, version=row["state_table_version"]).file_uris()
    }
    assert read_by_retained <= on_disk
    assert on_disk == read_by_retained, "files no retained checkpoint reads are left behind"
    inflight_live = DeltaTable(layout.inflight_table).to_pyarrow_table()
    assert set(inflight_live.column("checkpoint_id").to_pylist()) <= {
        r["checkpoint_id"] for r in done[-2:]
    }
    assert not (Path(layout.root) / "_acks").exists() or not any(
        (Path(layout.root) / "_acks").iterdir()
    )


def test_files_upstream_on_a_file_uri_snapshot_path(session: Any, tmp_path: Path) -> None:
    """JSON-lines files, one channel per folder; the snapshot path is a URI with options."""
    data = tmp_path / "events"
    sizes = {"a": 180, "b": 45, "c": 60}  # folder a lags: 4x the records, same admission
    expected = write_files(data, sizes)
    source = {**FILES_SOURCE, "path": str(data)}
    snap = (tmp_path / "snap").as_uri()
    conf = {**MODES["aligned"], "snapshotStorageOptions": '{"timeout": "120s"}'}
    query, layout = run(session, tmp_path, conf, source, snap, final=tuple(sizes.values()))
    assert layout.root.startswith("file://")
    # delta-rs names, upper case, and the store's retries (storage.DELTA_RETRIES)
    assert layout.storage_options == {**storage.DELTA_RETRIES, "TIMEOUT": "120s"}
    done = checkpoints_table.completed(layout)
    assert len(done) >= 2
    assert all(r["effective_mode"] == "aligned" for r in done)
    last = done[-1]
    assert json.loads(last["barrier_positions"]) == {"0": 180, "1": 45, "2": 60}
    assert state_at(layout, last["state_table_version"]) == dict(expected)
    blocked_batches = [end for _, end in offsets(query) if end.active and end.active.arrived]
    assert blocked_batches, "the lagging folder never made the others wait"


def test_delta_upstream_one_channel_per_partition(session: Any, tmp_path: Path) -> None:
    from deltalake import write_deltalake

    table = str(tmp_path / "source-table")
    expected: Counter[str] = Counter()
    rows = {"east": 0, "west": 0}
    for version in range(3):
        batch = []
        for region, n in (("east", 40), ("west", 10)):
            for i in range(n):
                user, amount = f"user-{(i + version) % 9}", (i + version) % 4 + 1
                expected[user] += amount
                batch.append({"region": region, "user_id": user, "amount": amount})
            rows[region] += n
        write_deltalake(table, pa.Table.from_pylist(batch), mode="append", partition_by=["region"])
    source = {
        "upstream": "delta",
        "path": table,
        "channelBy": "region",
        "maxRowsPerChannel": "15",
    }
    _query, layout = run(
        session, tmp_path, MODES["aligned"], source, final=(rows["east"], rows["west"])
    )
    done = checkpoints_table.completed(layout)
    assert done and json.loads(done[-1]["barrier_positions"]) == {"0": 120, "1": 30}
    assert state_at(layout, done[-1]["state_table_version"]) == dict(expected)


def test_too_many_failed_checkpoints_fail_the_query(session: Any, tmp_path: Path) -> None:
    conf = {
        **MODES["aligned"],
        "checkpointTimeout": "10ms",  # every alignment behind the lagging channel expires
        "tolerableCheckpointFailures": "0",
    }
    with pytest.raises(Exception, match="tolerableCheckpointFailures=0"):
        run(session, tmp_path, conf)
    rows = checkpoints_table.read_rows(SnapshotLayout.at(str(tmp_path / "snap")))
    assert rows and rows[0]["status"] == "aborted"
    assert (
        rows[0]["failure_reason"].startswith("expired after ")
        and "(spark.sql.streaming.barriered.checkpointTimeout=10 ms), waiting for "
        in (rows[0]["failure_reason"])
    )


def test_bad_options_fail_with_their_name_and_keep_committed_data(
    session: Any, tmp_path: Path
) -> None:
    _query, layout = run(session, tmp_path, MODES["aligned"])
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "snap").rglob("*"))
    version = DeltaTable(layout.state_table).version()
    snap = str(tmp_path / "snap")
    reader = session.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap)
    with pytest.raises(Exception, match=r"maxRowsPerChanel|maxrowsperchanel"):
        reader.option("maxRowsPerChanel", "5").load()
    with pytest.raises(Exception, match="checkpointInterval"):
        session.conf.set(PREFIX + "checkpointInterval", "soon")
        session.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap).load()
    session.conf.set(PREFIX + "checkpointInterval", "10ms")
    with pytest.raises(Exception, match="snapshotPath"):
        session.readStream.format("barriered").options(**SOURCE).load()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(Exception, match=rf"snapshotPath.* is under the file '{blocker}'"):
        q = (
            session.readStream.format("barriered")
            .options(**SOURCE)
            .option("snapshotPath", str(blocker / "snap"))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck2"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
    after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "snap").rglob("*"))
    assert after == before
    assert DeltaTable(layout.state_table).version() == version
    assert os.path.isfile(blocker)


def test_install_sets_rocksdb_only_when_no_provider_is_set(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    key, rocksdb = STATE_STORE_PROVIDER, ROCKSDB_PROVIDER
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    for leftover in spark.streams.active:  # install() only sets it while no query runs
        leftover.stop()
    try:
        spark.conf.unset(key)
        assert key not in spark.conf.getAll
        barriered.install(spark)
        assert spark.conf.getAll[key] == rocksdb
        spark.conf.set(key, hdfs)
        with caplog.at_level(logging.INFO, logger="barriered.session"):
            barriered.install(spark)
        assert spark.conf.get(key) == hdfs  # a provider the user chose is kept
        assert f"{key} is {hdfs}: barriered.install() keeps it" in caplog.text
    finally:
        spark.conf.set(key, rocksdb)


def test_install_refuses_workers_that_cannot_import_barriered(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interpreter Spark starts its Python workers with is run once at install()."""
    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", python)
    with pytest.raises(WorkerPythonError) as refused:
        barriered.install(spark)
    assert str(refused.value).startswith(
        f"barriered.install(spark): Spark's Python workers run {python!r} (PYSPARK_PYTHON, "
        "python3 on the PATH when unset), which cannot import barriered: "
        "ModuleNotFoundError: No module named 'barriered'. Set PYSPARK_PYTHON to the "
        "interpreter barriered is installed in before the session starts"
    )


def test_available_now_on_records_over_time_is_refused_with_the_fix(
    session: Any, tmp_path: Path
) -> None:
    """A rate upstream producing over time would end an availableNow run at once with
    nothing read: the query fails with the source's ConfigError, its message first."""
    events = (
        session.readStream.format("barriered")
        .options(upstream="rate", channels="2", rowsPerSecond="50")
        .option("snapshotPath", str(tmp_path / "snap"))
        .load()
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(ConfigError) as refused:
        barriered.await_termination(query, 120)
    assert str(refused.value).splitlines()[0] == (
        "upstream 'rate' with option 'rowsPerSecond' = 50 produces its records over time, "
        "so a trigger(availableNow=True) run would end at once with none: set "
        "'rowsPerSecond' to 0 and 'rowsPerChannel' to the records per channel (all "
        "available at once), or use a processingTime trigger"
    )
