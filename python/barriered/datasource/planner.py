"""Plans micro-batches: per-channel delivery, barrier positions, the cut, in-flight data.

The planner runs in the source's driver-side worker before every micro-batch. Its state
is the start offset, which it extends from a few readings (what the upstream has, the
trigger log, the clock), so a restarted driver plans exactly the same batches.

How a checkpoint ``n`` travels (see docs/design.md, "The model, in micro-batch terms"):

1. ``n`` starts: a periodic checkpoint in the first batch planned once the coordinator's
   schedule (:mod:`barriered.control.schedule`) says it is due and not paused, a
   savepoint when the coordinator's request for ``n`` in the
   trigger log is picked up. The source injects one checkpoint at a time, at the
   barrier positions ``B_n(c) = min(available(c), D(c) + bufferPerChannel)``; on the
   channels where the barrier of the checkpoint injected before it already arrived,
   ``n``'s follows right behind it (``B_n(c) = D(c)``), so that the source's barrier
   handler subsumes the older one (R2, R8) in the batch ``n`` starts. (A checkpoint none
   of whose barriers arrived never reached the handler: the planner withdraws it,
   aborted ``subsumed``.)
2. The source's one :class:`~barriered.datasource.alignment.Alignment` (a
   :class:`~barriered.barrier.BarrierHandler` with the production controller, kept
   across checkpoints, every barrier carrying its checkpoint's mode) decides, batch
   after batch, which channels deliver how far, when the cut is, its mode and its
   in-flight ranges (rules R1-R10 of the conformance spec, the alignment timeout
   included). The offset carries the injected checkpoint's state
   (:class:`~barriered.control.offsets.ActiveCheckpoint`) and the highest id started,
   from which the handler is rebuilt after a restart.
3. The cut batch carries marker rows (one per key group) and in-flight capture tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from barriered.barrier import AbortReason, Mode
from barriered.control.offsets import (
    AbortedCheckpoint,
    ActiveCheckpoint,
    Cut,
    SourceOffset,
    StartedCheckpoint,
)
from barriered.control.schedule import Schedule, final_checkpoint
from barriered.control.triggers import TriggerRequest
from barriered.datasource.alignment import Alignment, Chunk

__all__ = ["PlanInput", "Planner", "plan"]

log = logging.getLogger(__name__)


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
        This run's schedule of the next periodic checkpoint (None: none published); an
        availableNow run's final checkpoint takes its id from it (see
        :func:`~barriered.control.schedule.final_checkpoint`).
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


class _Step:
    """Mutable working state of one planning step."""

    def __init__(self, start: SourceOffset, inp: PlanInput, alignment: Alignment) -> None:
        self.inp = inp
        self.start_positions = start.positions
        self.positions = list(start.positions)
        self.last_id = start.last_id
        self.last_cut = start.last_cut
        self.started: list[StartedCheckpoint] = []
        self.aborted: list[AbortedCheckpoint] = []
        self.cut: Cut | None = None
        self.alignment = alignment
        self._reported = 0

    def _aborts(self) -> None:
        """Report the checkpoints the handler aborted since the last call."""
        aborted = self.alignment.controller.aborted
        for cid, reason in aborted[self._reported :]:
            log.info("checkpoint %d aborted by the source's barrier handler: %s", cid, reason.value)
            self.aborted.append(AbortedCheckpoint(cid, reason))
        self._reported = len(aborted)

    def cancel(self) -> None:
        """The coordinator cancelled the injected checkpoint: its handler aborts it."""
        self.alignment.cancel()
        self._aborts()

    def start(self, request: TriggerRequest) -> None:
        """Inject a requested checkpoint: fix its barrier positions."""
        inp, alignment = self.inp, self.alignment
        reach = inp.available if inp.target is None else inp.target
        barrier = [
            max(p, min(a, r, p + inp.buffer_per_channel))
            for p, a, r in zip(self.positions, inp.available, reach, strict=True)
        ]
        older = alignment.checkpoint
        behind = list(alignment.arrived)  # right behind the older one's: the handler subsumes it
        for c in behind:
            barrier[c] = self.positions[c]
        if older is not None and not behind:
            log.info(
                "checkpoint %d aborted by the source planner: withdrawn before its first "
                "barrier arrived (checkpoint %d starts)",
                older.checkpoint_id,
                request.checkpoint_id,
            )
            self.aborted.append(AbortedCheckpoint(older.checkpoint_id, AbortReason.SUBSUMED))
        upto = self.reach()
        if request.mode is Mode.UNALIGNED and all(
            b > r for b, r in zip(barrier, upto, strict=True)
        ):
            # No barrier would arrive in this batch, so nothing would trigger: the barrier
            # of the channel closest to it goes where this batch's delivery ends there;
            # it arrives first, and the others overtake their backlogs (in flight).
            first = min(range(len(barrier)), key=lambda c: barrier[c] - upto[c])
            barrier[first] = upto[first]
        cid = request.checkpoint_id
        fixed = tuple(barrier)
        alignment.inject(
            ActiveCheckpoint(
                cid, request.kind, request.mode, fixed, (), inp.now_ms, request.reason
            ),
            behind,
        )
        self._aborts()
        self.last_id = max(self.last_id, cid)
        self.started.append(
            StartedCheckpoint(
                cid,
                request.kind,
                request.mode,
                fixed,
                inp.now_ms,
                request.requested_ms,
                request.reason,
            )
        )
        log.info(
            "checkpoint %d (%s, %s): barrier positions fixed at %s",
            cid,
            request.kind,
            request.mode.value,
            barrier,
        )

    def reach(self) -> list[int]:
        """Per channel, how far this batch could deliver with no checkpoint in the way."""
        inp = self.inp
        out = []
        for c, p in enumerate(self.positions):
            upto, limit = inp.available[c], inp.admission[c]
            if limit is not None:
                upto = min(upto, p + limit)
            if inp.target is not None:
                upto = min(upto, inp.target[c])
            out.append(max(p, upto))
        return out

    def deliver(self) -> None:
        """Deliver this batch: as far as each channel reaches, or as the handler says."""
        alignment = self.alignment
        active = alignment.checkpoint
        self.positions = alignment.batch(self.positions, self.reach())
        self._aborts()
        ctl = alignment.controller
        for cid, mode in ctl.cuts():
            assert active is not None and cid == active.checkpoint_id
            self._cut(active, mode, ctl.inflight(cid))
        alignment.finish()

    @property
    def injected(self) -> ActiveCheckpoint | None:
        """The checkpoint injected and not finished."""
        return self.alignment.checkpoint

    @property
    def delivered(self) -> bool:
        """Whether this batch delivers records."""
        return tuple(self.positions) != self.start_positions

    def _cut(self, active: ActiveCheckpoint, mode: Mode, inflight: tuple[Chunk, ...]) -> None:
        self.cut = Cut(
            checkpoint_id=active.checkpoint_id,
            kind=active.kind,
            mode=mode,
            barrier=active.barrier,
            inflight=inflight,
            base=self.inp.last_completed,
            at_ms=self.inp.now_ms,
        )
        # An availableNow run ends with a final checkpoint unless this cut is at its end
        # positions with nothing in flight (its state alone is then the whole input) in
        # a batch without records (see Planner.plan()).
        self.last_cut = None if inflight or self.delivered else active.barrier
        log.info(
            "checkpoint %d cut (%s), in-flight ranges %s",
            active.checkpoint_id,
            mode.value,
            list(inflight),
        )

    def result(self, start: SourceOffset) -> SourceOffset:
        replay = start.replay
        return SourceOffset(
            positions=tuple(self.positions),
            last_id=self.last_id,
            last_cut=self.last_cut,
            active=self.alignment.state(),
            cut=self.cut,
            started=tuple(self.started),
            aborted=tuple(self.aborted),
            restore=start.restore,  # what a restored run was restored from: kept for good
            replay=None if replay is None or replay.done(self.positions) else replay,
        )


class Planner:
    """Plans the batches of one source with its one barrier handler, kept across batches
    and checkpoints (rebuilt from the start offset when it is not the last one planned,
    e.g. after a restart).

    Attributes
    ----------
    alignment : Alignment or None
        The source's barrier handler; its ``trace`` holds the events of the last
        :meth:`plan` (None before the first).
    awaits_final_id : bool
        Whether the last :meth:`plan` found an availableNow run's final checkpoint due
        but no id for it (the coordinator's schedule reserves one the source already
        started): plan again with a newer schedule.
    """

    def __init__(self) -> None:
        self._carried: SourceOffset | None = None
        self.alignment: Alignment | None = None
        self.awaits_final_id = False

    def plan(self, start: SourceOffset, inp: PlanInput) -> SourceOffset:
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
            The end offset of the next batch. Equal to ``start`` when no record, barrier
            or abort is due, which tells Spark there is no new data.
        """
        alignment = self.alignment
        if alignment is None or start.carried() != self._carried:
            alignment = Alignment.rebuild(
                len(start.positions), inp.aligned_timeout_ms, start.last_id, start.active
            )
        alignment.trace = []
        alignment.controller.clear()
        alignment.advance(inp.now_ms)
        step = _Step(start, inp, alignment)
        active = step.injected
        if active is not None and active.checkpoint_id in inp.cancelled:
            step.cancel()
        for request in sorted(inp.requests, key=lambda r: r.checkpoint_id):
            if request.checkpoint_id > step.last_id and request.checkpoint_id not in inp.cancelled:
                step.start(request)
        if inp.schedule is not None and not step.started:
            # The periodic checkpoint the coordinator scheduled, in the first batch planned
            # once it is due (a requested one started now goes first: this one would subsume it).
            due = inp.schedule.request(inp.now_ms, step.last_id)
            if due is not None and due.checkpoint_id not in inp.cancelled:
                step.start(due)
        step.deliver()
        self.awaits_final_id = False
        if (
            inp.target is not None
            and step.injected is None
            and step.cut is None
            and all(p >= t for p, t in zip(step.positions, inp.target, strict=True))
            and step.last_cut != tuple(step.positions)
            and not step.delivered
        ):
            # End of an availableNow run: a final aligned checkpoint at the end positions,
            # cut in a batch of its own, after the last records. Spark runs the batch after
            # the last records' batch with the watermark they moved: operators evict and
            # emit (windows in append mode) there, and only a cut in that batch or later
            # covers its output and state. Its id comes from the coordinator's allocator.
            final = final_checkpoint(inp.schedule, inp.now_ms, step.last_id)
            if final is None:
                log.info(
                    "the availableNow run's final checkpoint waits for an id above %d from "
                    "the coordinator's schedule",
                    step.last_id,
                )
                self.awaits_final_id = True
            else:
                step.start(final)
                step.deliver()
        end = step.result(start)
        self.alignment = alignment
        self._carried = end.carried()
        if end.carried() == start.carried() and not (end.started or end.aborted or end.cut):
            return start
        return end


def plan(start: SourceOffset, inp: PlanInput) -> SourceOffset:
    """Plan the batch after ``start`` with a fresh :class:`Planner` (see
    :meth:`Planner.plan`): what a restarted driver does."""
    return Planner().plan(start, inp)
