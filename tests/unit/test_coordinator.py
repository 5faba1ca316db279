"""The checkpoint coordinator core: one test per rule, driven by a ManualClock (no Spark)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from barriered.barrier.modes import Mode
from barriered.coordinator import (
    AckStats,
    ChannelSignals,
    CheckpointCoordinator,
    CheckpointStats,
    CompletedCheckpoint,
    CoordinatorSettings,
    ManualClock,
)
from barriered.coordinator.coordinator import INTERRUPTED_REASON
from barriered.errors import CheckpointError, CheckpointFailureLimitExceeded

KG = frozenset({"op0/kg0", "op0/kg1"})


def make(
    participants: Any = frozenset(),
    committer: Any = None,
    *,
    next_id: int = 1,
    **settings: Any,
) -> tuple[CheckpointCoordinator, ManualClock]:
    settings.setdefault("checkpoint_interval_ms", 1_000)
    clock = ManualClock(0)
    coordinator = CheckpointCoordinator(
        CoordinatorSettings(**settings), clock, participants, committer, next_id=next_id
    )
    return coordinator, clock


def periodic(
    c: CheckpointCoordinator,
    clock: ManualClock,
    batch_id: int | None = None,
    signals: ChannelSignals | None = None,
) -> list[int]:
    """What production does after a batch: the coordinator ticks and publishes its
    schedule; the source planner starts the scheduled checkpoint once it is due and not
    paused; the coordinator adopts it from the offset. Returns the ids started."""
    c.tick(batch_id=batch_id, signals=signals)
    schedule = c.schedule()
    request = None if schedule is None else schedule.request(clock.now_ms(), last_id=0)
    if request is None:
        return []
    assert c.adopt(request.checkpoint_id, request.mode, request.reason, clock.now_ms())
    return [request.checkpoint_id]


def start(c: CheckpointCoordinator) -> int:
    """The source starts the scheduled checkpoint at once (due or not: e.g. the final
    checkpoint of an availableNow run) and the coordinator adopts it."""
    schedule = c.schedule()
    assert schedule is not None
    assert c.adopt(schedule.checkpoint_id, schedule.mode, schedule.reason)
    return schedule.checkpoint_id


def status(c: CheckpointCoordinator, cid: int) -> tuple[str, str | None]:
    stats = c.stats(cid)
    assert stats is not None
    return stats.status, stats.failure_reason


# ---------------------------------------------------------------- triggering


def test_periodic_checkpoint_after_each_interval() -> None:
    c, clock = make()
    assert periodic(c, clock) == []
    clock.advance(999)
    assert periodic(c, clock) == []
    clock.advance(1)
    assert periodic(c, clock, batch_id=4) == [1]
    stats = c.stats(1)
    assert stats is not None
    assert (stats.kind, stats.trigger_timestamp_ms, stats.trigger_batch_id) == (
        "checkpoint",
        1_000,
        4,
    )
    assert stats.mode == "aligned" and stats.savepoint_target is None
    assert periodic(c, clock) == []  # the tick hands out savepoints only
    c.on_cut(1)  # no participants: the cut completes it
    clock.set(1_999)
    assert periodic(c, clock) == []
    clock.set(2_000)
    assert periodic(c, clock) == [2]


def test_ids_start_at_next_id_and_strictly_increase() -> None:
    c, clock = make(next_id=42, max_concurrent=10)
    seen = []
    for _ in range(3):
        clock.advance(1_000)
        seen += periodic(c, clock)
    seen.append(start(c))
    seen.append(c.trigger_savepoint("/sp"))
    assert seen == [42, 43, 44, 45, 46]
    assert c.next_id == 47


def test_min_pause_since_last_completion() -> None:
    c, clock = make(min_pause_ms=500, max_concurrent=5)
    clock.set(1_000)
    assert periodic(c, clock) == [1]
    clock.set(1_800)
    c.on_cut(1)  # completes at 1800
    clock.set(2_000)  # interval elapsed, pause only 200 ms
    assert periodic(c, clock) == []
    clock.set(2_299)
    assert periodic(c, clock) == []
    clock.set(2_300)
    assert periodic(c, clock) == [2]


def test_min_pause_since_last_abort() -> None:
    c, clock = make(min_pause_ms=500)
    clock.set(1_000)
    periodic(c, clock)
    clock.set(1_900)
    assert c.abort(1, "cancelled")
    clock.set(2_399)
    assert periodic(c, clock) == []
    clock.set(2_400)
    assert periodic(c, clock) == [2]


def test_max_concurrent_pending() -> None:
    c, clock = make(KG, max_concurrent=2)
    clock.set(1_000)
    assert periodic(c, clock) == [1]
    clock.set(2_000)
    assert periodic(c, clock) == [2]
    clock.set(3_000)
    assert periodic(c, clock) == []  # two pending
    clock.set(3_500)
    c.abort(1, "cancelled")
    assert periodic(c, clock) == [3]  # due since 3000, a slot is free now
    assert c.pending_ids == [2, 3]


def test_savepoint_counts_towards_max_concurrent() -> None:
    c, clock = make(KG)
    c.trigger_savepoint("/sp")
    clock.set(1_000)
    assert [r.kind for r in c.tick()] == ["savepoint"]
    assert periodic(c, clock) == []  # due, but paused: the savepoint is pending
    clock.set(2_000)
    assert periodic(c, clock) == []


def test_expired_checkpoint_is_aborted_at_the_timeout() -> None:
    c, clock = make(KG, checkpoint_timeout_ms=5_000, tolerable_failures=5)
    clock.set(1_000)
    assert periodic(c, clock) == [1]
    clock.set(5_999)
    assert periodic(c, clock) == []
    assert status(c, 1) == ("pending", None)
    clock.set(6_000)
    assert periodic(c, clock) == [2]  # expiry frees the slot for the next trigger
    assert status(c, 1) == (
        "aborted",
        "expired after 5000 ms (spark.sql.streaming.barriered.checkpointTimeout=5000 ms), "
        "waiting for its cut (the barriers of its channels were still aligning)",
    )
    stats = c.stats(1)
    assert stats is not None and stats.end_to_end_duration_ms == 5_000
    assert c.consecutive_failures == 1
    assert c.acknowledge(1, "op0/kg0") == "discarded"


def test_an_expired_checkpoint_names_the_participants_it_waited_for() -> None:
    """Issue 36: a checkpoint that cannot complete (a registered operator that never
    acknowledges) is aborted at the timeout with what it waited for, and the query fails
    once the failures exceed the tolerated ones, naming it."""
    waited = frozenset({*(f"state/totals/{g}" for g in range(8)), "state/other/3"})
    c, clock = make(waited, checkpoint_timeout_ms=1_000, tolerable_failures=0)
    cid = start(c)
    c.expect(cid, ["inflight/2"])
    c.on_cut(cid, at_ms=10, batch_id=4)
    for g in (0, 1, 5):
        assert c.acknowledge(cid, f"state/totals/{g}", AckStats()) == "success"
    clock.set(1_000)
    with pytest.raises(CheckpointFailureLimitExceeded) as info:
        c.tick()
    reason = (
        "expired after 1000 ms (spark.sql.streaming.barriered.checkpointTimeout=1000 ms), "
        "waiting for 3/10 acknowledgements, missing the in-flight writer of channel(s) 2; "
        "keyed operator 'other' key group(s) 3; keyed operator 'totals' key group(s) 2-4, "
        "6-7"
    )
    assert status(c, cid) == ("aborted", reason)
    assert f"last failure: checkpoint {cid} ({reason})" in str(info.value)


# ---------------------------------------------------------------- failures


def test_tolerable_failures_then_fatal_error() -> None:
    c, clock = make(KG, checkpoint_timeout_ms=1_500, tolerable_failures=2, max_concurrent=5)
    for t in (1_000, 2_000, 3_000, 4_000):
        clock.set(t)
        periodic(c, clock)
    # checkpoint 1 expired at 2500 -> seen at 3000; checkpoint 2 expired at 4000
    assert c.consecutive_failures == 2
    assert c.pending_ids == [3, 4]
    clock.set(4_500)
    with pytest.raises(CheckpointFailureLimitExceeded) as info:
        periodic(c, clock)
    assert str(info.value) == (
        "3 consecutive checkpoint failures (checkpoints 1, 2, 3), more than "
        "spark.sql.streaming.barriered.tolerableCheckpointFailures=2 allows; last failure: "
        "checkpoint 3 (expired after 1500 ms (spark.sql.streaming.barriered.checkpointTimeout="
        "1500 ms), waiting for its cut (the barriers of its channels were still aligning)). "
        "The query is failed. Fix the cause, or raise "
        "spark.sql.streaming.barriered.tolerableCheckpointFailures to tolerate more failures "
        "(or spark.sql.streaming.barriered.checkpointTimeout if checkpoints need longer)."
    )
    # the query is failed: everything pending is aborted, later calls raise again
    assert c.pending_ids == []
    assert status(c, 4) == (
        "aborted",
        "coordinator failed: too many consecutive checkpoint failures",
    )
    with pytest.raises(CheckpointFailureLimitExceeded):
        periodic(c, clock)
    with pytest.raises(CheckpointFailureLimitExceeded):
        c.trigger_savepoint("/sp")


def test_decline_limit_raises_from_decline() -> None:
    c, _ = make(KG, tolerable_failures=1, max_concurrent=5)
    c.decline(start(c), "op0/kg0", "disk full")
    cid = start(c)
    with pytest.raises(CheckpointFailureLimitExceeded, match=r"last failure: checkpoint 2 "
                       r"\(declined by op0/kg1: no space\)"):  # fmt: skip
        c.decline(cid, "op0/kg1", "no space")


def test_completion_resets_the_failure_count() -> None:
    c, _ = make(KG, tolerable_failures=2, max_concurrent=5)
    c.decline(start(c), "op0/kg0", "x")
    c.decline(start(c), "op0/kg0", "x")
    assert c.consecutive_failures == 2
    cid = start(c)
    c.on_cut(cid)
    c.acknowledge(cid, "op0/kg0")
    c.acknowledge(cid, "op0/kg1")
    assert status(c, cid) == ("completed", None)
    assert c.consecutive_failures == 0
    c.decline(start(c), "op0/kg0", "x")
    assert c.consecutive_failures == 1


def test_subsumed_and_cancelled_do_not_count() -> None:
    c, _ = make(KG, tolerable_failures=0, max_concurrent=5)
    assert c.abort(start(c), "cancelled")
    older = start(c)
    newer = start(c)
    c.on_cut(newer)
    c.acknowledge(newer, "op0/kg0")
    c.acknowledge(newer, "op0/kg1")
    assert status(c, older) == ("aborted", "subsumed")
    assert c.consecutive_failures == 0


def test_abort_can_count_as_failure() -> None:
    c, _ = make(KG, tolerable_failures=0)
    with pytest.raises(CheckpointFailureLimitExceeded, match="executor lost"):
        c.abort(start(c), "executor lost", counts_as_failure=True)


def test_failure_of_a_checkpoint_older_than_the_last_completed_is_not_counted() -> None:
    c, _ = make(KG, tolerable_failures=0, max_concurrent=5)
    sp = c.trigger_savepoint("/sp")  # not subsumed by the completion below
    cid = start(c)
    c.on_cut(cid)
    c.acknowledge(cid, "op0/kg0")
    c.acknowledge(cid, "op0/kg1")
    c.decline(sp, "op0/kg0", "late")  # savepoint failures never count either
    assert c.consecutive_failures == 0


def test_savepoint_failure_does_not_count() -> None:
    c, _ = make(KG, tolerable_failures=0)
    sp = c.trigger_savepoint("/sp")
    c.decline(sp, "op0/kg0", "disk full")
    assert status(c, sp) == ("aborted", "declined by op0/kg0: disk full")
    assert c.consecutive_failures == 0


# ---------------------------------------------------------------- subsumption


def test_completion_subsumes_older_checkpoints_but_not_savepoints() -> None:
    c, _ = make(KG, max_concurrent=5)
    cp1 = start(c)
    sp2 = c.trigger_savepoint("/sp")
    cp3 = start(c)
    cp4 = start(c)
    c.on_cut(cp3)
    c.acknowledge(cp3, "op0/kg0")
    c.acknowledge(cp3, "op0/kg1")
    assert status(c, cp1) == ("aborted", "subsumed")
    assert status(c, sp2) == ("pending", None)
    assert status(c, cp3) == ("completed", None)
    assert status(c, cp4) == ("pending", None)
    assert c.pending_ids == [sp2, cp4]


def test_completed_savepoint_subsumes_nothing() -> None:
    c, _ = make(KG, max_concurrent=5)
    cp1 = start(c)
    sp2 = c.trigger_savepoint("/sp")
    c.on_cut(sp2)
    c.acknowledge(sp2, "op0/kg0")
    c.acknowledge(sp2, "op0/kg1")
    assert status(c, sp2) == ("completed", None)
    assert status(c, cp1) == ("pending", None)


# ---------------------------------------------------------------- completion


def test_completion_only_on_full_ack_after_the_cut() -> None:
    c, _ = make(KG)
    cid = start(c)
    assert c.acknowledge(cid, "op0/kg0") == "success"
    assert c.acknowledge(cid, "op0/kg0") == "duplicate"
    assert c.acknowledge(cid, "op9/kg9") == "unknown"
    c.on_cut(cid, batch_id=3)
    assert status(c, cid) == ("pending", None)
    assert c.acknowledge(cid, "op0/kg1") == "success"
    assert status(c, cid) == ("completed", None)
    assert c.acknowledge(cid, "op0/kg1") == "duplicate"
    assert c.acknowledge(99, "op0/kg1") == "unknown"


def test_all_acks_before_the_cut_complete_at_the_cut() -> None:
    c, _ = make(KG)
    cid = start(c)
    c.acknowledge(cid, "op0/kg0")
    c.acknowledge(cid, "op0/kg1")
    assert status(c, cid) == ("pending", None)
    c.on_cut(cid)
    assert status(c, cid) == ("completed", None)


def test_expected_set_extended_before_the_cut() -> None:
    c, _ = make(KG)
    cid = start(c)
    c.expect(cid, ["inflight/ch3"])
    c.acknowledge(cid, "op0/kg0")
    c.acknowledge(cid, "op0/kg1")
    c.on_cut(cid)
    stats = c.stats(cid)
    assert stats is not None
    assert (stats.status, stats.num_acknowledged, stats.num_expected) == ("pending", 2, 3)
    with pytest.raises(CheckpointError, match=r"cannot expect \['inflight/ch4'\] after the cut"):
        c.expect(cid, ["inflight/ch4"])
    c.acknowledge(cid, "inflight/ch3", AckStats(inflight_rows=5))
    assert status(c, cid) == ("completed", None)


def test_participants_are_captured_at_the_trigger() -> None:
    groups = {"op0/kg0"}
    c, _ = make(lambda: frozenset(groups), max_concurrent=5)
    first = start(c)
    groups.add("op0/kg1")
    second = start(c)
    s1, s2 = c.stats(first), c.stats(second)
    assert s1 is not None and s2 is not None
    assert (s1.num_expected, s2.num_expected) == (1, 2)


def test_decline_aborts() -> None:
    aborted: list[CheckpointStats] = []
    c, _ = make(KG, tolerable_failures=3)
    c.add_abort_listener(aborted.append)
    cid = start(c)
    c.acknowledge(cid, "op0/kg0")
    c.decline(cid, "op0/kg1", "disk full")
    assert status(c, cid) == ("aborted", "declined by op0/kg1: disk full")
    assert c.consecutive_failures == 1
    assert [s.checkpoint_id for s in aborted] == [cid]
    assert aborted[0].num_acknowledged == 1


def test_committer_receives_the_checkpoint_and_its_version_is_recorded() -> None:
    commits: list[CompletedCheckpoint] = []

    def committer(done: CompletedCheckpoint) -> int:
        commits.append(done)
        return 17

    c, _ = make(KG, committer)
    cid = start(c)
    c.on_barrier_positions(cid, {0: 10, 1: 20})
    c.on_cut(cid, batch_id=5)
    c.acknowledge(cid, "op0/kg1", AckStats(state_bytes=3, files=("b.parquet",)))
    assert commits == []
    c.acknowledge(cid, "op0/kg0", AckStats(state_bytes=4, files=("a.parquet",)))
    (done,) = commits
    assert done.checkpoint_id == cid and done.state_table_version is None
    assert done.positions == {0: 10, 1: 20}
    assert list(done.acks) == ["op0/kg0", "op0/kg1"]
    assert done.files == ("a.parquet", "b.parquet")
    assert done.cut_batch_id == 5
    stats = c.stats(cid)
    assert stats is not None and stats.state_table_version == 17


def test_committer_failure_aborts_and_counts() -> None:
    completed: list[CompletedCheckpoint] = []

    def committer(done: CompletedCheckpoint) -> None:
        raise OSError("boom")

    c, _ = make(KG, committer, tolerable_failures=1, max_concurrent=5)
    c.add_complete_listener(completed.append)
    cid = start(c)
    c.on_cut(cid)
    c.acknowledge(cid, "op0/kg0")
    assert c.acknowledge(cid, "op0/kg1") == "success"
    assert status(c, cid) == ("aborted", "commit failed: OSError: boom")
    assert c.consecutive_failures == 1
    assert completed == []
    cid = start(c)
    c.on_cut(cid)
    c.acknowledge(cid, "op0/kg0")
    with pytest.raises(CheckpointFailureLimitExceeded, match="commit failed") as info:
        c.acknowledge(cid, "op0/kg1")
    assert isinstance(info.value.__cause__, OSError)


def test_complete_listeners_run_and_their_errors_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[tuple[str, int]] = []

    def broken(done: CompletedCheckpoint) -> None:
        raise RuntimeError("listener bug")

    c, _ = make(KG, lambda done: 8)
    c.add_complete_listener(lambda done: calls.append(("first", done.checkpoint_id)))
    c.add_complete_listener(broken)
    c.add_complete_listener(lambda done: calls.append(("third", done.state_table_version or 0)))
    cid = start(c)
    c.on_cut(cid)
    c.acknowledge(cid, "op0/kg0")
    with caplog.at_level(logging.ERROR, logger="barriered.coordinator"):
        c.acknowledge(cid, "op0/kg1")
    assert calls == [("first", cid), ("third", 8)]
    assert status(c, cid) == ("completed", None)
    assert any(
        f"for checkpoint {cid} raised" in r.getMessage() and r.exc_info for r in caplog.records
    )


def test_stats_listener_sees_trigger_completion_and_abort() -> None:
    seen: list[tuple[int, str]] = []
    c, _ = make(KG, max_concurrent=5)
    c.add_stats_listener(lambda s: seen.append((s.checkpoint_id, s.status)))
    a = start(c)
    b = start(c)
    c.on_cut(b)
    c.acknowledge(b, "op0/kg0")
    c.acknowledge(b, "op0/kg1")
    assert seen == [(a, "pending"), (b, "pending"), (a, "aborted"), (b, "completed")]


# ---------------------------------------------------------------- savepoints


def test_savepoint_is_aligned_and_issued_at_the_next_tick() -> None:
    c, clock = make(KG, unaligned_enabled=True, aligned_timeout_ms=0, checkpoint_interval_ms=60_000)
    clock.set(10)
    sp = c.trigger_savepoint("s3://bucket/sp-1")
    assert c.pending_ids == [sp]  # pending at once
    clock.set(20)
    (req,) = c.tick()  # interval not elapsed: issued anyway
    assert (req.checkpoint_id, req.kind, req.mode) == (sp, "savepoint", "aligned")
    assert req.requested_ms == 10
    assert c.tick() == []  # handed out once
    assert c.trigger_savepoint("/sp-2") == sp + 1  # forced: ignores max_concurrent too
    assert [r.checkpoint_id for r in c.tick()] == [sp + 1]
    cp = start(c)  # a checkpoint the source starts meanwhile gets the policy's mode
    cp_stats = c.stats(cp)
    assert cp_stats is not None and cp_stats.mode == "unaligned"
    stats = c.stats(sp)
    assert stats is not None and stats.savepoint_target == "s3://bucket/sp-1"


def test_savepoint_target_must_not_be_empty() -> None:
    c, _ = make()
    with pytest.raises(CheckpointError, match="savepoint target"):
        c.trigger_savepoint("  ")


def test_savepoint_does_not_restart_the_periodic_interval() -> None:
    c, clock = make(max_concurrent=5)
    clock.set(900)
    c.trigger_savepoint("/sp")
    clock.set(1_000)
    assert [r.kind for r in c.tick()] == ["savepoint"]
    assert periodic(c, clock) == [2]  # due 1000 after the start, as without the savepoint


def test_a_started_checkpoint_restarts_the_periodic_interval() -> None:
    c, clock = make(max_concurrent=5)
    clock.set(900)
    start(c)  # before it was due
    clock.set(1_000)
    assert periodic(c, clock) == []
    clock.set(1_899)
    assert periodic(c, clock) == []
    clock.set(1_900)
    assert periodic(c, clock) == [2]


# ---------------------------------------------------------------- statistics


def test_stats_durations_acks_and_sizes() -> None:
    c, clock = make(KG)
    clock.set(1_000)
    (cid,) = periodic(c, clock, batch_id=7)
    started = c.stats(cid)
    assert started is not None
    c.on_barrier_positions(cid, {0: 100, 1: 250}, at_ms=1_150)
    c.on_alignment_started(cid, at_ms=1_400)
    c.on_alignment_started(cid, at_ms=1_600)  # only the first counts
    c.expect(cid, ["inflight/ch1"])
    c.on_cut(cid, at_ms=1_900, batch_id=9, effective_mode="unaligned")
    c.acknowledge(cid, "op0/kg0", AckStats(state_bytes=1_000, state_rows=10), at_ms=2_000)
    pending = c.stats(cid)
    assert pending is not None
    assert (pending.status, pending.num_acknowledged, pending.num_expected) == ("pending", 1, 3)
    assert pending.end_to_end_duration_ms is None
    c.acknowledge(cid, "op0/kg1", AckStats(state_bytes=500, state_rows=5), at_ms=2_100)
    c.acknowledge(
        cid, "inflight/ch1", AckStats(inflight_rows=30, inflight_bytes=3_000), at_ms=2_300
    )
    s = c.stats(cid)
    assert s is not None
    assert s == CheckpointStats(
        checkpoint_id=cid,
        kind="checkpoint",
        mode="aligned",
        mode_reason=started.mode_reason,
        status="completed",
        trigger_timestamp_ms=1_000,
        end_timestamp_ms=2_300,
        start_delay_ms=150,
        alignment_duration_ms=500,
        end_to_end_duration_ms=1_300,
        state_bytes=1_500,
        state_rows=15,
        inflight_rows=30,
        inflight_bytes=3_000,
        num_acknowledged=3,
        num_expected=3,
        trigger_batch_id=7,
        cut_batch_id=9,
        barrier_positions={0: 100, 1: 250},
        effective_mode="unaligned",
    )
    assert c.latest_completed() == s


def test_history_in_id_order_with_pending_ones() -> None:
    c, _ = make(KG, max_concurrent=5)
    a = start(c)
    b = start(c)
    c.abort(a, "cancelled")
    d = start(c)
    history = c.history()
    assert [(s.checkpoint_id, s.status) for s in history] == [
        (a, "aborted"),
        (b, "pending"),
        (d, "pending"),
    ]
    assert c.latest_completed() is None


def test_stats_history_is_bounded_and_forgotten_acks_are_unknown() -> None:
    c, _ = make(KG, stats_history_size=2, max_concurrent=5)
    for _ in range(4):
        c.abort(start(c), "cancelled")
    assert [s.checkpoint_id for s in c.history()] == [3, 4]
    assert c.acknowledge(3, "op0/kg0") == "discarded"
    assert c.acknowledge(1, "op0/kg0") == "unknown"  # not known to be aborted: keep files


def test_restore_from_history_continues_ids() -> None:
    old, _ = make(KG, max_concurrent=5)
    done = start(old)
    old.on_cut(done)
    old.acknowledge(done, "op0/kg0")
    old.acknowledge(done, "op0/kg1")
    start(old)  # still pending when the run "crashed"
    rows = [s.to_row() for s in old.history()]

    clock = ManualClock(0)
    c = CheckpointCoordinator.from_history(rows, CoordinatorSettings(), clock, KG)
    assert c.next_id == 3
    assert [(s.checkpoint_id, s.status) for s in c.history()] == [(1, "completed"), (2, "aborted")]
    restored = c.stats(2)
    assert restored is not None and restored.failure_reason is not None
    assert restored.failure_reason.startswith("interrupted")
    latest = c.latest_completed()
    assert latest is not None and latest.checkpoint_id == 1
    assert start(c) == 3
    again = CheckpointCoordinator.from_history(rows, CoordinatorSettings(), clock, KG, next_id=50)
    assert again.next_id == 50


def test_ids_a_killed_run_started_are_recorded_as_aborted() -> None:
    """The restored run learns from the source that ids up to 5 were used; 4 has no row
    (the killed run started it) and 5 is its own: 4 is aborted, interrupted."""
    old, _ = make(KG)
    for _ in range(3):
        done = start(old)
        old.on_cut(done)
        old.acknowledge(done, "op0/kg0")
        old.acknowledge(done, "op0/kg1")
    rows = [s.to_row() for s in old.history()]
    clock = ManualClock(7)
    c = CheckpointCoordinator.from_history(rows, CoordinatorSettings(), clock, KG, next_id=6)
    (lost,) = c.interrupted(0, spared=[5])
    assert (lost.checkpoint_id, lost.status, lost.mode.value) == (4, "aborted", "aligned")
    assert lost.failure_reason == INTERRUPTED_REASON and lost.trigger_timestamp_ms == 7
    assert [(s.checkpoint_id, s.status) for s in c.history()] == [
        (1, "completed"), (2, "completed"), (3, "completed"), (4, "aborted")
    ]  # fmt: skip
    assert c.interrupted(0, spared=[5]) == []  # recorded once
    assert c.adopt(4, Mode.ALIGNED, "late") is False  # and never adopted again
    restored = CheckpointCoordinator.from_history(rows, CoordinatorSettings(), clock, KG, next_id=6)
    # restored from checkpoint 4 (of another path): only 5 is this path's and unfinished
    assert [s.checkpoint_id for s in restored.interrupted(4, spared=[])] == [5]


def test_shutdown_aborts_pending_without_counting() -> None:
    c, clock = make(KG, tolerable_failures=0)
    cid = start(c)
    c.shutdown()
    assert status(c, cid) == ("aborted", "coordinator shut down")
    clock.advance(10_000)
    assert periodic(c, clock) == []
    with pytest.raises(CheckpointError, match="shut down"):
        c.trigger_savepoint("/sp")


# ---------------------------------------------------------------- mode policy wiring


def test_signals_choose_the_scheduled_mode() -> None:
    c, clock = make(KG, unaligned_enabled=True, aligned_timeout_ms=1_000, max_concurrent=5)
    clock.set(1_000)
    calm = ChannelSignals({0: 0, 1: 10}, {0: 100.0, 1: 100.0})
    (first,) = periodic(c, clock, signals=calm)
    stats = c.stats(first)
    assert stats is not None and stats.mode == "aligned_with_timeout"
    clock.set(2_000)
    skewed = ChannelSignals({0: 0, 1: 1_000}, {0: 100.0, 1: 100.0})
    (second,) = periodic(c, clock, signals=skewed)
    stats = c.stats(second)
    assert stats is not None and stats.mode == "unaligned"
    assert "slowest channel 1 has 1000 rows of backlog" in stats.mode_reason


def test_recent_alignments_that_time_out_switch_to_unaligned() -> None:
    c, clock = make(KG, unaligned_enabled=True, aligned_timeout_ms=1_000)
    for _ in range(3):
        cid = start(c)
        assert c.decide_mode().mode == "aligned_with_timeout"
        c.on_alignment_started(cid, at_ms=clock.now_ms())
        clock.advance(1_200)
        c.on_cut(cid, effective_mode="unaligned")
        c.acknowledge(cid, "op0/kg0")
        c.acknowledge(cid, "op0/kg1")
    decision = c.decide_mode()
    assert decision.mode == "unaligned"
    assert "median of the last 3 alignments is 1200 ms" in decision.reason


def test_adopted_checkpoints_of_the_source_are_committed_even_below_next_id() -> None:
    """A restored query's coordinator learns the source's final checkpoint from the same
    offset that sets its next id: the final checkpoint must still be adopted."""
    committed: list[int] = []
    c, _ = make(KG, lambda done: committed.append(done.checkpoint_id), next_id=7)
    assert c.adopt(6, "aligned", "final checkpoint of an availableNow run", at_ms=0)
    assert not c.adopt(6, "aligned", "again")  # known: ignored
    assert c.next_id == 7
    c.on_cut(6)
    for participant in sorted(KG):
        c.acknowledge(6, participant)
    assert committed == [6] and status(c, 6) == ("completed", None)
    assert not c.adopt(6, "aligned", "finished and kept in the history")
    assert c.adopt(9, "aligned", "ahead of next_id") and c.next_id == 10
