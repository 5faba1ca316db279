"""Plans micro-batches: per-channel delivery, barrier positions, the cut, in-flight data.

The planner runs in the source's driver-side worker before every micro-batch. It is a
pure function of the start offset and a few readings (what the upstream has, the trigger
log, the clock), so a restarted driver plans exactly the same batches.

How a checkpoint ``n`` travels (see DESIGN.md, "The model, in micro-batch terms"):

1. ``n`` starts: a periodic checkpoint in the first batch planned once the coordinator's
   schedule (:mod:`barriered.datasource.schedule`) says it is due and not paused, a
   forced checkpoint or savepoint when the coordinator's request for ``n`` in the
   trigger log is picked up. The barrier positions are fixed,
   ``B_n(c) = min(available(c), D(c) + bufferPerChannel)``.
2. Each channel delivers up to its admission limit, but never past ``B_n(c)`` (except
   at-least-once, which never holds anything back). A channel whose delivered position
   reaches ``B_n(c)`` has its barrier: the event ``bN@c`` is fed to the
   :class:`~barriered.barrier.BarrierHandler`, built for the checkpoint's mode.
3. The handler decides. *Aligned*: a channel with its barrier is blocked (delivers
   nothing) until every open channel has it; the batch where the last one arrives is the
   cut. *Unaligned*: the barrier overtakes the backlog, i.e. every channel's barrier is
   fed at the end of the first batch, which is the cut; each channel's backlog
   ``[D(c), B_n(c))`` is in-flight data. *Aligned with timeout*: aligned until the
   handler's clock says the alignment took ``alignedCheckpointTimeout``; then it switches
   to unaligned and the remaining barriers overtake, so that batch is the cut.
   *At least once*: the barrier tracker triggers when every channel passed its barrier.
4. The cut batch carries marker rows (one per key group) and in-flight capture tasks.

Within one batch all data of the batch is fed to the handler before the barriers that
overtake, so the handler never records channel state itself: what is in flight is
exactly the backlog the barrier overtook, which the planner knows from the positions.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from barriered.barrier import (
    AbortReason,
    BarrierHandler,
    CheckpointMode,
    ManualClock,
    Mode,
    RecordingController,
)
from barriered.datasource.offsets import ActiveCheckpoint, Cut, SourceOffset
from barriered.datasource.schedule import Schedule
from barriered.datasource.triggers import TriggerRequest

log = logging.getLogger(__name__)

Chunk = tuple[int, int, int]  # (channel, start, end)


@dataclass(frozen=True)
class PlanInput:
    """Everything one planning step reads besides the start offset.

    Attributes
    ----------
    available : sequence of int
        Per channel, how far the upstream reaches now.
    admission : sequence of int or None
        Per channel, the most rows this batch may deliver (None: no limit).
    target : sequence of int or None
        Trigger.AvailableNow: the positions the run ends at.
    requests : sequence of TriggerRequest
        Trigger requests from the coordinator (stale ones are ignored).
    cancelled : collection of int
        Checkpoint ids the coordinator aborted.
    last_completed : int or None
        The latest completed checkpoint (base of incremental snapshots).
    now_ms : int
        The planner's clock.
    buffer_per_channel : int
        Read-ahead bound for barrier positions.
    aligned_timeout_ms : int
        ``alignedCheckpointTimeout`` for checkpoints in mode aligned_with_timeout.
    schedule : Schedule or None
        This run's schedule of the next periodic checkpoint (None: none published).
    """

    available: Sequence[int]
    admission: Sequence[int | None]
    target: Sequence[int] | None
    requests: Sequence[TriggerRequest]
    cancelled: Collection[int]
    last_completed: int | None
    now_ms: int
    buffer_per_channel: int
    aligned_timeout_ms: int
    schedule: Schedule | None = None


def _new_handler(
    channels: int, active: ActiveCheckpoint, clock: ManualClock, timeout_ms: int
) -> tuple[BarrierHandler[Chunk], RecordingController[Chunk]]:
    ctl: RecordingController[Chunk] = RecordingController()
    mode = Mode(active.mode)
    handler: BarrierHandler[Chunk] = BarrierHandler(
        channels,
        mode,
        ctl,
        clock,
        timeout_ms if mode is Mode.ALIGNED_WITH_TIMEOUT else None,
    )
    return handler, ctl


class _Step:
    """Mutable working state of one planning step."""

    def __init__(self, start: SourceOffset, inp: PlanInput) -> None:
        self.inp = inp
        self.channels = len(start.positions)
        self.start_positions = start.positions
        self.positions = list(start.positions)
        self.last_id = start.last_id
        self.last_cut = start.last_cut
        self.replay = start.replay
        self.restore = start.restore  # what a restored run was restored from: kept for good
        self.active = start.active
        self.started: list[dict[str, object]] = []
        self.aborted: list[dict[str, object]] = []
        self.cut: Cut | None = None
        self.clock = ManualClock(0)
        self.handler: BarrierHandler[Chunk] | None = None
        self.ctl: RecordingController[Chunk] | None = None
        if self.active is not None:
            self._replay()

    # -- building the handler ------------------------------------------------------------

    def _replay(self) -> None:
        """Rebuild the handler of the aligning checkpoint from the offset."""
        active = self.active
        assert active is not None
        self.clock = ManualClock(active.started_ms)
        self.handler, self.ctl = _new_handler(
            self.channels, active, self.clock, self.inp.aligned_timeout_ms
        )
        for channel in active.arrived:
            self.handler.on_barrier(channel, active.id)
        self.ctl.triggered.clear()

    def _abort_active(self, reason: str) -> None:
        assert self.active is not None
        log.info("checkpoint %d aborted by the source planner: %s", self.active.id, reason)
        self.aborted.append({"id": self.active.id, "reason": reason})
        self.active, self.handler, self.ctl = None, None, None

    def start(self, request: TriggerRequest) -> None:
        """Fix the barrier positions of a requested checkpoint."""
        if self.active is not None:
            self._abort_active(AbortReason.SUBSUMED.value)
        now = self.inp.now_ms
        reach = self.inp.available if self.inp.target is None else self.inp.target
        barrier = tuple(
            max(p, min(a, r, p + self.inp.buffer_per_channel))
            for p, a, r in zip(self.positions, self.inp.available, reach, strict=True)
        )
        mode = Mode.ALIGNED.value if request.kind == "savepoint" else request.mode
        self.active = ActiveCheckpoint(
            id=request.id,
            kind=request.kind,
            mode=mode,
            barrier=barrier,
            arrived=(),
            started_ms=now,
            reason=request.reason,
        )
        self.last_id = max(self.last_id, request.id)
        self.clock = ManualClock(now)
        self.handler, self.ctl = _new_handler(
            self.channels, self.active, self.clock, self.inp.aligned_timeout_ms
        )
        self.started.append(
            {
                "id": request.id,
                "kind": request.kind,
                "mode": mode,
                "barrier": list(barrier),
                "at_ms": now,
                "requested_ms": request.requested_ms,
                "reason": request.reason,
            }
        )
        log.info(
            "checkpoint %d (%s, %s): barrier positions fixed at %s",
            request.id,
            request.kind,
            mode,
            list(barrier),
        )

    # -- delivery ------------------------------------------------------------------------

    def deliver(self) -> list[int]:
        """Return the end position of every channel for this batch."""
        inp = self.inp
        blocked = self.handler.blocked_channels() if self.handler else frozenset()
        active = self.active
        end = list(self.positions)
        for c in range(self.channels):
            if c in blocked:
                continue
            upto = inp.available[c]
            limit = inp.admission[c]
            if limit is not None:
                upto = min(upto, self.positions[c] + limit)
            if inp.target is not None:
                upto = min(upto, inp.target[c])
            if (
                active is not None
                and active.mode != Mode.AT_LEAST_ONCE.value
                and c not in active.arrived
            ):
                upto = min(upto, active.barrier[c])
            end[c] = max(self.positions[c], upto)
        return end

    def feed(self, end: list[int]) -> None:
        """Feed this batch's data and barriers to the handler; record a cut if any."""
        active, handler, ctl = self.active, self.handler, self.ctl
        if active is None or handler is None or ctl is None:
            self.positions = end
            return
        # Data and barriers of this batch arrive at the checkpoint's start time, so the
        # alignment timeout counts from when the barrier positions were fixed (Flink's
        # alignedCheckpointTimeout does the same); then the clock moves to now.
        for c in range(self.channels):
            if end[c] > self.positions[c]:
                handler.on_data(c, (c, self.positions[c], end[c]))
        arrived = list(active.arrived)
        overtake = active.mode == Mode.UNALIGNED.value
        for c in range(self.channels):
            if c not in arrived and (overtake or end[c] >= active.barrier[c]):
                arrived.append(c)
                handler.on_barrier(c, active.id)
        if self.inp.now_ms > self.clock.now_ms():
            self.clock.advance(self.inp.now_ms - self.clock.now_ms())
        handler.on_time_advanced()
        timed_out = (
            not ctl.triggered
            and active.mode == Mode.ALIGNED_WITH_TIMEOUT.value
            and self.inp.now_ms - active.started_ms >= self.inp.aligned_timeout_ms
        )
        if timed_out or (ctl.triggered and ctl.triggered[-1][1] is CheckpointMode.UNALIGNED):
            # Switched (or started) unaligned: the remaining barriers overtake the backlog.
            for c in range(self.channels):
                if c not in arrived:
                    arrived.append(c)
                    handler.on_barrier(c, active.id)
        self.positions = end
        if ctl.triggered:
            mode = CheckpointMode.UNALIGNED.value if timed_out else ctl.triggered[-1][1].value
            self._cut(active, mode)
        else:
            self.active = replace(active, arrived=tuple(arrived))

    @property
    def delivered(self) -> bool:
        """Whether this batch delivers records."""
        return tuple(self.positions) != self.start_positions

    def _cut(self, active: ActiveCheckpoint, mode: str) -> None:
        inflight: tuple[tuple[int, int, int], ...] = ()
        if mode == CheckpointMode.UNALIGNED.value:
            inflight = tuple(
                (c, self.positions[c], active.barrier[c])
                for c in range(self.channels)
                if self.positions[c] < active.barrier[c]
            )
        self.cut = Cut(
            id=active.id,
            kind=active.kind,
            mode=mode,
            barrier=active.barrier,
            inflight=inflight,
            base=self.inp.last_completed,
            at_ms=self.inp.now_ms,
        )
        # An availableNow run ends with a final checkpoint unless this cut is at its end
        # positions with nothing in flight (its state alone is then the whole input) in
        # a batch without records (see plan()).
        self.last_cut = None if inflight or self.delivered else active.barrier
        self.active, self.handler, self.ctl = None, None, None
        log.info("checkpoint %d cut (%s), in-flight ranges %s", active.id, mode, list(inflight))

    def result(self) -> SourceOffset:
        return SourceOffset(
            positions=tuple(self.positions),
            last_id=self.last_id,
            last_cut=self.last_cut,
            active=self.active,
            cut=self.cut,
            started=tuple(self.started),
            aborted=tuple(self.aborted),
            restore=self.restore,
            replay=None if self.replay is None or self.replay.done(self.positions) else self.replay,
        )


def plan(start: SourceOffset, inp: PlanInput) -> SourceOffset:
    """Plan the batch after ``start``; return ``start`` itself when there is nothing to do.

    Parameters
    ----------
    start : SourceOffset
        The end offset of the previous batch (or the initial offset).
    inp : PlanInput
        The readings this step is based on.

    Returns
    -------
    SourceOffset
        The end offset of the next batch. Equal to ``start`` when no record, barrier or
        abort is due, which tells Spark there is no new data.
    """
    step = _Step(start, inp)
    if step.active is not None and step.active.id in inp.cancelled:
        step._abort_active(AbortReason.CANCELLED.value)
    for request in sorted(inp.requests, key=lambda r: r.id):
        if request.id > step.last_id and request.id not in inp.cancelled:
            step.start(request)
    if inp.schedule is not None and not step.started:
        # The periodic checkpoint the coordinator scheduled, in the first batch planned
        # once it is due (a forced one started now goes first: this one would subsume it).
        due = inp.schedule.request(inp.now_ms, step.last_id)
        if due is not None and due.id not in inp.cancelled:
            step.start(due)
    step.feed(step.deliver())
    if (
        inp.target is not None
        and step.active is None
        and step.cut is None
        and all(p >= t for p, t in zip(step.positions, inp.target, strict=True))
        and step.last_cut != tuple(step.positions)
        and not step.delivered
    ):
        # End of an availableNow run: a final aligned checkpoint at the end positions, cut
        # in a batch of its own, after the last records. Spark runs the batch after the
        # last records' batch with the watermark they moved: operators evict and emit
        # (windows in append mode) there, and only a cut in that batch or later covers
        # its output and state.
        step.start(
            TriggerRequest(
                id=step.last_id + 1,
                kind="checkpoint",
                mode=Mode.ALIGNED.value,
                reason="final checkpoint of an availableNow run",
                requested_ms=inp.now_ms,
            )
        )
        step.feed(step.deliver())
    end = step.result()
    if end.carried() == start.carried() and not (end.started or end.aborted or end.cut):
        return start
    return end
