"""Savepoints and upstream release, end to end on local Spark with the files upstream."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.examples import RunningTotals
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from runs import (
    CLASSIC_THEN_CONNECT,
    FILES_SOURCE,
    MODES,
    PREFIX,
    commit_metadata,
    run,
    state_at,
    write_files,
)

pytestmark = pytest.mark.spark


@CLASSIC_THEN_CONNECT
def test_a_savepoint_of_a_running_query_restores_elsewhere(session: Any, tmp_path: Path) -> None:
    data = tmp_path / "events"
    sizes = {"a": 60, "b": 30, "c": 30}
    first = write_files(data, sizes, tag="first")
    for key, value in MODES["aligned"].items():
        session.conf.set(PREFIX + key, value)
    snap_a = tmp_path / "snap-a"
    events = (
        session.readStream.format("barriered")
        .options(**FILES_SOURCE, path=str(data))
        .option("snapshotPath", str(snap_a))
        .load()
    )
    out = barriered.keyed(events, "user_id").process(RunningTotals())
    query = out.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck-a"))
    query = query.start()
    try:
        query.processAllAvailable()
        saved = barriered.savepoint(query, str(tmp_path / "sp"))
    finally:
        query.stop()
    rows = checkpoints_table.completed(SnapshotLayout.at(str(snap_a)))
    assert [r["kind"] for r in rows if r["checkpoint_id"] == saved.checkpoint_id] == ["savepoint"]
    sp = SnapshotLayout.at(saved.path)
    (sp_row,) = checkpoints_table.read_rows(sp)
    assert json.loads(sp_row["barrier_positions"]) == {"0": 60, "1": 30, "2": 30}
    assert state_at(sp, sp_row["state_table_version"]) == dict(first)

    # Another machine: the savepoint moves, the original snapshot path is gone.
    moved = tmp_path / "machine-b" / "sp"
    shutil.move(saved.path, moved)
    shutil.rmtree(snap_a)
    everything = first + write_files(data, sizes, tag="second")
    source = {**FILES_SOURCE, "path": str(data), "restoreFrom": str(moved)}
    snap_b = str(tmp_path / "snap-b")
    _, layout = run(session, tmp_path, {}, source, snap_b, (120, 60, 60), "ck-b")
    done = checkpoints_table.completed(layout)
    assert min(r["checkpoint_id"] for r in done) > saved.checkpoint_id
    assert state_at(layout, done[-1]["state_table_version"]) == dict(everything)


def manifest_ends(snap: Path) -> dict[str, tuple[int, int]]:
    """Relative file path -> (channel, end position) from the files upstream manifest."""
    ends = {}
    for line in (snap / "_source" / "files_manifest.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "path" in record and "start" in record:
            ends[record["path"]] = (int(record["channel"]), record["start"] + record["rows"])
    return ends


def test_consumed_files_are_archived_and_older_checkpoints_still_restore(
    session: Any, tmp_path: Path
) -> None:
    data, archive = tmp_path / "events", tmp_path / "archive"
    expected = write_files(data, {"a": 90, "b": 30, "c": 30}, parts=3)
    source = {**FILES_SOURCE, "path": str(data), "archiveTo": str(archive)}
    # Three retained: the run's last two are both at the end (the cut with the last
    # records, then the final one in a batch of its own).
    conf = {**MODES["aligned"], "retainedCheckpoints": "3", "bufferPerChannel": "10"}
    _, layout = run(session, tmp_path, conf, source, final=(90, 30, 30))
    archived = sorted(str(p.relative_to(archive)) for p in archive.rglob("*.json"))
    assert archived, "no consumed file was archived"
    assert not any((data / p).exists() for p in archived)
    # Nothing a retained checkpoint reads from the upstream was released.
    committed = commit_metadata(layout)
    done = [r for r in checkpoints_table.completed(layout) if r["checkpoint_id"] in committed]
    oldest = json.loads(done[-3]["barrier_positions"])
    assert tuple(oldest.values()) < (90, 30, 30)
    ends = manifest_ends(tmp_path / "snap")
    for path in archived:
        channel, end = ends[path]
        assert end <= oldest[str(channel)], (path, end, oldest)
    # Restoring the older retained checkpoint reads archived files again.
    older = done[-3]["checkpoint_id"]
    _, layout = run(
        session, tmp_path, conf, {**source, "restoreFrom": str(older)}, final=(90, 30, 30),
        checkpoint="ck-restored", after_id=done[-1]["checkpoint_id"],
    )  # fmt: skip
    last = checkpoints_table.completed(layout)[-1]
    assert state_at(layout, last["state_table_version"]) == dict(expected)
