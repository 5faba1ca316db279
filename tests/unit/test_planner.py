"""Multi-batch simulations and property tests of the source planner (no Spark).

``plan`` is driven the way the source drives it: each batch's end offset is the next
batch's start offset, the upstream grows along a script, the trigger log only ever gains
requests and cancellations, and the clock is a fake ``now_ms`` per batch. The expected
outcomes are written out batch by batch (positions, barrier positions, cut, in-flight
ranges); the property tests check the invariants of docs/design.md ("The model, in micro-batch
terms") against an independent model of per-channel delivery.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from barriered.barrier import (
    AbortReason,
    Barrier,
    BarrierHandler,
    Cancel,
    Data,
    ManualClock,
    Mode,
    TimeAdvance,
)
from barriered.control.model import SAVEPOINT
from barriered.control.offsets import (
    AbortedCheckpoint,
    ActiveCheckpoint,
    Cut,
    SourceOffset,
    StartedCheckpoint,
)
from barriered.control.schedule import Schedule
from barriered.control.triggers import FINAL_REASON, TriggerRequest
from barriered.coordinator.policy import decide_mode
from barriered.coordinator.settings import CoordinatorSettings
from barriered.datasource.alignment import Alignment, Chunk, TraceEntry
from barriered.datasource.planner import PlanInput, Planner, plan
from barriered.testing.recording import RecordingController

ALIGNED_MODES = ("aligned", "aligned_with_timeout")
EXACTLY_ONCE_MODES = ("aligned", "unaligned", "aligned_with_timeout")
ALL_MODES = (*EXACTLY_ONCE_MODES, "at_least_once")

PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# -- the simulation harness -----------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One planning step: the offset it started from, the one it returned, its readings."""

    index: int
    start: SourceOffset
    end: SourceOffset
    inp: PlanInput
    alignment: Alignment | None = None
    """The source's barrier handler after the batch."""
    trace: tuple[TraceEntry, ...] = ()
    """The events the planner fed it in this batch."""

    @property
    def identity(self) -> bool:
        """Whether ``plan`` returned its start offset itself (no new batch for Spark)."""
        return self.end is self.start

    @property
    def positions(self) -> tuple[int, ...]:
        return self.end.positions

    @property
    def cut(self) -> Cut | None:
        return None if self.identity else self.end.cut

    @property
    def started(self) -> tuple[StartedCheckpoint, ...]:
        return () if self.identity else self.end.started

    @property
    def aborted(self) -> tuple[AbortedCheckpoint, ...]:
        return () if self.identity else self.end.aborted


def roundtrip(offset: SourceOffset) -> SourceOffset:
    """The offset as a restarted driver reads it back from Spark's offset log."""
    return SourceOffset.from_dict(json.loads(json.dumps(offset.to_dict())))


def req(
    checkpoint_id: int, mode: str = "aligned", kind: str = "checkpoint", reason: str = ""
) -> TriggerRequest:
    return TriggerRequest(checkpoint_id, kind=kind, mode=Mode(mode), reason=reason)


def simulate(
    batches: int,
    *,
    available: Callable[[int], Sequence[int]] | Sequence[Sequence[int]],
    admission: Sequence[int | None],
    requests: Mapping[int, Sequence[TriggerRequest]] | None = None,
    cancelled: Mapping[int, Collection[int]] | None = None,
    now: Callable[[int], int] | Sequence[int] = lambda k: 1000 * k,
    target: Sequence[int] | None = None,
    buffer: int = 10_000,
    timeout: int = 10_000,
    last_completed: int | None = None,
    start: SourceOffset | None = None,
    restart: bool = False,
    schedule: bool = True,
) -> list[Batch]:
    """Plan ``batches`` micro-batches, each starting from the previous end offset.

    ``requests`` and ``cancelled`` map a batch index to what appears in the trigger log at
    that batch; the log keeps everything that appeared before. With ``restart`` every
    offset goes through JSON between batches, as if the driver restarted each time. With
    ``schedule``, the coordinator's schedule reserves the id above every id it requested
    and the source started, and is never due: an availableNow run's final checkpoint
    takes that id.
    """
    channels = len(admission)
    offset = start if start is not None else SourceOffset(positions=(0,) * channels)
    planner = Planner()
    out: list[Batch] = []
    for k in range(batches):
        reqs = tuple(r for b, rs in sorted((requests or {}).items()) if b <= k for r in rs)
        gone = frozenset(i for b, ids in (cancelled or {}).items() if b <= k for i in ids)
        avail = available(k) if callable(available) else available[min(k, len(available) - 1)]
        inp = PlanInput(
            available=tuple(avail),
            admission=tuple(admission),
            target=None if target is None else tuple(target),
            requests=reqs,
            cancelled=gone,
            last_completed=last_completed,
            now_ms=now(k) if callable(now) else now[k],
            buffer_per_channel=buffer,
            aligned_timeout_ms=timeout,
            schedule=reserved(offset, reqs) if schedule else None,
        )
        if restart:
            offset = roundtrip(offset)
        end = plan(offset, inp) if restart else planner.plan(offset, inp)
        fed = planner.alignment
        out.append(Batch(k, offset, end, inp, fed, () if fed is None else tuple(fed.trace)))
        offset = end
    return out


def reserved(offset: SourceOffset, requests: Sequence[TriggerRequest]) -> Schedule:
    """The coordinator's schedule: the next id of its allocator, not due before long."""
    highest = max([offset.last_id, *(r.checkpoint_id for r in requests)])
    return Schedule(checkpoint_id=highest + 1, due_ms=1 << 62, mode=Mode.ALIGNED)


def positions(batches: Sequence[Batch]) -> list[tuple[int, ...]]:
    return [b.positions for b in batches]


def cuts(batches: Sequence[Batch]) -> list[tuple[int, Cut]]:
    return [(b.index, b.cut) for b in batches if b.cut is not None]


def started_ids(batches: Sequence[Batch]) -> list[tuple[int, int]]:
    return [(b.index, ev.checkpoint_id) for b in batches for ev in b.started]


# The skew scenario of the brief: channel 0 has a backlog of 100 and admits 10 rows per
# batch; channels 1 and 2 are unlimited and their upstream grows by 20 rows per batch.
SKEW_ADMISSION: tuple[int | None, ...] = (10, None, None)


def skew(k: int) -> tuple[int, int, int]:
    return (100, 50 + 20 * k, 50 + 20 * k)


def skew_run(mode: str, batches: int = 12, **kw: Any) -> list[Batch]:
    """Request checkpoint 1 in ``mode`` at batch 1 of the skew scenario (now = 1000 * k)."""
    kw.setdefault("requests", {1: [req(1, mode)]})
    return simulate(batches, available=skew, admission=SKEW_ADMISSION, **kw)


# -- identity and the plain delivery --------------------------------------------------------


def test_no_data_and_no_request_returns_the_start_offset_itself() -> None:
    start = SourceOffset(positions=(5, 7), last_id=3, last_cut=(5, 7))
    inp = PlanInput(
        available=(5, 7),
        admission=(None, 10),
        target=None,
        requests=(req(2), req(3)),
        cancelled=frozenset(),
        last_completed=3,
        now_ms=123,
        buffer_per_channel=10,
        aligned_timeout_ms=0,
    )
    assert plan(start, inp) is start


def test_identity_keeps_the_per_batch_events_of_the_start_offset() -> None:
    """Nothing to do: the planner hands back ``start`` as is, events of its batch included."""
    cut = Cut(1, "checkpoint", "aligned", (5,), (), None, 10)
    start = SourceOffset(
        positions=(5,),
        last_id=1,
        last_cut=(5,),
        cut=cut,
        started=(StartedCheckpoint(1, "checkpoint", Mode.ALIGNED, (5,), 10),),
    )
    inp = PlanInput((5,), (None,), None, (), frozenset(), None, 20, 10, 0)
    assert plan(start, inp) is start


def test_per_batch_fields_of_the_start_offset_are_ignored() -> None:
    cut = Cut(1, "checkpoint", "aligned", (5, 5), (), None, 10)
    noisy = SourceOffset(
        positions=(5, 5),
        last_id=1,
        last_cut=(5, 5),
        cut=cut,
        started=(StartedCheckpoint(1, "checkpoint", Mode.ALIGNED, (5,), 10),),
        aborted=(AbortedCheckpoint(0, "cancelled"),),
        restore={"from": 1},
    )
    inp = PlanInput((9, 20), (2, None), None, (req(2),), frozenset(), 1, 50, 100, 0)
    assert plan(noisy, inp) == plan(noisy.carried(), inp)
    end = plan(noisy, inp)
    assert end.restore == {"from": 1}  # what the run was restored from stays in every offset
    assert [ev.checkpoint_id for ev in end.started] == [2]
    assert end.aborted == ()


def test_delivery_without_checkpoints_follows_admission_and_availability() -> None:
    run = simulate(
        5,
        available=[(25, 0, 7), (25, 3, 7), (40, 3, 7)],
        admission=(10, None, 3),
    )
    assert positions(run) == [(10, 0, 3), (20, 3, 6), (30, 3, 7), (40, 3, 7), (40, 3, 7)]
    assert [b.identity for b in run] == [False, False, False, False, True]
    assert all(b.end.active is None and b.end.cut is None for b in run)
    assert all(b.end.started == () and b.end.aborted == () for b in run)


def test_identity_after_a_cut_until_the_upstream_grows() -> None:
    """Channel 0 has nothing at all (B_0 = D_0 = 0), channel 1 reaches B_1 = 5 in batch 0."""
    run = simulate(
        4,
        available=[(0, 5), (0, 5), (0, 5), (3, 5)],
        admission=(None, None),
        requests={0: [req(1)]},
    )
    assert cuts(run) == [(0, Cut(1, "checkpoint", "aligned", (0, 5), (), None, 0))]
    assert [b.identity for b in run] == [False, True, True, False]
    assert run[3].positions == (3, 5)


# -- aligned ---------------------------------------------------------------------------------


def test_aligned_under_skew_blocks_fast_channels_until_the_slow_one_arrives() -> None:
    run = skew_run("aligned", last_completed=7)
    barrier = (100, 70, 70)
    assert positions(run) == [
        (10, 50, 50),
        (20, 70, 70),  # request: B fixed at (100, 70, 70); fast channels reach it
        *[(10 * (k + 1), 70, 70) for k in range(2, 9)],  # fast channels blocked
        (100, 70, 70),  # channel 0 reaches B_0: the cut
        (100, 250, 250),  # unblocked
        (100, 270, 270),
    ]
    assert run[1].started == (
        StartedCheckpoint(
            checkpoint_id=1,
            kind="checkpoint",
            mode=Mode("aligned"),
            barrier=(100, 70, 70),
            at_ms=1000,
            requested_ms=0,  # the request's time (a schedule's due time)
            reason="",
        ),
    )
    for b in run[1:9]:
        active = b.end.active
        assert active is not None
        assert active.barrier == barrier
        assert active.arrived == (1, 2)
        assert active.started_ms == 1000
        assert b.cut is None
        assert all(p <= q for p, q in zip(b.positions, barrier, strict=True))
    assert cuts(run) == [
        (9, Cut(1, "checkpoint", "aligned", barrier, (), base=7, at_ms=9000)),
    ]
    assert run[9].positions == barrier
    assert run[9].end.active is None
    # cut in a batch with records: an availableNow run would still need its final cut
    assert all(b.end.last_cut is None for b in run[9:])
    assert all(b.end.last_id == 1 for b in run[1:])
    assert all(b.aborted == () for b in run)


def test_aligned_channel_with_nothing_behind_its_barrier_is_blocked_at_once() -> None:
    """A channel whose upstream has nothing new has B = D and its barrier in batch 0."""
    run = simulate(
        4,
        available=[(30, 5), (30, 9), (30, 12), (30, 20)],
        admission=(10, None),
        start=SourceOffset(positions=(0, 5)),
        requests={0: [req(1)]},
    )
    assert list(run[0].started[0].barrier) == [30, 5]
    assert positions(run) == [(10, 5), (20, 5), (30, 5), (30, 20)]
    assert cuts(run)[0] == (2, Cut(1, "checkpoint", "aligned", (30, 5), (), None, 2000))


def test_aligned_with_a_single_channel_cuts_when_it_reaches_its_barrier() -> None:
    run = simulate(
        4,
        available=lambda k: (100 + 5 * k,),
        admission=(40,),
        requests={0: [req(1)]},
    )
    assert positions(run) == [(40,), (80,), (100,), (115,)]
    assert cuts(run) == [(2, Cut(1, "checkpoint", "aligned", (100,), (), None, 2000))]


@pytest.mark.parametrize(
    ("buffer", "barrier", "cut_batch", "expected"),
    [
        # B = min(available, D + buffer) with D = (10, 50, 50) and available (100, 70, 70)
        (0, (10, 50, 50), 1, [(10, 50, 50), (10, 50, 50), (20, 90, 90)]),
        (5, (15, 55, 55), 1, [(10, 50, 50), (15, 55, 55), (25, 90, 90)]),
        (15, (25, 65, 65), 2, [(10, 50, 50), (20, 65, 65), (25, 65, 65), (35, 110, 110)]),
        (25, (35, 70, 70), 3, [(10, 50, 50), (20, 70, 70), (30, 70, 70), (35, 70, 70)]),
    ],
)
def test_buffer_per_channel_bounds_the_barrier_positions(
    buffer: int, barrier: tuple[int, ...], cut_batch: int, expected: list[tuple[int, ...]]
) -> None:
    run = skew_run("aligned", batches=len(expected), buffer=buffer)
    assert list(run[1].started[0].barrier) == list(barrier)
    assert positions(run) == expected
    assert cuts(run) == [
        (cut_batch, Cut(1, "checkpoint", "aligned", barrier, (), None, 1000 * cut_batch))
    ]
    assert run[cut_batch].positions == barrier


# -- unaligned -------------------------------------------------------------------------------


def test_unaligned_cuts_in_the_first_batch_with_the_backlog_in_flight() -> None:
    run = skew_run("unaligned", last_completed=4)
    barrier = (100, 70, 70)
    assert positions(run) == [
        (10, 50, 50),
        (20, 70, 70),  # the cut: nothing delivered past B in the cut batch
        # later batches: nothing blocked
        *[(min(100, 10 * (k + 1)), 50 + 20 * k, 50 + 20 * k) for k in range(2, 12)],
    ]
    assert cuts(run) == [
        (1, Cut(1, "checkpoint", "unaligned", barrier, ((0, 20, 100),), base=4, at_ms=1000)),
    ]
    assert run[1].started[0].mode == "unaligned"
    assert all(b.end.active is None for b in run)
    assert all(b.end.last_cut is None for b in run[1:])  # it had in-flight records
    # the fast channels keep delivering past their barrier in later batches
    assert run[2].positions[1] > barrier[1]
    assert run[2].positions[2] > barrier[2]


def test_unaligned_in_flight_lists_every_lagging_channel_and_only_those() -> None:
    run = simulate(
        2,
        available=[(50, 100, 30, 8), (50, 100, 30, 8)],
        admission=(5, 10, None, None),
        start=SourceOffset(positions=(0, 0, 0, 8)),
        requests={0: [req(1, "unaligned")]},
        buffer=40,
    )
    # B = (min(50, 40), min(100, 40), min(30, 40), 8) = (40, 40, 30, 8)
    assert run[0].positions == (5, 10, 30, 8)
    assert run[0].cut == Cut(
        1, "checkpoint", "unaligned", (40, 40, 30, 8), ((0, 5, 40), (1, 10, 40)), None, 0
    )
    assert run[1].positions == (10, 20, 30, 8)


def test_unaligned_with_every_channel_lagging_still_cuts_in_its_first_batch() -> None:
    """No channel would reach its barrier in the batch: the barrier of the one closest to
    it (channel 1: 40 rows behind, against 90) goes where the batch's delivery ends there,
    arrives first and triggers; channel 0's backlog is overtaken (in flight)."""
    run = simulate(
        2,
        available=[(100, 50)],
        admission=(10, 10),
        requests={0: [req(1, "unaligned")]},
    )
    assert run[0].started[0].barrier == (100, 10)
    assert run[0].positions == (10, 10)
    assert run[0].cut == Cut(1, "checkpoint", "unaligned", (100, 10), ((0, 10, 100),), None, 0)
    assert run[1].positions == (20, 20) and run[1].end.active is None


def test_unaligned_without_backlog_has_no_in_flight_data() -> None:
    run = simulate(
        2,
        available=[(30, 30), (40, 40)],
        admission=(None, None),
        requests={0: [req(1, "unaligned")]},
    )
    assert run[0].cut == Cut(1, "checkpoint", "unaligned", (30, 30), (), None, 0)
    assert run[1].positions == (40, 40)


# -- aligned with timeout --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "cut_batch"),
    [(0, 1), (1, 2), (999, 2), (1000, 2), (1001, 3), (4000, 5), (4001, 6), (7000, 8)],
)
def test_aligned_with_timeout_switches_to_unaligned_once_the_timeout_elapsed(
    timeout: int, cut_batch: int
) -> None:
    """Channels 1 and 2 deliver their barriers at 1000 ms (batch 1): the first batch with
    now - 1000 >= T is the (unaligned) cut. Every event of a batch happens at its time, so
    the switch comes before the batch's records: channel 0 delivers nothing in the cut
    batch (its records from there to B_0 are in flight), but with T = 0, where the switch
    follows the first barrier, after the batch's records."""
    run = skew_run("aligned_with_timeout", timeout=timeout)
    barrier = (100, 70, 70)
    slow = 20 if timeout == 0 else 10 * cut_batch  # channel 0's position in the cut batch
    for b in run[1:cut_batch]:
        assert b.end.active is not None
        assert b.end.active.mode == "aligned_with_timeout"
        assert b.positions[1:] == (70, 70)  # blocked while aligning
    assert cuts(run) == [
        (
            cut_batch,
            Cut(1, "checkpoint", "unaligned", barrier, ((0, slow, 100),), None, 1000 * cut_batch),
        )
    ]
    assert run[cut_batch].positions == (slow, 70, 70)
    assert run[cut_batch].end.active is None
    # after the cut nothing is blocked any more
    k = cut_batch + 1
    assert run[k].positions == (slow + 10, 50 + 20 * k, 50 + 20 * k)


def test_aligned_with_timeout_completes_aligned_before_the_timeout() -> None:
    run = skew_run("aligned_with_timeout", timeout=8001)
    assert positions(run) == positions(skew_run("aligned"))
    assert cuts(run) == [(9, Cut(1, "checkpoint", "aligned", (100, 70, 70), (), None, 9000))]


def test_aligned_with_timeout_elapsing_in_the_batch_that_completes_the_alignment() -> None:
    """now - first barrier == T in the batch where channel 0 would reach B_0.

    The batch's events happen at its time: the switch (R9: as soon as the elapsed time
    reaches T) comes before the batch's records, so the cut is unaligned and channel 0's
    last records before B_0 are in flight.
    """
    run = skew_run("aligned_with_timeout", timeout=8000)
    assert positions(run)[:9] == positions(skew_run("aligned"))[:9]
    assert run[9].positions == (90, 70, 70)
    assert cuts(run) == [
        (9, Cut(1, "checkpoint", "unaligned", (100, 70, 70), ((0, 90, 100),), None, 9000))
    ]


def test_aligned_with_timeout_clock_standing_still_never_switches() -> None:
    run = skew_run("aligned_with_timeout", timeout=1, now=lambda k: 5000)
    assert cuts(run) == [(9, Cut(1, "checkpoint", "aligned", (100, 70, 70), (), None, 5000))]


def test_aligned_with_timeout_counts_from_the_first_barrier() -> None:
    """Requested at 0 ms, T = 1000; channel 1's barrier (B_1 = 30) arrives at 1200 ms.

    R9 measures the alignment from its first barrier, not from the request: channel 1 is
    blocked from 1200 ms on, and the batch at 2400 ms switches (before its records).
    """
    run = simulate(
        6,
        available=[(100, 30)],
        admission=(10, 10),
        requests={0: [req(1, "aligned_with_timeout")]},
        now=lambda k: 600 * k,
        timeout=1000,
    )
    assert positions(run) == [(10, 10), (20, 20), (30, 30), (40, 30), (40, 30), (50, 30)]
    active = run[2].end.active
    assert active is not None and active.arrived == (1,) and active.first_barrier_ms == 1200
    assert cuts(run) == [
        (4, Cut(1, "checkpoint", "unaligned", (100, 30), ((0, 40, 100),), None, 2400)),
    ]


def test_aligned_with_timeout_without_any_barrier_never_switches() -> None:
    """Both channels lag (10 rows per batch to B = 100): nothing is blocked, nothing
    aligns, so the timeout (from the first barrier, R9) never runs: the barriers arrive
    together and the cut is aligned."""
    run = simulate(
        12,
        available=[(100, 100)],
        admission=(10, 10),
        requests={0: [req(1, "aligned_with_timeout")]},
        now=lambda k: 600 * k,
        timeout=1000,
    )
    assert positions(run)[:10] == [(10 * (k + 1),) * 2 for k in range(10)]
    assert all(b.end.active is not None and b.end.active.arrived == () for b in run[:9])
    assert cuts(run) == [(9, Cut(1, "checkpoint", "aligned", (100, 100), (), None, 5400))]


# -- at least once ---------------------------------------------------------------------------


def test_at_least_once_never_caps_and_cuts_when_every_channel_passed_its_barrier() -> None:
    run = skew_run("at_least_once")
    free = simulate(12, available=skew, admission=SKEW_ADMISSION)
    assert positions(run) == positions(free)  # no capping, no blocking
    barrier = (100, 70, 70)
    for b in run[1:9]:
        assert b.end.active is not None
        assert b.end.active.mode == "at_least_once"
        assert b.end.active.arrived == (1, 2)
    assert cuts(run) == [(9, Cut(1, "checkpoint", "at_least_once", barrier, (), None, 9000))]
    assert run[9].positions == (100, 230, 230)
    assert run[9].end.last_cut is None  # cut in a batch with records


def test_at_least_once_with_every_channel_at_its_barrier_cuts_in_the_first_batch() -> None:
    """B = D: every barrier arrives before the batch's records, which come after the
    trigger and so after the cut (the next batch delivers them)."""
    run = skew_run("at_least_once", buffer=0)
    assert positions(run)[:4] == [(10, 50, 50), (10, 50, 50), (20, 90, 90), (30, 110, 110)]
    assert cuts(run) == [(1, Cut(1, "checkpoint", "at_least_once", (10, 50, 50), (), None, 1000))]


def test_at_least_once_caps_a_channel_at_its_barrier_until_it_arrived() -> None:
    """Channel 0 reaches B_0 = 15 in batch 1 and stops there (its records past the barrier
    would come after the trigger); channels that delivered their barrier run free."""
    run = simulate(
        4,
        available=[(100, 5)],
        admission=(10, None),
        requests={0: [req(1, "at_least_once")]},
        buffer=15,
    )
    assert positions(run) == [(10, 5), (15, 5), (25, 5), (35, 5)]
    assert cuts(run) == [(1, Cut(1, "checkpoint", "at_least_once", (15, 5), (), None, 1000))]


# -- stale requests, cancellation, subsumption, savepoints -----------------------------------


def test_stale_requests_are_ignored() -> None:
    start = SourceOffset(positions=(0, 0), last_id=5)
    run = simulate(
        3,
        available=[(10, 10)],
        admission=(None, None),
        start=start,
        requests={0: [req(3), req(5, "unaligned")], 2: [req(4)]},
    )
    assert all(b.started == () and b.end.active is None and b.cut is None for b in run)
    assert [b.identity for b in run] == [False, True, True]
    assert all(b.end.last_id == 5 for b in run)


def test_a_request_is_started_once_although_it_stays_in_the_log() -> None:
    run = skew_run("aligned", batches=14, requests={1: [req(1)], 12: [req(2)]})
    assert started_ids(run) == [(1, 1), (12, 2)]
    # checkpoint 2: channel 0 is exhausted (B_0 = D_0 = 100), the others reach B at once
    assert [(k, c.checkpoint_id) for k, c in cuts(run)] == [(9, 1), (12, 2)]
    assert list(run[12].started[0].barrier) == [100, 290, 290]


def test_requests_are_started_in_id_order_whatever_the_log_order() -> None:
    run = skew_run("aligned", batches=3, requests={1: [req(3), req(2)]})
    assert [ev.checkpoint_id for ev in run[1].started] == [2, 3]
    assert run[1].aborted == (AbortedCheckpoint(2, "subsumed"),)
    assert run[1].end.active is not None and run[1].end.active.checkpoint_id == 3
    assert run[1].end.last_id == 3


def test_cancelling_the_active_checkpoint_aborts_it_and_unblocks() -> None:
    run = skew_run("aligned", cancelled={3: [1]})
    assert run[3].aborted == (AbortedCheckpoint(1, "cancelled"),)
    assert run[3].end.active is None
    assert run[2].positions == (30, 70, 70)  # still blocked
    assert run[3].positions == (40, 110, 110)  # unblocked in the batch of the cancel
    assert cuts(run) == []
    assert started_ids(run) == [(1, 1)]  # not started again
    assert all(b.end.last_id == 1 for b in run[1:])
    assert all(b.aborted == () for b in run[4:])


def test_cancellation_of_a_checkpoint_that_has_not_started_yet() -> None:
    run = skew_run("aligned", batches=4, requests={1: [req(1)]}, cancelled={1: [1]})
    assert all(b.started == () and b.aborted == () for b in run)
    assert all(b.end.last_id == 0 for b in run)
    # a later request is started normally
    run = skew_run("aligned", batches=4, requests={1: [req(1)], 2: [req(2)]}, cancelled={0: [1]})
    assert started_ids(run) == [(2, 2)]


def test_cancelling_an_unknown_or_finished_checkpoint_changes_nothing() -> None:
    base = skew_run("aligned")
    run = skew_run("aligned", cancelled={10: [1], 11: [9]})
    assert [b.end for b in run] == [b.end for b in base]


def test_cancel_while_aligning_without_data_is_not_an_identity() -> None:
    start = SourceOffset(
        positions=(5, 9),
        last_id=1,
        active=ActiveCheckpoint(1, "checkpoint", "aligned", (20, 9), (1,), 0),
    )
    inp = PlanInput((5, 9), (None, None), None, (req(1),), frozenset({1}), None, 10, 100, 0)
    end = plan(start, inp)
    assert end is not start
    assert end.positions == (5, 9)
    assert end.active is None
    assert end.aborted == (AbortedCheckpoint(1, "cancelled"),)
    assert end.last_id == 1


def test_a_newer_request_subsumes_the_aligning_checkpoint() -> None:
    """Checkpoint 2's barriers follow right behind 1's on the channels 1's reached, so the
    source's one barrier handler subsumes 1 (R2) in the batch 2 starts."""
    run = skew_run("aligned", batches=12, requests={1: [req(1)], 3: [req(2)]})
    assert run[3].aborted == (AbortedCheckpoint(1, "subsumed"),)
    # barrier of 2 fixed from the positions at the start of batch 3: D = (30, 70, 70),
    # channels 1 and 2 (blocked by 1) right where they are
    assert run[3].started == (
        StartedCheckpoint(
            checkpoint_id=2,
            kind="checkpoint",
            mode=Mode("aligned"),
            barrier=(100, 70, 70),
            at_ms=3000,
            requested_ms=0,  # the request's time (a schedule's due time)
            reason="",
        ),
    )
    assert run[3].end.active is not None and run[3].end.active.arrived == (1, 2)
    assert positions(run)[3:10] == [(10 * (k + 1), 70, 70) for k in range(3, 10)]
    assert cuts(run) == [(9, Cut(2, "checkpoint", "aligned", (100, 70, 70), (), None, 9000))]
    assert run[3].end.last_id == 2


def test_a_newer_request_withdraws_a_checkpoint_none_of_whose_barriers_arrived() -> None:
    """Checkpoint 1 never reached the handler (channel 0 is far from its barrier and the
    others are admission-limited too): the planner withdraws it."""
    run = simulate(
        6,
        available=[(100, 100)],
        admission=(10, 10),
        buffer=50,
        requests={1: [req(1)], 2: [req(2)]},
    )
    assert run[2].aborted == (AbortedCheckpoint(1, "subsumed"),)
    assert run[2].started[0].barrier == (70, 70)
    assert [k for k, c in cuts(run)] == []
    assert run[5].end.active is not None and run[5].end.active.checkpoint_id == 2


def test_subsumption_across_modes() -> None:
    """A pending at-least-once checkpoint subsumed by an unaligned one: its barrier right
    behind 1's triggers 2 at once, before anything of the batch is processed."""
    run = skew_run(
        "at_least_once", requests={1: [req(1, "at_least_once")], 4: [req(2, "unaligned")]}
    )
    assert run[4].aborted == (AbortedCheckpoint(1, "subsumed"),)
    # D = (40, 110, 110) (nothing was capped), available (100, 130, 130)
    assert list(run[4].started[0].barrier) == [100, 110, 110]
    assert cuts(run) == [
        (4, Cut(2, "checkpoint", "unaligned", (100, 110, 110), ((0, 40, 100),), None, 4000))
    ]


def test_at_least_once_checkpoints_are_never_subsumed_by_a_newer_at_least_once_one() -> None:
    """R10 in production: 1 stays pending behind 2 and is dropped silently when 2 is
    taken (the coordinator subsumes it when 2 completes)."""
    run = skew_run(
        "at_least_once", requests={1: [req(1, "at_least_once")], 4: [req(2, "at_least_once")]}
    )
    assert all(b.aborted == () for b in run)
    assert [(k, c.checkpoint_id) for k, c in cuts(run)] == [(9, 2)]


@pytest.mark.parametrize(
    "settings",
    [
        CoordinatorSettings(exactly_once=False),
        CoordinatorSettings(unaligned_enabled=True, aligned_timeout_ms=0),
        CoordinatorSettings(unaligned_enabled=True, adaptive=False, aligned_timeout_ms=1),
    ],
    ids=["at_least_once", "unaligned", "aligned_with_timeout"],
)
def test_savepoints_are_aligned_by_the_coordinators_one_rule(
    settings: CoordinatorSettings,
) -> None:
    """The coordinator's policy alone makes a savepoint aligned, whatever the checkpoints'
    mode; the source takes every checkpoint in the mode of its request."""
    periodic = decide_mode(settings, None).mode
    savepoint = decide_mode(settings, None, kind=SAVEPOINT).mode
    assert periodic is not Mode.ALIGNED
    run = skew_run(periodic, requests={1: [req(1, savepoint, kind="savepoint")]}, timeout=0)
    assert run[1].started[0].mode == "aligned"
    assert run[1].started[0].kind == "savepoint"
    assert positions(run) == positions(skew_run("aligned"))
    assert cuts(run) == [(9, Cut(1, "savepoint", "aligned", (100, 70, 70), (), None, 9000))]
    taken = skew_run(periodic, requests={1: [req(1, periodic)]}, timeout=0)
    assert cuts(taken)[0][1].mode != "aligned"


# -- Trigger.AvailableNow --------------------------------------------------------------------


def test_available_now_final_checkpoint_is_cut_in_a_batch_after_the_last_records() -> None:
    """Spark runs the batch after the last records with the watermark they moved: state
    is evicted and windows emitted there, so the final cut comes in that batch."""
    run = simulate(
        6,
        available=[(100, 40)],
        admission=(30, None),
        target=(100, 40),
        last_completed=None,
    )
    assert positions(run) == [(30, 40), (60, 40), (90, 40), (100, 40), (100, 40), (100, 40)]
    assert run[3].started == () and run[3].cut is None
    assert run[4].started == (
        StartedCheckpoint(
            checkpoint_id=1,
            kind="checkpoint",
            mode=Mode("aligned"),
            barrier=(100, 40),
            at_ms=4000,
            requested_ms=4000,  # the request's time (a schedule's due time)
            reason=FINAL_REASON,
        ),
    )
    assert cuts(run) == [(4, Cut(1, "checkpoint", "aligned", (100, 40), (), None, 4000))]
    assert run[4].end.last_cut == (100, 40)
    assert run[4].end.last_id == 1
    # no second final checkpoint: the source has nothing more to do
    assert [b.identity for b in run] == [False] * 5 + [True]


def test_available_now_final_checkpoint_takes_the_id_the_coordinator_reserved() -> None:
    start = SourceOffset(positions=(0, 0), last_id=7, last_cut=(0, 0))
    run = simulate(
        3,
        available=[(20, 5)],
        admission=(None, None),
        target=(20, 5),
        start=start,
        requests={0: [req(9, kind="savepoint")]},  # 8 was given up, 9 is a savepoint's
    )
    assert [(k, c.checkpoint_id) for k, c in cuts(run)] == [(0, 9), (1, 10)]
    assert run[1].started[0].reason == FINAL_REASON
    assert [b.identity for b in run] == [False, False, True]


def test_available_now_final_checkpoint_waits_while_the_reserved_id_is_stale() -> None:
    """The planner does not make an id up while the coordinator's schedule reserves one the
    source already started: it says it waits for a newer one. Without any schedule of the
    run (no coordinator saw it yet, so none gave out an id), the id is the first the
    allocator will give: one above last_id."""
    start = SourceOffset(positions=(20, 5), last_id=7)
    planner = Planner()
    base = PlanInput((20, 5), (None, None), (20, 5), (), frozenset(), None, 1000, 100, 0)
    stale = Schedule(checkpoint_id=7, due_ms=0, mode=Mode.ALIGNED)
    assert planner.plan(start, replace(base, schedule=stale)) is start
    assert planner.awaits_final_id
    # 8..10 went to savepoints the source has not seen yet: the final one is not last_id + 1
    end = planner.plan(start, replace(base, schedule=replace(stale, checkpoint_id=11, paused="x")))
    assert not planner.awaits_final_id
    assert end.started == (
        StartedCheckpoint(11, "checkpoint", Mode.ALIGNED, (20, 5), 1000, 1000, FINAL_REASON),
    )
    assert end.cut is not None and end.cut.checkpoint_id == 11
    assert end.last_id == 11
    first = plan(start, base)
    assert first.cut is not None and first.cut.checkpoint_id == 8


def test_available_now_without_new_data_since_the_last_cut_needs_no_final_checkpoint() -> None:
    start = SourceOffset(positions=(20, 5), last_id=7, last_cut=(20, 5))
    run = simulate(2, available=[(20, 5)], admission=(None, None), target=(20, 5), start=start)
    assert all(b.identity for b in run)


def test_available_now_target_caps_delivery() -> None:
    run = simulate(
        3,
        available=lambda k: (100 + k, 100 + k),
        admission=(None, 60),
        target=(100, 100),
        start=SourceOffset(positions=(0, 0), last_cut=(100, 100)),
    )
    assert positions(run) == [(100, 60), (100, 100), (100, 100)]
    assert [b.identity for b in run] == [False, False, True]


def test_available_now_aligned_cut_with_the_last_records_still_needs_the_final_one() -> None:
    run = simulate(
        6,
        available=[(100, 40)],
        admission=(30, None),
        target=(100, 40),
        requests={1: [req(1)]},
    )
    # B = (100, 40) fixed in batch 1; the aligned cut in batch 3, with the last records,
    # is at the target, but the batch after them may still change state (evictions)
    assert cuts(run) == [
        (3, Cut(1, "checkpoint", "aligned", (100, 40), (), None, 3000)),
        (4, Cut(2, "checkpoint", "aligned", (100, 40), (), None, 4000)),
    ]
    assert started_ids(run) == [(1, 1), (4, 2)]
    assert [b.identity for b in run] == [False] * 5 + [True]


def test_available_now_final_checkpoint_after_an_earlier_cut() -> None:
    run = simulate(
        6,
        available=[(100, 40)],
        admission=(30, None),
        target=(100, 40),
        requests={1: [req(1)]},
        buffer=20,
    )
    # checkpoint 1: D = (30, 40), B = (50, 40): cut in batch 1 at (50, 40)
    assert positions(run) == [(30, 40), (50, 40), (80, 40), (100, 40), (100, 40), (100, 40)]
    assert cuts(run) == [
        (1, Cut(1, "checkpoint", "aligned", (50, 40), (), None, 1000)),
        (4, Cut(2, "checkpoint", "aligned", (100, 40), (), None, 4000)),
    ]
    assert run[4].started[0].reason == FINAL_REASON
    assert [b.identity for b in run] == [False] * 5 + [True]


def test_available_now_final_checkpoint_in_the_batch_after_another_cut() -> None:
    """An at-least-once cut behind the target, in the batch before the one reaching it."""
    run = simulate(
        7,
        available=[(100, 40)],
        admission=(30, None),
        target=(100, 40),
        requests={3: [req(1, "at_least_once")]},
        buffer=5,
    )
    # checkpoint 1 at batch 3: D = (90, 40), B = (95, 40): channel 0 stops at its barrier
    assert positions(run)[3:5] == [(95, 40), (100, 40)]
    assert cuts(run) == [
        (3, Cut(1, "checkpoint", "at_least_once", (95, 40), (), None, 3000)),
        (5, Cut(2, "checkpoint", "aligned", (100, 40), (), None, 5000)),
    ]
    assert [ev.checkpoint_id for b in run[3:5] for ev in b.started] == [1]
    assert run[5].started[0].reason == FINAL_REASON
    assert run[5].positions == (100, 40)
    assert [b.identity for b in run] == [False] * 6 + [True]


def test_available_now_at_least_once_cut_with_the_last_records_needs_the_final_one() -> None:
    run = simulate(
        7,
        available=[(100, 40)],
        admission=(30, None),
        target=(100, 40),
        requests={3: [req(1, "at_least_once")]},
        buffer=1000,
    )
    # B = (100, 40) for checkpoint 1, cut at the target in the batch of the last records
    assert cuts(run) == [
        (3, Cut(1, "checkpoint", "at_least_once", (100, 40), (), None, 3000)),
        (4, Cut(2, "checkpoint", "aligned", (100, 40), (), None, 4000)),
    ]
    assert [b.identity for b in run] == [False] * 5 + [True] * 2


def test_available_now_final_checkpoint_with_a_growing_upstream() -> None:
    """The upstream grows past the target during the run: B is capped at the target."""
    run = simulate(
        6,
        available=lambda k: (100 + 10 * k, 100 + 10 * k),
        admission=(40, None),
        target=(100, 100),
    )
    assert positions(run) == [(40, 100), (80, 100)] + [(100, 100)] * 4
    assert list(run[3].started[0].barrier) == [100, 100]
    assert cuts(run) == [(3, Cut(1, "checkpoint", "aligned", (100, 100), (), None, 3000))]
    assert [b.identity for b in run] == [False] * 4 + [True] * 2


@pytest.mark.parametrize("mode", ALL_MODES)
def test_available_now_requested_checkpoint_with_a_growing_upstream(mode: str) -> None:
    run = simulate(
        6,
        available=lambda k: (100 + 10 * k, 100 + 10 * k),
        admission=(40, None),
        target=(100, 100),
        requests={1: [req(1, mode)]},
    )
    # D = (40, 100) and available (110, 110) at batch 1: B = (100, 100), not (110, 110)
    assert list(run[1].started[0].barrier) == [100, 100]
    assert positions(run) == [(40, 100), (80, 100)] + [(100, 100)] * 4
    if mode == "unaligned":
        first = (1, Cut(1, "checkpoint", "unaligned", (100, 100), ((0, 80, 100),), None, 1000))
    else:
        cut_mode = "at_least_once" if mode == "at_least_once" else "aligned"
        first = (2, Cut(1, "checkpoint", cut_mode, (100, 100), (), None, 2000))
    # its state lacks the in-flight records, or it came with the last records: a final
    # aligned checkpoint follows in the batch after them
    final = Cut(2, "checkpoint", "aligned", (100, 100), (), None, 3000)
    assert cuts(run) == [first, (3, final)]
    assert started_ids(run) == [(1, 1), (3, 2)]
    assert [b.identity for b in run] == [False] * 4 + [True] * 2


# -- restart ---------------------------------------------------------------------------------


RESTART_SCENARIOS: dict[str, dict[str, Any]] = {
    "aligned": {"requests": {1: [req(1)], 11: [req(2, "unaligned")]}},
    "unaligned": {"requests": {1: [req(1, "unaligned")], 5: [req(2, "unaligned")]}},
    "timeout": {"requests": {1: [req(1, "aligned_with_timeout")]}, "timeout": 3000},
    "at_least_once": {"requests": {1: [req(1, "at_least_once")], 4: [req(2, "at_least_once")]}},
    "cancel": {"requests": {1: [req(1)], 6: [req(2, kind="savepoint")]}, "cancelled": {3: [1]}},
    "subsume": {"requests": {1: [req(1)], 3: [req(2, "aligned_with_timeout")]}, "timeout": 2500},
}


@pytest.mark.parametrize("name", sorted(RESTART_SCENARIOS))
def test_a_restarted_driver_plans_identical_batches(name: str) -> None:
    kw = RESTART_SCENARIOS[name]
    live = skew_run("aligned", batches=14, last_completed=3, **kw)
    restarted = skew_run("aligned", batches=14, last_completed=3, restart=True, **kw)
    assert [b.end for b in restarted] == [b.end for b in live]
    assert [b.identity for b in restarted] == [b.identity for b in live]
    for b in live:  # every offset survives the offset log unchanged
        assert roundtrip(b.end) == b.end


def test_a_restarted_available_now_run_plans_identical_batches() -> None:
    kw: dict[str, Any] = {
        "available": [(100, 40)],
        "admission": (30, None),
        "target": (100, 40),
        "requests": {3: [req(1, "at_least_once")]},
        "buffer": 5,
    }
    live = simulate(7, **kw)
    restarted = simulate(7, restart=True, **kw)
    assert [b.end for b in restarted] == [b.end for b in live]
    assert [b.identity for b in restarted] == [b.identity for b in live]


# -- property tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    channels: int
    batches: int
    available: list[tuple[int, ...]]
    admission: tuple[int | None, ...]
    requests: dict[int, list[TriggerRequest]]
    cancelled: dict[int, list[int]]
    now: list[int]
    target: tuple[int, ...] | None
    buffer: int
    timeout: int
    last_id: int

    def run(self, restart: bool = False) -> list[Batch]:
        return simulate(
            self.batches,
            available=self.available,
            admission=self.admission,
            requests=self.requests,
            cancelled=self.cancelled,
            now=self.now,
            target=self.target,
            buffer=self.buffer,
            timeout=self.timeout,
            last_completed=None if self.last_id == 0 else self.last_id,
            start=SourceOffset(positions=(0,) * self.channels, last_id=self.last_id),
            restart=restart,
        )


@st.composite
def scenarios(draw: st.DrawFn, modes: Sequence[str]) -> Scenario:
    channels = draw(st.integers(1, 4))
    batches = draw(st.integers(1, 20))
    vec = st.lists(st.integers(0, 15), min_size=channels, max_size=channels)
    initial = draw(st.lists(st.integers(0, 60), min_size=channels, max_size=channels))
    growth = draw(st.lists(vec, min_size=batches, max_size=batches))
    available = [tuple(initial)]
    for g in growth[1:]:
        available.append(tuple(a + d for a, d in zip(available[-1], g, strict=True)))
    admission = tuple(
        draw(st.lists(st.none() | st.integers(1, 20), min_size=channels, max_size=channels))
    )
    last_id = draw(st.sampled_from([0, 0, 0, 3]))
    requests: dict[int, list[TriggerRequest]] = {}
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, batches - 1))
        kind = draw(st.sampled_from(["checkpoint", "checkpoint", "checkpoint", "savepoint"]))
        # the coordinator requests every savepoint aligned (its policy's one rule)
        mode = "aligned" if kind == "savepoint" else draw(st.sampled_from(list(modes)))
        requests.setdefault(at, []).append(req(draw(st.integers(1, 12)), mode, kind))
    cancelled: dict[int, list[int]] = {}
    for _ in range(draw(st.integers(0, 3))):
        cancelled.setdefault(draw(st.integers(0, batches - 1)), []).append(draw(st.integers(1, 12)))
    now = list(accumulate(draw(st.lists(st.integers(0, 1500), min_size=batches, max_size=batches))))
    target: tuple[int, ...] | None = None
    if draw(st.booleans()):
        # an availableNow run: the upstream as it was at its first planning call
        target = available[0]
    return Scenario(
        channels=channels,
        batches=batches,
        available=available,
        admission=admission,
        requests=requests,
        cancelled=cancelled,
        now=now,
        target=target,
        buffer=draw(st.integers(0, 80)),
        timeout=draw(st.integers(0, 5000)),
        last_id=last_id,
    )


def barrier_of(
    pos: Sequence[int], inp: PlanInput, mode: str = "aligned", behind: Collection[int] = ()
) -> tuple[int, ...]:
    """B_n(c) = min(available(c), D(c) + buffer), never past an availableNow target, and
    D(c) right behind the older checkpoint's barrier on the channels ``behind`` it
    arrived on; in unaligned mode, when no channel would reach it in the batch, the
    channel closest to it has it where the batch's delivery ends (so that a barrier
    arrives and triggers)."""
    reach = inp.available if inp.target is None else inp.target
    barrier = [
        p if c in behind else max(p, min(a, r, p + inp.buffer_per_channel))
        for c, (p, a, r) in enumerate(zip(pos, inp.available, reach, strict=True))
    ]
    full = full_delivery(SourceOffset(positions=tuple(pos)), inp)
    if mode == "unaligned" and all(b > f for b, f in zip(barrier, full, strict=True)):
        first = min(range(len(barrier)), key=lambda c: barrier[c] - full[c])
        barrier[first] = full[first]
    return tuple(barrier)


def full_delivery(start: SourceOffset, inp: PlanInput) -> list[int]:
    """Per channel, what the batch delivers with no checkpoint in the way."""
    out = []
    for c, p in enumerate(start.positions):
        upto = inp.available[c]
        if inp.admission[c] is not None:
            upto = min(upto, p + inp.admission[c])
        if inp.target is not None:
            upto = min(upto, inp.target[c])
        out.append(max(p, upto))
    return out


def model_batch(start: SourceOffset, inp: PlanInput) -> tuple[list[int], list[int], Any]:
    """Independent model of delivery: (requests started, end positions, active at delivery).

    The active checkpoint at delivery time is a ``(mode, barrier, arrived)`` triple or None.
    A channel without its barrier delivers up to it; with it, nothing while aligning (at
    least once: as far as it reaches). An alignment whose timeout elapsed by the batch's
    time switches before the batch's records: nothing is delivered. A checkpoint started
    while an older one is in progress has its barriers right behind the older one's on
    the channels that one reached: they arrive at once.
    """
    active: Any = None
    switch = False
    behind: set[int] = set()
    if start.active is not None and start.active.checkpoint_id not in inp.cancelled:
        a = start.active
        active = (a.mode, a.barrier, set(a.arrived))
        behind = set(a.arrived)
        switch = (
            a.mode == "aligned_with_timeout"
            and a.first_barrier_ms is not None
            and inp.now_ms - a.first_barrier_ms >= inp.aligned_timeout_ms
        )
    started: list[int] = []
    last = start.last_id
    for r in sorted(inp.requests, key=lambda r: r.checkpoint_id):
        if r.checkpoint_id > last and r.checkpoint_id not in inp.cancelled:
            last = r.checkpoint_id
            started.append(r.checkpoint_id)
            active = (r.mode, barrier_of(start.positions, inp, r.mode, behind), set(behind))
            # triggered unaligned at once, by a barrier behind the older one's: nothing
            # of the batch comes before the cut
            switch = bool(behind) and (
                r.mode == "unaligned"
                or (r.mode == "aligned_with_timeout" and inp.aligned_timeout_ms == 0)
            )
    end = full_delivery(start, inp)
    if switch:
        return started, list(start.positions), active
    if active is not None:
        mode, barrier, arrived = active
        for c in range(len(end)):
            if c not in arrived:
                end[c] = min(end[c], max(start.positions[c], barrier[c]))
            elif mode != "at_least_once":
                end[c] = start.positions[c]
    return started, end, active


def check_invariants(run: Sequence[Batch]) -> None:
    fixed: dict[int, dict[str, Any]] = {}  # id -> started event (+ requested mode)
    aborted: set[int] = set()
    cut_ids: list[int] = []
    for b in run:
        s, e, inp = b.start, b.end, b.inp
        started, expected, _ = model_batch(s, inp)
        live = s.active is not None and s.active.checkpoint_id not in inp.cancelled
        behind = s.active.arrived if live and s.active is not None else ()
        if b.identity:
            assert started == []
            assert list(s.positions) == expected
            assert s.active is None or s.active.checkpoint_id not in inp.cancelled
            continue

        # positions: monotone, within the upstream and the availableNow target
        for c, (p, q) in enumerate(zip(s.positions, e.positions, strict=True)):
            assert p <= q <= max(p, inp.available[c])
            if inp.target is not None:
                assert q <= max(p, inp.target[c])
        assert list(e.positions) == expected, "delivery differs from the model"
        assert e.last_id >= s.last_id

        # started events: exactly the new requests (plus a final checkpoint)
        requested = [ev for ev in e.started if ev.reason != FINAL_REASON]
        finals = [ev for ev in e.started if ev.reason == FINAL_REASON]
        assert [ev.checkpoint_id for ev in requested] == started
        assert len(finals) <= 1
        ids = [ev.checkpoint_id for ev in e.started]
        assert ids == sorted(set(ids)) and all(i > s.last_id for i in ids)
        for ev in requested:
            r = next(r for r in inp.requests if r.checkpoint_id == ev.checkpoint_id)
            assert list(ev.barrier) == list(barrier_of(s.positions, inp, ev.mode, behind))
            assert ev.mode == r.mode
            assert ev.kind == r.kind
            assert ev.at_ms == inp.now_ms
            fixed[ev.checkpoint_id] = ev
        for ev in finals:
            assert inp.schedule is not None
            assert ev.checkpoint_id == inp.schedule.checkpoint_id > max([s.last_id, *started])
            assert ev.mode == "aligned"
            assert inp.target is not None
            assert all(p >= t for p, t in zip(e.positions, inp.target, strict=True))
            assert e.positions != s.last_cut
            assert e.positions == s.positions  # a batch of its own, after the last records
            assert list(ev.barrier) == list(barrier_of(e.positions, inp))
            fixed[ev.checkpoint_id] = ev
        assert e.last_id == max([s.last_id, *ids])

        # aborts
        for ab in e.aborted:
            assert ab.checkpoint_id in fixed
            assert ab.checkpoint_id not in aborted
            if ab.reason == "cancelled":
                assert ab.checkpoint_id in inp.cancelled
            else:
                assert ab.reason == "subsumed"
                assert any(i > ab.checkpoint_id for i in ids)
            aborted.add(ab.checkpoint_id)

        # blocking: a channel that has its barrier delivers nothing while aligning
        if (
            s.active is not None
            and s.active.mode in ALIGNED_MODES
            and s.active.checkpoint_id not in inp.cancelled
            and not started
        ):
            for c in s.active.arrived:
                assert e.positions[c] == s.positions[c]

        # the active checkpoint after the batch
        if e.active is not None:
            a = e.active
            assert a.checkpoint_id in fixed and a.checkpoint_id not in aborted
            assert list(a.barrier) == list(fixed[a.checkpoint_id].barrier)
            assert a.mode == fixed[a.checkpoint_id].mode != "unaligned"
            assert e.cut is None or e.cut.checkpoint_id != a.checkpoint_id
            assert not all(p >= q for p, q in zip(e.positions, a.barrier, strict=True))
            assert set(a.arrived) == {
                c for c, (p, q) in enumerate(zip(e.positions, a.barrier, strict=True)) if p >= q
            }
            if a.mode != "at_least_once":
                assert all(p <= q for p, q in zip(e.positions, a.barrier, strict=True))

        # the cut
        cut = e.cut
        if cut is None:
            assert e.last_cut == s.last_cut
            continue
        ev = fixed[cut.checkpoint_id]
        assert cut.checkpoint_id not in aborted
        assert list(cut.barrier) == list(ev.barrier)
        assert cut.kind == ev.kind
        assert cut.at_ms == inp.now_ms
        assert cut.base == inp.last_completed
        # the end of an availableNow run: a cut without in-flight records, in a batch
        # without records (Spark's batch after the last records may still evict)
        delivered = e.positions != s.positions
        assert e.last_cut == (None if cut.inflight or delivered else cut.barrier)
        pairs = list(zip(e.positions, cut.barrier, strict=True))
        if cut.mode == "aligned":
            assert ev.mode in ALIGNED_MODES
            assert list(e.positions) == list(cut.barrier)
            assert cut.inflight == ()
        elif cut.mode == "unaligned":
            assert ev.mode in ("unaligned", "aligned_with_timeout")
            if ev.mode == "aligned_with_timeout":
                assert inp.now_ms - ev.at_ms >= inp.aligned_timeout_ms
            assert all(p <= q for p, q in pairs)
            assert cut.inflight == tuple((c, p, q) for c, (p, q) in enumerate(pairs) if p < q)
        else:
            assert cut.mode == "at_least_once" == ev.mode
            assert all(p >= q for p, q in pairs)
            assert cut.inflight == ()
        if ev.mode == "unaligned":
            assert ev in e.started  # cut in the batch it started in
        assert not cut_ids or cut.checkpoint_id > cut_ids[-1]
        cut_ids.append(cut.checkpoint_id)


def check_restart(sc: Scenario, run: Sequence[Batch]) -> None:
    again = sc.run(restart=True)
    assert [b.end for b in again] == [b.end for b in run]
    assert [b.identity for b in again] == [b.identity for b in run]
    for b in run:
        carried = b.start.carried()
        replanned = plan(carried, b.inp)
        if b.identity:
            assert replanned is carried
        else:
            assert replanned == b.end


@pytest.mark.parametrize("mode", ALL_MODES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_planner_invariants_per_mode(mode: str, data: st.DataObject) -> None:
    sc = data.draw(scenarios([mode]))
    run = sc.run()
    check_invariants(run)
    check_restart(sc, run)


@PROPERTY_SETTINGS
@given(sc=scenarios(ALL_MODES))
def test_planner_invariants_with_mixed_modes(sc: Scenario) -> None:
    run = sc.run()
    check_invariants(run)
    check_restart(sc, run)


@PROPERTY_SETTINGS
@given(sc=scenarios(["aligned", "at_least_once", "unaligned"]))
def test_checkpoints_without_timeout_complete_once_every_channel_reached_its_barrier(
    sc: Scenario,
) -> None:
    """Liveness in the modes without a timeout: a cut is exactly when all barriers are in."""
    run = sc.run()
    for b in run:
        if b.identity or b.end.cut is None:
            continue
        cut = b.end.cut
        if cut.mode == "unaligned":
            continue
        assert all(p >= q for p, q in zip(b.positions, cut.barrier, strict=True))


def drained(sc: Scenario, extra: int, available: tuple[int, ...]) -> Scenario:
    """``sc`` followed by ``extra`` batches over a frozen upstream, 1 s apart."""
    return replace(
        sc,
        batches=sc.batches + extra,
        available=[*sc.available, *[available] * extra],
        now=[*sc.now, *(sc.now[-1] + 1000 * (i + 1) for i in range(extra))],
    )


@PROPERTY_SETTINGS
@given(sc=scenarios(ALL_MODES))
def test_every_checkpoint_ends_once_the_upstream_stops_growing(sc: Scenario) -> None:
    """Liveness: admission >= 1 and buffer <= 80, so 90 quiet batches end every checkpoint."""
    sc = drained(replace(sc, target=None), 90, sc.available[-1])
    run = sc.run()
    check_invariants(run)
    assert run[-1].end.active is None
    started = [ev.checkpoint_id for b in run for ev in b.started]
    taken = [c.checkpoint_id for _, c in cuts(run)]
    ended = taken + [ab.checkpoint_id for b in run for ab in b.aborted]
    # R10: an at-least-once checkpoint still pending when a newer one is taken ends silently
    silently = [
        ev.checkpoint_id
        for b in run
        for ev in b.started
        if ev.mode == "at_least_once"
        and ev.checkpoint_id not in ended
        and any(t > ev.checkpoint_id for t in taken)
    ]
    assert sorted(ended + silently) == sorted(started)


@PROPERTY_SETTINGS
@given(sc=scenarios(ALL_MODES), grow=st.booleans())
def test_an_available_now_run_ends_with_a_cut_at_the_target(sc: Scenario, grow: bool) -> None:
    """Whether or not the upstream grows during the run, the last cut is at the target."""
    frozen = sc.available[0]
    if not grow:
        sc = replace(sc, available=[frozen] * sc.batches)
    sc = drained(replace(sc, target=frozen), 90, sc.available[-1])
    run = sc.run()
    check_invariants(run)
    end = run[-1].end
    assert end.positions == frozen
    assert end.active is None
    assert end.last_cut == frozen
    assert run[-1].identity
    finals = [ev for b in run for ev in b.started if ev.reason == FINAL_REASON]
    assert len(finals) <= 1


# -- the planner against a plain barrier handler -----------------------------------------------


class Replayed:
    """A plain handler with a recording controller, fed what the planner fed its handler."""

    def __init__(self, alignment: Alignment, channels: int, timeout: int) -> None:
        self.clock = ManualClock(alignment.origin_ms)
        self.ctl: RecordingController[Chunk] = RecordingController()
        self.handler: BarrierHandler[Chunk] = BarrierHandler(
            channels, Mode.ALIGNED, self.ctl, self.clock, timeout, alignment.last_id
        )

    def catch_up(self, trace: Sequence[TraceEntry]) -> list[tuple[object, ...]]:
        """Feed the events the planner fed in one batch; return the calls they made."""
        before = len(self.ctl.calls)
        for event, chunk in trace:
            if isinstance(event, Data):
                self.handler.on_data(event.channel, chunk)
            elif isinstance(event, Barrier):
                self.handler.on_barrier(event.channel, event.checkpoint_id, event.mode)
            elif isinstance(event, Cancel):
                self.handler.on_cancel(event.channel, event.checkpoint_id)
            else:
                assert isinstance(event, TimeAdvance)
                self.clock.advance(event.ms)
                self.handler.on_time_advanced()
        return self.ctl.calls[before:]


def merged(chunks: Sequence[Chunk]) -> tuple[Chunk, ...]:
    """One ``(channel, start, end)`` per channel of contiguous chunks, in channel order."""
    per: dict[int, list[tuple[int, int]]] = {}
    for c, a, b in chunks:
        per.setdefault(c, []).append((a, b))
    out = []
    for c, ranges in sorted(per.items()):
        ranges.sort()
        assert all(x[1] == y[0] for x, y in pairwise(ranges)), ranges
        out.append((c, ranges[0][0], ranges[-1][1]))
    return tuple(out)


def compare_with_handler(sc: Scenario, run: Sequence[Batch]) -> None:
    assert len({id(b.alignment) for b in run}) == 1, "one handler for the source"
    assert run[0].alignment is not None
    replay = Replayed(run[0].alignment, sc.channels, sc.timeout)
    for b in run:
        calls = replay.catch_up(b.trace)
        aborts = [(call[1], call[2]) for call in calls if call[0] == "abort"]
        cuts = [
            (call[1], call[2])
            for call in calls
            if call[0] == "trigger" and all(cid != call[1] for cid, _ in aborts)
        ]
        cut_at = next(
            (i for i, call in enumerate(calls) if call[0] == "trigger" and call[1:] in cuts),
            len(calls),
        )
        delivered = list(b.start.positions)
        for call in calls[:cut_at]:
            if call[0] == "process":
                _, channel, (_, start, end) = call
                assert start == delivered[channel]
                delivered[channel] = end
        if b.identity:
            assert cuts == [] and aborts == []
            continue
        # the cut: exactly the handler's trigger, its mode and its recorded channel state
        assert len(cuts) <= 1
        if cuts:
            cut = b.end.cut
            assert cut is not None
            assert (cut.checkpoint_id, cut.mode) == cuts[0]
            recorded = [
                c[3] for c in calls if c[0] == "record_channel_state" and c[1] == cuts[0][0]
            ]
            assert cut.inflight == merged(recorded)
        else:
            assert b.end.cut is None
        # the batch delivers exactly what the handler processed before its trigger (with
        # no checkpoint in flight: as far as every channel reaches)
        injected = (
            b.end.active is not None
            or b.end.cut is not None
            or any(isinstance(ev, Data | Barrier) for ev, _ in b.trace)
        )
        assert list(b.end.positions) == (delivered if injected else full_delivery(b.start, b.inp))
        # aborts: the handler's, and a checkpoint withdrawn before it reached the handler
        handlers = [(a.checkpoint_id, a.reason) for a in b.end.aborted]
        assert [a for a in handlers if a in aborts] == aborts
        for a in b.end.aborted:
            if (a.checkpoint_id, a.reason) not in aborts:
                assert a.reason is AbortReason.SUBSUMED
                assert any(s.checkpoint_id > a.checkpoint_id for s in b.end.started)
        # what the next batch holds back: the channels the handler blocks
        active = b.end.active
        blocked = replay.handler.blocked_channels()
        if active is None:
            assert blocked == frozenset()
            continue
        held = set(active.arrived) if active.mode in ALIGNED_MODES else set()
        assert held == blocked


@PROPERTY_SETTINGS
@given(sc=scenarios(ALL_MODES))
def test_the_planner_cuts_blocks_and_records_as_the_barrier_handler_prescribes(
    sc: Scenario,
) -> None:
    """Replayed into a plain handler with a recording controller, the events the planner fed
    give its cuts (batch, id, mode), deliveries, blocked channels and in-flight ranges."""
    compare_with_handler(sc, sc.run())


@PROPERTY_SETTINGS
@given(
    sc=scenarios(["aligned_with_timeout"]),
    admission=st.lists(st.integers(1, 5), min_size=4, max_size=4),
    extra=st.integers(1, 30),
)
def test_the_alignment_timeout_is_the_handlers(
    sc: Scenario, admission: list[int], extra: int
) -> None:
    """Aligned with timeout only, every channel admission-limited (so that first barriers
    often arrive batches after the start), drained so that alignments end, many by the
    timeout."""
    sc = replace(sc, admission=tuple(admission[: sc.channels]), target=None)
    compare_with_handler(sc, drained(sc, extra, sc.available[-1]).run())
