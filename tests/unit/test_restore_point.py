"""Restore points, savepoints and fault injection on real Delta tables (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from barriered.config import BarrieredConf
from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.control.offsets import Replay, SourceOffset
from barriered.control.record import ControlRecord
from barriered.control.triggers import TriggerRequest
from barriered.datasource import preflight
from barriered.datasource.planner import PlanInput, plan
from barriered.errors import (
    BarrieredError,
    ConfigError,
    InjectedFault,
    RestoreError,
    SnapshotStoreError,
)
from barriered.files.fileio import write_json
from barriered.provider import EXTENSION_CLASS
from barriered.statestore import checkpoints_table
from barriered.statestore.acks import Ack, write_ack
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import highest_checkpoint_id, resolve
from barriered.statestore.savepoints import export
from barriered.testing import faults
from file_tree import tree
from snapshots import checkpoint


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(snapshot_path=layout.root, max_parallelism=8)
    write_json(
        layout.config_file,
        {"conf": conf.to_dict(), "channels": 2, "upstream": {"upstream": "rate"}},
    )
    write_json(layout.operator_file("op"), {"operator": "op", "key_columns": ["user_id"]})
    checkpoint(layout, 1, [10, 10])
    checkpoint(layout, 2, [30, 20], inflight={0: (25, 30)})
    return layout


def test_latest_and_ids_resolve_from_the_state_table(layout: SnapshotLayout) -> None:
    latest = resolve(layout, "latest")
    assert (latest.checkpoint_id, latest.mode, latest.barrier) == (2, "unaligned", (30, 20))
    assert latest.inflight == ((0, 25, 30),)
    assert latest.start_positions == (25, 20)  # the in-flight range is replayed first
    first = resolve(layout, "1")
    assert (first.checkpoint_id, first.start_positions, first.inflight_version) == (
        1,
        (10, 10),
        None,
    )
    latest.check_files()
    assert [f.rows for f in latest.inflight_files()] == [5]


def test_unknown_and_unfinished_ids_are_explained(layout: SnapshotLayout) -> None:
    with pytest.raises(
        RestoreError, match=r"checkpoint 9 does not exist .*completed checkpoints there: \[1, 2\]"
    ):
        resolve(layout, "9")
    checkpoints_table.append(
        layout, {"checkpoint_id": 3, "status": "aborted", "failure_reason": "expired"}
    )
    with pytest.raises(
        RestoreError, match=r"checkpoint 3 under .* is aborted: expired, not completed"
    ):
        resolve(layout, "3")
    with pytest.raises(RestoreError, match="no completed checkpoint under"):
        resolve(SnapshotLayout.at(str(Path(layout.root).parent / "empty")), "latest")


def test_a_changed_max_parallelism_or_channel_count_is_refused(layout: SnapshotLayout) -> None:
    point = resolve(layout, "latest")
    with pytest.raises(ConfigError, match="maxParallelism is fixed"):
        point.check_config(BarrieredConf(snapshot_path=layout.root, max_parallelism=16))
    with pytest.raises(RestoreError, match="taken from 2 channels, this source has 3"):
        point.check_upstream(3, "rate")
    with pytest.raises(RestoreError, match="taken from upstream 'rate', this source reads 'files'"):
        point.check_upstream(2, "files")


def test_damaged_files_are_named_and_left_alone(layout: SnapshotLayout) -> None:
    (victim,) = Path(layout.inflight_table).rglob("*.parquet")
    victim.write_bytes(victim.read_bytes()[:10])
    with pytest.raises(RestoreError, match=f"{victim}' has 10 bytes"):
        resolve(layout, "latest").check_files()
    assert victim.read_bytes()  # not deleted
    resolve(layout, "1").check_files()  # the other checkpoint does not read it


def test_new_ids_stay_above_everything_a_crashed_run_left(layout: SnapshotLayout) -> None:
    assert highest_checkpoint_id(layout) == 2
    ControlRecord().with_requests([TriggerRequest(4)]).write(layout.control_file)
    assert highest_checkpoint_id(layout) == 4
    write_ack(layout, Ack(7, "state/op/3", changed=True))  # acks of a never-committed cut
    assert highest_checkpoint_id(layout) == 7


def test_the_ids_a_previous_versions_run_left_in_its_trigger_log_and_schedule_count(
    layout: SnapshotLayout,
) -> None:
    """A snapshot path the version before the control record wrote: its trigger log and
    schedule are read while no control record exists, and a restore's ids stay above."""
    triggers, schedule = layout.legacy_control_files
    write_json(triggers, {"requests": [{"id": 4}], "cancelled": [5], "last_completed": 2})
    write_json(schedule, {"checkpoint_id": 6, "due_ms": 0, "mode": "aligned", "epoch": 3})
    control = ControlRecord.read(layout)
    assert control.epoch == 3 and control.last_completed == 2 and control.cancelled == {5}
    assert control.schedule_of(3) is not None and control.schedule_of(4) is None
    assert highest_checkpoint_id(layout) == 6
    ControlRecord(epoch=4).with_requests([TriggerRequest(8)]).write(layout.control_file)
    assert highest_checkpoint_id(layout) == 8  # the control record, once written, wins


def test_a_savepoint_is_a_self_contained_copy(layout: SnapshotLayout, tmp_path: Path) -> None:
    saved = export(layout, None, str(tmp_path / "sp"))
    assert (saved.checkpoint_id, saved.state_files, saved.inflight_rows) == (2, 1, 5)
    point = resolve(layout, str(tmp_path / "sp"))  # a path: the savepoint's checkpoint
    assert point.savepoint and point.checkpoint_id == 2
    assert (point.barrier, point.inflight, point.start_positions) == (
        (30, 20),
        ((0, 25, 30),),
        (25, 20),
    )
    point.check_files()
    assert all(f.path and not f.path.startswith("/") for f in point.state_files())
    marker = json.loads((tmp_path / "sp" / "_savepoint.json").read_text())
    assert marker["origin"] == layout.root
    with pytest.raises(SnapshotStoreError, match="is not empty; nothing was written"):
        export(layout, 1, str(tmp_path / "sp"))


def test_a_watermark_restore_without_the_extension_is_refused_writing_nothing(
    layout: SnapshotLayout,
) -> None:
    """A checkpoint whose stores recorded a watermark restores only on a session with the
    provider's extension (the source learns ``spark.sql.extensions`` from the hidden
    session option); the refusal names the conf and leaves the path as it was."""
    store = {"version": None, "key_schema": "{}", "value_schema": "{}", "watermark_ms": 260_000}
    checkpoint(layout, 3, [40, 30], stores={"0-default": store})
    options = {"snapshotPath": layout.root, "restoreFrom": "latest", "maxParallelism": "8"}
    before = tree(layout.root)
    for extensions in ("", "com.example.Other"):
        session = json.dumps({"spark.sql.extensions": extensions})
        with pytest.raises(RestoreError) as refused:
            preflight.checked({**options, SESSION_CONF_OPTION: session})
        assert "cannot restore checkpoint 3 of snapshot path" in str(refused.value)
        assert "its watermark was 260000 ms" in str(refused.value)
        assert f"spark.sql.extensions includes {EXTENSION_CLASS}" in str(refused.value)
        assert tree(layout.root) == before
    session = json.dumps({"spark.sql.extensions": f"com.example.Other, {EXTENSION_CLASS}"})
    _, _, point = preflight.checked({**options, SESSION_CONF_OPTION: session})
    assert point is not None and point.checkpoint_id == 3
    older = {**options, "restoreFrom": "2", SESSION_CONF_OPTION: "{}"}  # no stores: no watermark
    assert preflight.checked(older)[2] is not None


def test_replay_is_carried_until_every_range_is_delivered() -> None:
    replay = Replay("/t", 2, ((0, 25, 30),), ((0, "/t/a.parquet"),))
    start = SourceOffset(positions=(25, 20), last_id=2, replay=replay)
    assert SourceOffset.from_dict(json.loads(json.dumps(start.to_dict()))) == start
    inp = PlanInput(
        available=[40, 20], admission=[3, 3], target=None, requests=(), cancelled=(),
        last_completed=2, now_ms=0, buffer_per_channel=100, aligned_timeout_ms=0,
    )  # fmt: skip
    first = plan(start, inp)
    assert first.positions == (28, 20) and first.replay == replay
    second = plan(first, inp)
    assert second.positions == (31, 20) and second.replay is None


def test_a_fault_fires_once_at_the_first_matching_checkpoint(layout: SnapshotLayout) -> None:
    faults.inject(layout.root, faults.BEFORE_COMMIT, checkpoint_id=3)
    faults.fire(layout, faults.BEFORE_COMMIT, 2)  # below the armed id: nothing happens
    assert faults.fired(layout.root, faults.BEFORE_COMMIT) is None
    crashes: list[BarrieredError] = []
    with pytest.raises(
        InjectedFault, match=r"injected fault at before_commit \(checkpoint 4\)"
    ) as info:
        faults.fire(layout, faults.BEFORE_COMMIT, 4, crashes.append)
    assert crashes == [info.value]  # the coordinator hands that very error to the source
    assert faults.fired(layout.root, faults.BEFORE_COMMIT)["checkpoint_id"] == 4  # type: ignore[index]
    faults.fire(layout, faults.BEFORE_COMMIT, 5)  # fired already: never again
    with pytest.raises(ValueError, match="unknown fault point"):
        faults.inject(layout.root, "somewhere")
