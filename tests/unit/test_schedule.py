"""The coordinator's schedule, started by the source planner (no Spark).

The coordinator decides when the next periodic checkpoint is due, whether it is paused
and in which mode, and publishes that; the planner starts it in the first batch planned
once it is due, exactly once; the coordinator adopts what the planner started.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from barriered.config import BarrieredConf
from barriered.control.offsets import Cut, SourceOffset
from barriered.control.record import ControlRecord
from barriered.control.schedule import Schedule
from barriered.control.triggers import TriggerRequest
from barriered.coordinator import ChannelSignals, CheckpointCoordinator, CoordinatorSettings
from barriered.coordinator.clock import ManualClock
from barriered.coordinator.control_channel import ControlChannel
from barriered.coordinator.driver import QueryCoordinator
from barriered.datasource.planner import PlanInput, plan
from barriered.files.fileio import read_json, write_json
from barriered.statestore.layout import SnapshotLayout

# -- the planner ----------------------------------------------------------------------------


def inp(
    now_ms: int,
    schedule: Schedule | None,
    available: Sequence[int] = (100, 100),
    requests: Sequence[TriggerRequest] = (),
    cancelled: frozenset[int] = frozenset(),
) -> PlanInput:
    return PlanInput(
        available=tuple(available),
        admission=(10, None),  # channel 0 lags: an unaligned cut has in-flight data
        target=None,
        requests=tuple(requests),
        cancelled=cancelled,
        last_completed=None,
        now_ms=now_ms,
        buffer_per_channel=10_000,
        aligned_timeout_ms=10_000,
        schedule=schedule,
    )


def run(schedule: Schedule | None, times: Sequence[int], **kw: Any) -> list[SourceOffset]:
    """Plan one batch per time in ``times`` with the same readings; return the ends."""
    offset = SourceOffset(positions=(0, 0))
    ends = []
    for now in times:
        offset = plan(offset, inp(now, schedule, **kw))
        ends.append(offset)
    return ends


def started(ends: Sequence[SourceOffset]) -> list[tuple[int, int]]:
    return [(k, ev.checkpoint_id) for k, end in enumerate(ends) for ev in end.started]


def test_a_due_checkpoint_is_started_once_and_cut_unaligned_in_the_same_batch() -> None:
    schedule = Schedule(4, due_ms=2_000, mode="unaligned", reason="the policy says so")
    ends = run(schedule, [1_000, 1_999, 2_000, 3_000, 4_000, 5_000])
    assert started(ends) == [(2, 4)]  # not before its due time, then once only
    assert ends[2].started[0].reason == "the policy says so"
    assert ends[2].started[0].mode == "unaligned"
    cut = ends[2].cut
    assert cut is not None and cut.checkpoint_id == 4 and cut.mode == "unaligned"
    # The first batch planned once due is the cut: channel 0's backlog is in flight.
    assert ends[2].positions == (30, 100) and cut.inflight == ((0, 30, 100),)
    assert all(end.last_id == 4 for end in ends[2:])


def test_an_aligned_scheduled_checkpoint_aligns_like_a_requested_one() -> None:
    scheduled = run(Schedule(1, due_ms=0, mode="aligned"), [0, 1_000, 2_000])
    requested = run(None, [0, 1_000, 2_000], requests=[TriggerRequest(1, mode="aligned")])
    assert [e.to_dict() for e in scheduled] == [e.to_dict() for e in requested]


def test_nothing_is_started_while_the_coordinator_says_pause() -> None:
    paused = Schedule(2, due_ms=0, mode="unaligned", paused="1 checkpoint(s) pending [1]")
    assert started(run(paused, [1_000, 2_000, 3_000])) == []


def test_a_stale_or_cancelled_schedule_starts_nothing() -> None:
    schedule = Schedule(3, due_ms=0, mode="unaligned")
    start = SourceOffset(positions=(0, 0), last_id=3)
    assert plan(start, inp(1_000, schedule, available=(0, 0))) is start
    assert started(run(schedule, [1_000], cancelled=frozenset({3}))) == []


def test_a_forced_request_goes_first_and_passes_the_scheduled_id_by() -> None:
    schedule = Schedule(5, due_ms=0, mode="unaligned")
    savepoint = TriggerRequest(6, kind="savepoint", mode="aligned")
    ends = run(schedule, [1_000, 2_000], requests=[savepoint])
    # Only the savepoint starts (the scheduled one would have subsumed it), and id 5 is
    # stale afterwards: the coordinator reserves another id.
    assert started(ends) == [(0, 6)] and not any(end.aborted for end in ends)


def test_a_schedule_of_another_run_is_ignored(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    assert ControlRecord.read(layout).schedule_of(3) is None  # none published yet
    scheduled = Schedule(7, due_ms=0, mode="aligned")
    ControlRecord(epoch=2, schedule=scheduled).write(layout.control_file)
    assert ControlRecord.read(layout).schedule_of(3) is None
    assert ControlRecord.read(layout).schedule_of(2) == scheduled


def test_an_unchanged_record_is_rewritten_only_to_refresh_it(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    taken_over = False
    channel = ControlChannel(layout, 1, 250, lambda: taken_over)
    first = Schedule(4, due_ms=1_000, mode="aligned")
    channel.record = channel.record.with_schedule(first)
    channel.flush(10_000)
    assert ControlRecord.read(layout).schedule_of(1) == first
    Path(layout.control_file).unlink()
    channel.flush(10_249)  # unchanged and fresh: not written
    assert not Path(layout.control_file).exists()
    channel.flush(10_250)  # unchanged but due for a refresh
    assert ControlRecord.read(layout).schedule_of(1) == first
    paused = Schedule(4, due_ms=1_000, mode="aligned", paused="1 pending")
    channel.record = channel.record.with_schedule(paused)
    channel.flush(10_251)  # changed: written at once
    assert ControlRecord.read(layout).schedule_of(1) == paused
    taken_over = True
    channel.record = channel.record.with_schedule(Schedule(5, due_ms=2_000, mode="unaligned"))
    channel.flush(20_000)
    # a newer run owns the path: nothing written
    assert ControlRecord.read(layout).schedule_of(1) == paused


def test_the_heartbeat_is_renewed_at_most_once_per_refresh(tmp_path: Path) -> None:
    channel = ControlChannel(SnapshotLayout.at(str(tmp_path)), None, 250, lambda: False)
    channel.heartbeat(1, 1_000)
    channel.heartbeat(2, 1_249)
    assert channel.record.heartbeat == (1, 1_000)
    channel.heartbeat(3, 1_250)
    assert channel.record.heartbeat == (3, 1_250)


# -- the coordinator core -------------------------------------------------------------------


def core(**settings: Any) -> tuple[CheckpointCoordinator, ManualClock]:
    settings.setdefault("checkpoint_interval_ms", 1_000)
    clock = ManualClock(0)
    return CheckpointCoordinator(CoordinatorSettings(**settings), clock, frozenset()), clock


def test_the_schedule_reserves_an_id_and_follows_the_interval() -> None:
    c, clock = core()
    s = c.schedule()
    assert s is not None and (s.checkpoint_id, s.due_ms, s.paused) == (1, 1_000, None)
    assert c.schedule() == s and c.reserved_id == 1  # reserved once
    assert c.tick() == []
    clock.set(5_000)
    assert c.tick() == []  # due, but the source starts it, not the tick
    assert c.pending_ids == []


def test_savepoints_take_other_ids_than_the_reserved_one() -> None:
    c, _ = core()
    assert c.schedule() is not None and c.reserved_id == 1
    assert c.trigger_savepoint("/sp") == 2
    assert c.trigger_savepoint("/sp2") == 3


def test_the_adopted_scheduled_checkpoint_is_the_periodic_trigger() -> None:
    c, clock = core(min_pause_ms=500)
    reserved = c.schedule()
    assert reserved is not None and reserved.checkpoint_id == 1
    clock.set(1_200)
    c.tick(batch_id=7)
    assert c.adopt(1, "unaligned", "scheduled", at_ms=1_100)
    stats = c.stats(1)
    assert stats is not None and stats.trigger_batch_id == 7 and stats.mode == "unaligned"
    assert c.reserved_id is None
    s = c.schedule()  # max_concurrent=1: paused while 1 is pending
    assert s is not None and s.checkpoint_id == 2 and s.due_ms == 2_100
    assert s.paused is not None and "maxConcurrentCheckpoints=1" in s.paused
    clock.set(1_900)
    c.on_cut(1)  # no participants: completes at 1900; min pause until 2400
    s = c.schedule()
    assert s is not None and (s.checkpoint_id, s.due_ms, s.paused) == (2, 2_400, None)


def test_a_reserved_id_the_source_passed_by_is_replaced() -> None:
    c, _ = core()
    assert c.schedule() is not None and c.trigger_savepoint("/sp") == 2
    c.adopt(2, "aligned", "savepoint started")  # known already: ignored
    c.on_source_last_id(2)  # the source started 2; 1 is stale for it now
    s = c.schedule()
    assert s is not None and s.checkpoint_id == 3
    c.on_source_last_id(3)  # nothing started 3 either (e.g. an availableNow final one)
    s = c.schedule()
    assert s is not None and s.checkpoint_id == 4


def test_the_schedule_carries_the_policys_mode() -> None:
    c, _ = core(unaligned_enabled=True, aligned_timeout_ms=1_000)
    c.tick(signals=ChannelSignals({0: 5_000, 1: 0}, {0: 1_000.0, 1: 1_000.0}, 500))
    s = c.schedule()
    assert s is not None and s.mode == "unaligned" and "predicted alignment" in s.reason


def test_no_schedule_after_shutdown() -> None:
    c, _ = core()
    c.shutdown()
    assert c.schedule() is None


# -- the query coordinator: publishing and adopting -----------------------------------------


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    lay = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(
        snapshot_path=lay.root, checkpoint_interval_ms=60_000, unaligned_enabled=False
    )
    write_json(lay.config_file, {"conf": conf.to_dict(), "channels": 1})
    return lay


def test_the_coordinator_publishes_its_schedule_and_adopts_the_planners_start(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[ControlRecord] = []
    write = ControlRecord.write
    monkeypatch.setattr(ControlRecord, "write", lambda r, uri: (written.append(r), write(r, uri)))
    before = int(time.time() * 1000)
    qc = QueryCoordinator(layout, next_id=1, epoch=None)
    qc.on_progress(0, None, SourceOffset(positions=(10,)).to_dict(), None, 0)
    assert [r.heartbeat and r.heartbeat[0] for r in written] == [0]  # one write a batch
    published = ControlRecord.read(layout).schedule_of(None)
    assert published is not None and published.checkpoint_id == 1
    assert before + 60_000 <= published.due_ms <= int(time.time() * 1000) + 60_000
    assert published.mode == "aligned" and published.paused is None
    assert ControlRecord.read(layout).requests == ()  # nothing requested

    # The planner started it when due (here: planned batch 1 with the schedule due).
    offset = plan(
        SourceOffset(positions=(10,)),
        PlanInput(
            available=(20,),
            admission=(None,),
            target=None,
            requests=(),
            cancelled=frozenset(),
            last_completed=None,
            now_ms=published.due_ms,
            buffer_per_channel=100,
            aligned_timeout_ms=0,
            schedule=published,
        ),
    )
    assert offset.cut == Cut(1, "checkpoint", "aligned", (20,), (), None, published.due_ms)
    qc.on_progress(1, None, offset.to_dict(), None, 0)
    stats = qc.core.stats(1)
    assert stats is not None and stats.status == "completed"  # no participants
    # the completion and the next schedule reach the source in the batch's one write
    assert len(written) == 2 and written[1].last_completed == 1
    assert written[1].schedule is not None and written[1].schedule.checkpoint_id == 2
    assert stats.trigger_batch_id == 0 and stats.cut_batch_id == 1
    following = ControlRecord.read(layout).schedule_of(None)
    assert following is not None and following.checkpoint_id == 2
    assert following.due_ms == published.due_ms + 60_000
    assert read_json(layout.control_file)["epoch"] is None


def test_a_restored_run_starts_its_ids_above_a_scheduled_one(tmp_path: Path) -> None:
    """A crashed run's planner may have started the scheduled id with no other trace on
    the path (no request, no _checkpoints row): a restore must not reuse it."""
    from barriered.statestore.restore_point import highest_checkpoint_id

    lay = SnapshotLayout.at(str(tmp_path / "snap"))
    record = ControlRecord(epoch=0).with_requests([TriggerRequest(1)])
    record.write(lay.control_file)
    assert highest_checkpoint_id(lay) == 1
    record.with_schedule(Schedule(2, due_ms=0, mode="unaligned")).write(lay.control_file)
    assert highest_checkpoint_id(lay) == 2
