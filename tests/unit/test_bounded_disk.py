"""Bounded disk over long runs (no Spark): a real QueryCoordinator drives many
checkpoints with real acknowledgements and Delta commits; files and bytes under the
snapshot path stay bounded, and every retained checkpoint stays restorable."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from barriered.errors import RestoreError
from barriered.statestore import checkpoints_table, maintenance, retention
from barriered.statestore.acks import Ack, DataFile, read_acks, write_ack, write_data_file
from barriered.statestore.delta_tables import as_json, current_files, truncate_log
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from snapshots import commit_state, state_file, state_rows
from soak import SoakQuery, Usage, usage


def run(query: SoakQuery, checkpoints: int, window: int) -> Usage:
    """Run ``checkpoints`` checkpoints; return the peak usage over the last ``window``
    (a few maintenance cycles, so the peak does not depend on where a cycle stands)."""
    peak = Usage(0, 0)
    for i in range(checkpoints):
        query.checkpoint()
        if i >= checkpoints - window:
            now = usage(query.layout.root)
            peak = Usage(max(peak.files, now.files), max(peak.bytes, now.bytes))
    return peak


def assert_bounded_and_restorable(tmp_path: Path, early: int, late: int) -> None:
    query = SoakQuery(
        tmp_path / "snap",
        retained_checkpoints=2,
        retention_min_age_ms=0,
        retention_history_size=20,
        retention_maintenance_interval=5,
    )
    window = 15  # three maintenance cycles (5 completions each, every 7th is aborted)
    first = run(query, early, window)
    then = run(query, late - early, window)

    # Bounded: the peak after `late` checkpoints is the peak after `early` ones, give or
    # take the size of the retained checkpoints' files (totals grow a digit or two).
    assert then.files <= first.files + 4, (first, then)
    assert then.bytes <= first.bytes * 1.2, (first, then)

    layout = query.layout
    logs = sorted((Path(layout.state_table) / "_delta_log").glob("*.json"))
    assert len(logs) <= 2 * 5 + 2  # cut at the oldest retained version every 5 completions
    rows = checkpoints_table.read_rows(layout)
    assert len(rows) <= 20 + 5 + 1
    assert rows[-1]["checkpoint_id"] == query.checkpoint_id
    assert not list(Path(layout.root, "_acks").iterdir())

    # The oldest retained checkpoint still resolves from the state table's history, with
    # its barrier positions, and reads exactly the state it had.
    oldest, newest = query.completed[-2], query.completed[-1]
    assert sorted(committed_checkpoints(layout))[-2:] == [oldest, newest]
    point = resolve(layout, str(oldest))
    assert point.barrier == (oldest * 10, oldest * 10)
    point.check_files()
    table = DeltaTable(layout.state_table, version=point.state_version).scan().read_all()
    state = {r["key_group"]: r["total"] for r in pa.table(table).to_pylist()}
    assert state == query.totals_at[oldest]
    if point.inflight:
        assert point.inflight == ((0, oldest * 10 - 4, oldest * 10),)
        assert sum(f.rows for f in point.inflight_files()) == 4

    # A checkpoint long out of the window is refused with a message saying so.
    gone = query.completed[0]
    with pytest.raises(RestoreError, match=f"checkpoint {gone} .* left the retention window"):
        resolve(layout, str(gone))


def test_disk_is_bounded_over_150_checkpoints(tmp_path: Path) -> None:
    assert_bounded_and_restorable(tmp_path, 50, 150)


@pytest.mark.full
def test_disk_is_bounded_over_500_checkpoints(tmp_path: Path) -> None:
    assert_bounded_and_restorable(tmp_path, 50, 500)


def commit_checkpoint(layout: SnapshotLayout, cid: int) -> int:
    """Commit checkpoint ``cid`` (key group 0 rewritten) with its restore metadata."""
    f = state_file(layout, state_rows(["k1"], [cid], cid, 0), cid, replaces=[0])
    return commit_state(layout, cid, [f], {"barriered.barrier": as_json({"0": cid * 10})})


def values(layout: SnapshotLayout, version: int) -> list[str]:
    table = pa.table(DeltaTable(layout.state_table, version=version).scan().read_all())
    return [str(v) for v in table.column("total").to_pylist()]


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout.at(str(tmp_path / "snap"))


def test_the_log_is_cut_at_the_oldest_retained_version_which_stays_a_restore_point(
    layout: SnapshotLayout,
) -> None:
    versions = {cid: commit_checkpoint(layout, cid) for cid in range(1, 7)}
    log_dir = Path(layout.state_table, "_delta_log")
    assert len(list(log_dir.glob("*.json"))) == 7  # the table's creation, one per checkpoint
    # Commits younger than the grace period stay (a reader may be loading them).
    assert truncate_log(layout.state_table, versions[4], min_age_ms=600_000) == 0

    assert truncate_log(layout.state_table, versions[4]) == versions[4]  # 0 .. checkpoint 3
    assert sorted(p.name[:20] for p in log_dir.glob("*.json")) == [
        f"{versions[c]:020d}" for c in (4, 5, 6)
    ]
    for cid in (4, 5, 6):  # loadable, and still in the history with their metadata
        assert values(layout, versions[cid]) == [str(cid)]
    history = committed_checkpoints(layout)
    assert sorted(history) == [4, 5, 6]
    assert history[4][0] == versions[4]
    assert json.loads(history[4][1]["barriered.barrier"]) == {"0": 40}
    with pytest.raises(Exception, match=r"(?i)log"):
        DeltaTable(layout.state_table, version=versions[3])
    assert truncate_log(layout.state_table, versions[4]) == 0  # nothing more to cut
    assert commit_checkpoint(layout, 7) == versions[6] + 1  # the table goes on
    assert values(layout, versions[6] + 1) == ["7"]


def test_the_log_before_a_young_delta_checkpoint_stays_for_the_grace_period(
    layout: SnapshotLayout,
) -> None:
    # A reader may have read ``_last_checkpoint`` a moment ago: the Delta checkpoint it
    # names, and the commits after it, stay until a newer checkpoint is as old as the
    # grace period (retention.minAge).
    log_dir = Path(layout.state_table, "_delta_log")

    def age_everything() -> None:
        past = time.time() - 3600
        for path in log_dir.iterdir():
            os.utime(path, (past, past))

    versions = {cid: commit_checkpoint(layout, cid) for cid in range(1, 7)}
    age_everything()
    before = sorted(p.name for p in log_dir.glob("0*"))
    assert truncate_log(layout.state_table, versions[4], min_age_ms=600_000) == 0
    cut_checkpoint = f"{versions[4]:020d}.checkpoint.parquet"
    assert sorted(p.name for p in log_dir.glob("0*")) == sorted([*before, cut_checkpoint])
    assert values(layout, versions[1]) == ["1"]  # still loadable

    age_everything()  # the checkpoint at the cut has been there for the grace period
    assert truncate_log(layout.state_table, versions[4], min_age_ms=600_000) == versions[4]
    assert values(layout, versions[4]) == ["4"]

    versions.update({cid: commit_checkpoint(layout, cid) for cid in (7, 8)})
    age_everything()
    assert truncate_log(layout.state_table, versions[7], min_age_ms=600_000) == 0
    assert (log_dir / cut_checkpoint).exists()  # the previous checkpoint a reader may hold
    assert values(layout, versions[4]) == ["4"]
    assert values(layout, versions[8]) == ["8"]


def test_compaction_keeps_the_newest_rows_and_the_retained_ones(layout: SnapshotLayout) -> None:
    for cid in range(1, 13):
        checkpoints_table.append(layout, {"checkpoint_id": cid, "status": "completed"})
    folder = Path(layout.checkpoints_table)
    assert len(list(folder.glob("*.parquet"))) == 12

    commit = checkpoints_table.compact(layout, history_size=5, keep=[2])
    assert commit is not None and len(commit.removed) == 12
    rows = checkpoints_table.read_rows(layout)
    assert [r["checkpoint_id"] for r in rows] == [2, 8, 9, 10, 11, 12]
    assert checkpoints_table.compact(layout, history_size=5, keep=[2]) is None

    retention.record_removed(layout, retention.CHECKPOINTS, commit.version, commit.removed)
    v = commit_checkpoint(layout, 12)
    assert retention.apply(layout, [retention.Retained(12, v, None)]) == 12
    assert len(list(folder.glob("*.parquet"))) == 1
    rows = checkpoints_table.read_rows(layout)
    assert [r["checkpoint_id"] for r in rows] == [2, 8, 9, 10, 11, 12]


def test_maintenance_removes_stray_acks_and_only_the_files_nothing_reads(
    layout: SnapshotLayout,
) -> None:
    v1 = commit_checkpoint(layout, 1)
    committed = DeltaTable(layout.state_table).file_uris()
    # A crash after the commit of checkpoint 1 left its acknowledgement behind.
    (path,) = [f["path"] for f in current_files(DeltaTable(layout.state_table))]
    size = Path(layout.state_table, path).stat().st_size
    kept = DataFile(path, size, 1, {"operator": "op"}, 0)
    write_ack(layout, Ack(1, "state/op/0", True, (kept,)))
    # A task acknowledged checkpoint 2 after it was aborted: its in-flight file was never
    # committed; its keyed state file stays (its partition reports it again)
    inflight = pa.table({"user_id": ["u"], "_channel": [0], "_seq": [7]})
    orphan = write_data_file(layout.inflight_table, {"checkpoint_id": "2"}, "ch0", inflight)
    write_ack(layout, Ack(2, "inflight/0", True, (orphan,)))
    pending = state_file(layout, state_rows(["k1"], [2], 2, 0), 2, replaces=[0])
    write_ack(layout, Ack(2, "state/op/0", True, (pending,)))
    # Checkpoint 3 is still pending: its acknowledgement stays.
    write_ack(layout, Ack(3, "state/op/1", False))
    retained = [retention.Retained(1, v1, None)]

    report = maintenance.run(layout, retained, 10, 60_000, finished_below=3, pending=[3])
    assert report.acks_deleted == 0  # younger than retention.minAge
    assert read_acks(layout, 2)

    report = maintenance.run(layout, retained, 10, 0, finished_below=3, pending=[3])
    assert report.acks_deleted == 2
    assert read_acks(layout, 1) == {} and read_acks(layout, 2) == {}
    assert read_acks(layout, 3)
    assert not Path(layout.inflight_table, orphan.path).exists()
    assert Path(layout.state_table, pending.path).exists()
    assert DeltaTable(layout.state_table).file_uris() == committed
    assert values(layout, v1) == ["1"]


def test_maintenance_deletes_keyed_files_nothing_reads_once_settled(
    layout: SnapshotLayout,
) -> None:
    """A failed attempt's file and a spilled file older than the newest completed
    checkpoint's trigger (by retention.minAge) go; what a version reads, what retention
    tracks, and anything younger stay."""
    v1 = commit_checkpoint(layout, 1)
    (live,) = [f["path"] for f in current_files(DeltaTable(layout.state_table))]
    orphan = state_file(layout, state_rows(["k1"], [9], 2, 0), 2, replaces=[0])
    spill = Path(layout.live_dir, "op", "p0-spill.parquet")
    spill.parent.mkdir(parents=True)
    spill.write_bytes(Path(layout.state_table, orphan.path).read_bytes())
    settled = int(time.time() * 1000) - 1000
    young = state_file(layout, state_rows(["k2"], [9], 3, 0), 3, replaces=[0])
    past = time.time() - 3600
    for old in (Path(layout.state_table, orphan.path), spill):
        os.utime(old, (past, past))
    retained = [retention.Retained(1, v1, None)]
    maintenance.run(layout, retained, 10, 0, finished_below=2, settled_before_ms=settled)
    assert not Path(layout.state_table, orphan.path).exists() and not spill.exists()
    assert Path(layout.state_table, live).exists()  # read by version 1
    assert Path(layout.state_table, young.path).exists()  # written after the trigger
    assert values(layout, v1) == ["1"]
