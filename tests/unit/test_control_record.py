"""The control record: what the coordinator tells the source, in one file, and its
reading of a snapshot path the previous version wrote (no Spark)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from barriered.barrier import Mode
from barriered.control.record import ControlRecord, Fatal
from barriered.control.schedule import Schedule
from barriered.control.triggers import TriggerRequest
from barriered.errors import (
    BarrieredError,
    CheckpointFailureLimitExceeded,
    InjectedFault,
    MirrorError,
    SnapshotStoreError,
    UnsupportedOperatorError,
)
from barriered.files.fileio import write_json
from barriered.statestore.layout import SnapshotLayout


def _layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout.at(str(tmp_path / "snap"))


def test_absent_control_record_reads_as_empty(tmp_path: Path) -> None:
    record = ControlRecord.read(_layout(tmp_path))
    assert record == ControlRecord()
    assert record.requests == () and record.cancelled == frozenset()
    assert record.last_completed is None and record.schedule is None and record.fatal is None


def test_empty_json_object_reads_as_empty_record(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    write_json(layout.control_file, {})
    assert ControlRecord.read(layout) == ControlRecord()


def test_corrupt_control_record_is_reported(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    Path(layout.control_file).parent.mkdir(parents=True)
    Path(layout.control_file).write_text('{"requests": [')
    with pytest.raises(SnapshotStoreError, match=r"control\.json"):
        ControlRecord.read(layout)


def test_control_record_write_read_round_trip(tmp_path: Path) -> None:
    layout = _layout(tmp_path)  # parent created on write
    record = (
        ControlRecord(epoch=4)
        .with_requests([TriggerRequest(1, reason="interval", requested_ms=10)])
        .with_requests([TriggerRequest(2, kind="savepoint", mode=Mode.UNALIGNED, requested_ms=20)])
        .with_cancelled([1])
        .with_completed(1, release=(3, 4), positions=(5, 6))
        .with_heartbeat(7, 1_000)
        .with_schedule(Schedule(3, due_ms=2_000, mode=Mode.ALIGNED, reason="interval"))
    )
    record.write(layout.control_file)
    back = ControlRecord.read(layout)
    assert back == record
    assert back.cancelled == frozenset({1})
    assert back.last_completed == 1 and back.completed_positions == (5, 6)
    assert back.release == (3, 4) and back.heartbeat == (7, 1_000)
    assert [r.checkpoint_id for r in back.requests] == [1, 2]
    assert back.requests[1] == TriggerRequest(2, "savepoint", "unaligned", "", 20)
    assert back.ids() == {1, 2, 3}
    # no temporary files left behind
    assert sorted(p.name for p in Path(layout.control_file).parent.iterdir()) == ["control.json"]


def test_control_record_is_written_sorted_by_id(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    ControlRecord().with_requests([TriggerRequest(3), TriggerRequest(1)]).write(layout.control_file)
    assert [r.checkpoint_id for r in ControlRecord.read(layout).requests] == [1, 3]
    raw = json.loads(Path(layout.control_file).read_text())
    assert [r["id"] for r in raw["requests"]] == [1, 3]


def test_control_record_keeps_only_the_most_recent_entries(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    # added newest first: the write keeps the highest ids
    record = ControlRecord().with_requests([TriggerRequest(i) for i in range(40, 0, -1)])
    record.with_cancelled(range(1, 41)).write(layout.control_file)
    back = ControlRecord.read(layout)
    assert [r.checkpoint_id for r in back.requests] == list(range(9, 41))
    assert back.cancelled == frozenset(range(9, 41))


def test_with_requests_returns_a_new_record() -> None:
    empty = ControlRecord()
    one = empty.with_requests([TriggerRequest(1)])
    assert empty.requests == ()
    assert one.requests == (TriggerRequest(1),)
    two = one.with_requests([TriggerRequest(2, mode=Mode.UNALIGNED)])
    assert [r.checkpoint_id for r in two.requests] == [1, 2]
    assert one.requests == (TriggerRequest(1),)


def test_with_cancelled_accumulates() -> None:
    record = ControlRecord().with_requests([TriggerRequest(1)]).with_completed(0)
    a = record.with_cancelled([1, 2])
    b = a.with_cancelled([2, 5])
    assert record.cancelled == frozenset()
    assert a.cancelled == frozenset({1, 2})
    assert b.cancelled == frozenset({1, 2, 5})
    assert b.requests == record.requests and b.last_completed == 0


def test_with_completed_never_goes_back() -> None:
    record = ControlRecord()
    assert record.with_completed(3).last_completed == 3
    assert record.with_completed(3).with_completed(1).last_completed == 3
    assert record.with_completed(3).with_completed(7).last_completed == 7
    assert record.with_completed(0).last_completed == 0
    assert record.last_completed is None
    kept = record.with_requests([TriggerRequest(1)]).with_cancelled([1]).with_completed(1)
    assert kept.requests == (TriggerRequest(1),) and kept.cancelled == frozenset({1})


@pytest.mark.parametrize(
    "error",
    [
        CheckpointFailureLimitExceeded("too many failed checkpoints"),
        UnsupportedOperatorError("state outside the snapshot: a stream-stream join"),
        MirrorError("two barriered sources in one query"),
        InjectedFault("injected fault at after_commit (checkpoint 2)"),
    ],
)
def test_a_fatal_error_keeps_its_type_and_fails_only_its_own_run(
    tmp_path: Path, error: BarrieredError
) -> None:
    layout = _layout(tmp_path)
    ControlRecord(epoch=3).with_requests([TriggerRequest(1)]).with_fatal(error).write(
        layout.control_file
    )
    back = ControlRecord.read(layout)
    assert back.fatal == Fatal(type(error).__name__, str(error))
    with pytest.raises(type(error), match=re.escape(str(error))) as raised:
        back.raise_fatal(3)
    assert type(raised.value) is type(error)
    back.raise_fatal(4)  # a newer run: not its error
    continued = back.for_run(4)  # the newer run's coordinator continues the record
    assert continued.fatal is None and continued.requests == (TriggerRequest(1),)
    assert continued.epoch == 4


def test_a_fatal_error_of_a_class_this_version_does_not_know_is_a_barriered_error() -> None:
    record = ControlRecord.from_dict({"epoch": 1, "fatal": {"error": "Gone", "message": "m"}})
    with pytest.raises(BarrieredError, match=r"^m$"):
        record.raise_fatal(1)


def test_the_schedule_is_its_runs_only() -> None:
    schedule = Schedule(7, due_ms=0, mode=Mode.ALIGNED)
    record = ControlRecord(epoch=2, schedule=schedule)
    assert record.schedule_of(2) == schedule
    assert record.schedule_of(3) is None
    assert record.for_run(3).schedule is None and record.for_run(2) is record
    assert record.ids() == {7}  # a crashed run may have started it: its id counts


def test_a_previous_versions_trigger_log_and_schedule_are_read_until_a_record_exists(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path)
    triggers, schedule = layout.legacy_control_files
    write_json(
        triggers,
        {
            "requests": [TriggerRequest(4, kind="savepoint").to_dict()],
            "cancelled": [3],
            "last_completed": 2,
            "fatal": "tolerable failures exceeded",
            "release": [1, 2],
            "heartbeat": [9, 1_000],
            "completed_positions": [5, 6],
        },
    )
    write_json(
        schedule,
        {"checkpoint_id": 5, "due_ms": 10, "mode": "unaligned", "reason": "r", "epoch": 2},
    )
    back = ControlRecord.read(layout)
    assert back == ControlRecord(
        epoch=2,
        requests=(TriggerRequest(4, kind="savepoint"),),
        cancelled=frozenset({3}),
        last_completed=2,
        completed_positions=(5, 6),
        release=(1, 2),
        heartbeat=(9, 1_000),
        schedule=Schedule(5, due_ms=10, mode=Mode.UNALIGNED, reason="r"),
    )  # the previous run's fatal message is not carried: the next run starts anew
    back.raise_fatal(2)
    ControlRecord(epoch=3).write(layout.control_file)
    assert ControlRecord.read(layout) == ControlRecord(epoch=3)
