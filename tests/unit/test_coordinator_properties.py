"""Property test: random event sequences never break the coordinator's invariants."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from barriered.coordinator import (
    AckStats,
    CheckpointCoordinator,
    CoordinatorSettings,
    ManualClock,
    TriggerRequest,
)
from barriered.errors import CheckpointFailureLimitExceeded

PARTICIPANTS = frozenset({"kg0", "kg1", "kg2"})

# weighted: acknowledgements and time are common, destructive events rare
OPS = st.tuples(
    st.sampled_from(
        ["advance"] * 4 + ["ack"] * 8 + ["cut"] * 2 + ["savepoint", "expect", "decline", "abort"]
    ),
    st.integers(0, 1_500),
)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(OPS, min_size=10, max_size=100),
    min_pause=st.sampled_from([0, 300]),
    max_concurrent=st.integers(1, 3),
)
def test_random_events_keep_invariants(
    ops: list[tuple[str, int]], min_pause: int, max_concurrent: int
) -> None:
    s = CoordinatorSettings(
        checkpoint_interval_ms=1_000,
        checkpoint_timeout_ms=2_500,
        min_pause_ms=min_pause,
        max_concurrent=max_concurrent,
        tolerable_failures=3,
    )
    clock = ManualClock(0)
    c = CheckpointCoordinator(s, clock, PARTICIPANTS)
    issued: list[tuple[TriggerRequest, int]] = []  # requests and when they started
    try:
        for op, arg in ops:
            pending = c.pending_ids
            target = pending[arg % len(pending)] if pending else None
            if op == "advance":
                clock.advance(arg)
                now = clock.now_ms()
                issued += [(r, r.requested_ms) for r in c.tick(batch_id=now)]
                # the source planner starts the scheduled checkpoint once due; adopted
                schedule = c.schedule()
                due = None if schedule is None else schedule.request(now, last_id=0)
                if due is not None:
                    assert c.adopt(due.checkpoint_id, due.mode, due.reason, now)
                    issued.append((due, now))
                assert all(
                    clock.now_ms() - st_.trigger_timestamp_ms < s.checkpoint_timeout_ms
                    for st_ in c.history()
                    if st_.status == "pending"
                )
            elif op == "savepoint":
                c.trigger_savepoint("/sp")
            elif target is None:
                continue
            elif op == "ack":
                c.acknowledge(target, f"kg{arg % 3}", AckStats(state_bytes=arg))
            elif op == "cut":
                c.on_cut(target, batch_id=arg)
            elif op == "expect":
                if (stats := c.stats(target)) is not None and stats.cut_batch_id is None:
                    c.expect(target, [f"inflight/ch{arg}"])
                    c.acknowledge(target, f"inflight/ch{arg}")
            elif op == "decline":
                c.decline(target, "kg0", "random")
            elif op == "abort":
                c.abort(target, "cancelled")
            _check(c, s)
    except CheckpointFailureLimitExceeded:
        assert c.consecutive_failures == s.tolerable_failures + 1
        assert c.pending_ids == []
    _check_issued(c, s, issued)


def _check(c: CheckpointCoordinator, s: CoordinatorSettings) -> None:
    history = c.history()
    assert [h.checkpoint_id for h in history] == sorted({h.checkpoint_id for h in history})
    pending = [h for h in history if h.status == "pending"]
    for h in history:
        if h.status == "completed":
            assert h.num_acknowledged == h.num_expected
            assert h.cut_batch_id is not None
            if h.kind == "checkpoint":  # subsumption
                assert not [
                    p
                    for p in pending
                    if p.kind == "checkpoint" and p.checkpoint_id < h.checkpoint_id
                ]
        if h.status == "aborted":
            assert h.failure_reason
    assert c.consecutive_failures <= s.tolerable_failures


def _check_issued(
    c: CheckpointCoordinator, s: CoordinatorSettings, issued: list[tuple[TriggerRequest, int]]
) -> None:
    ids = [r.checkpoint_id for r, _ in issued]
    assert len(ids) == len(set(ids))  # each started once
    savepoint_ids = [r.checkpoint_id for r, _ in issued if r.kind == "savepoint"]
    assert savepoint_ids == sorted(savepoint_ids)  # handed out in id order
    history = {h.checkpoint_id: h for h in c.history()}
    periodic = [(r, t) for r, t in issued if r.kind == "checkpoint"]
    assert [r.checkpoint_id for r, _ in periodic] == sorted(r.checkpoint_id for r, _ in periodic)
    for (_, before), (_, after) in itertools.pairwise(periodic):
        assert after - before >= s.checkpoint_interval_ms
    for r, t in periodic:
        ended: list[Any] = [h.end_timestamp_ms for h in history.values() if h.end_timestamp_ms]
        assert not [e for e in ended if t - s.min_pause_ms < e < t]
        still_pending = [
            h
            for cid, h in history.items()
            if cid < r.checkpoint_id and (h.end_timestamp_ms is None or h.end_timestamp_ms > t)
        ]
        assert len(still_pending) < s.max_concurrent
