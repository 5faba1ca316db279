"""The source's barrier handler across checkpoints and micro-batches.

The source planner keeps one :class:`Alignment` for its source, as Flink keeps one
``SingleCheckpointBarrierHandler`` per input: a :class:`~barriered.barrier.BarrierHandler`
with its clock and the production controller :class:`BatchController`, rebuilt from the
offset after a restart (:meth:`Alignment.rebuild`). The planner injects one checkpoint at a
time, with its barrier positions ``B(c)`` (the offset's
:class:`~barriered.control.offsets.ActiveCheckpoint`); every barrier carries the
checkpoint's mode. For each micro-batch the planner only says how far every channel could
deliver; the alignment turns that into handler events and reads the handler's decisions
back from its controller and :meth:`~barriered.barrier.BarrierHandler.blocked_channels`:

1. The clock moves to the batch's time (every event of a batch happens then), which
   may end an alignment that timed out (R9). Then come the coordinator's cancellation
   of the injected checkpoint (R5) and the barriers of a checkpoint injected right
   behind an older one's, which subsume it (R2, R8).
2. Every channel that is not blocked delivers data up to its barrier position ``B(c)``
   (past it once its barrier arrived, in at-least-once mode), as one chunk
   ``(channel, start, end)``; then the barrier of every channel that reached ``B(c)``.
   The first barrier of a new checkpoint subsumes the one still in progress (R2, R8).
3. Once the checkpoint was triggered unaligned (mode unaligned, or the switch of R9),
   the barriers overtake the backlog: the data ``[end, B(c))`` of every channel still
   without its barrier arrives, then its barrier, and the handler records that data as
   channel state: the cut's in-flight ranges.

The batch delivers exactly what the handler processed before it triggered; what it
processes after the trigger belongs after the cut (later batches). A checkpoint that is
triggered and then subsumed in the same batch (R8) is no cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from barriered.barrier import (
    AbortReason,
    Barrier,
    BarrierHandler,
    Cancel,
    Data,
    EndOfPartition,
    Event,
    ManualClock,
    Mode,
    Phase,
    TimeAdvance,
)
from barriered.control.offsets import ActiveCheckpoint

__all__ = ["Alignment", "BatchController", "Chunk", "TraceEntry", "dispatch"]

Chunk = tuple[int, int, int]
"""Records ``[start, end)`` of a channel: ``(channel, start, end)``."""

TraceEntry = tuple[Event, Chunk | None]
"""An event fed to a handler, with its data chunk (``None`` but for data)."""


def dispatch(
    handler: BarrierHandler[Chunk], clock: ManualClock, event: Event, chunk: Chunk | None = None
) -> None:
    """Hand one event to ``handler`` (a ``TimeAdvance`` moves ``clock`` first).

    Raises
    ------
    BarrierProtocolError
        If the event arrives on a closed or unknown channel.
    """
    if isinstance(event, Data):
        assert chunk is not None, "data needs its chunk"
        handler.on_data(event.channel, chunk)
    elif isinstance(event, Barrier):
        handler.on_barrier(event.channel, event.checkpoint_id, event.mode)
    elif isinstance(event, Cancel):
        handler.on_cancel(event.channel, event.checkpoint_id)
    elif isinstance(event, EndOfPartition):
        handler.on_end_of_partition(event.channel)
    else:
        clock.advance(event.ms)
        handler.on_time_advanced()


class BatchController:
    """The source planner's :class:`~barriered.barrier.BarrierController`, over chunks.

    It records one micro-batch's decisions (:meth:`clear` starts the next batch).

    Attributes
    ----------
    processed : list of Chunk
        Chunks in processing order.
    triggered : list of (int, Mode)
        Triggered checkpoints and how they were taken (one aborted later in the batch,
        R8, is no cut: see :meth:`cuts`).
    aborted : list of (int, AbortReason)
        Aborted checkpoints.
    channel_state : dict of int to list of Chunk
        Per checkpoint, the chunks recorded as in-flight channel state (an abort drops
        its entry).
    """

    def __init__(self) -> None:
        self.processed: list[Chunk] = []
        self.triggered: list[tuple[int, Mode]] = []
        self.aborted: list[tuple[int, AbortReason]] = []
        self.channel_state: dict[int, list[Chunk]] = {}
        self._triggered_at: dict[int, int] = {}

    def clear(self) -> None:
        """Forget everything recorded (a new micro-batch)."""
        self.__init__()  # type: ignore[misc]

    def trigger(self, checkpoint_id: int, mode: Mode) -> None:
        """The checkpoint is taken here: what was processed so far is its batch."""
        self._triggered_at[checkpoint_id] = len(self.processed)
        self.triggered.append((checkpoint_id, mode))

    def abort(self, checkpoint_id: int, reason: AbortReason) -> None:
        """Record an abort and drop the checkpoint's channel state."""
        self.aborted.append((checkpoint_id, reason))
        self.channel_state.pop(checkpoint_id, None)

    def process(self, channel: int, item: Chunk) -> None:
        """Record a processed chunk."""
        self.processed.append(item)

    def record_channel_state(self, checkpoint_id: int, channel: int, item: Chunk) -> None:
        """Record a chunk of in-flight channel state."""
        self.channel_state.setdefault(checkpoint_id, []).append(item)

    def cuts(self) -> list[tuple[int, Mode]]:
        """The triggered checkpoints that were not aborted after their trigger."""
        aborted = {cid for cid, _ in self.aborted}
        return [(cid, mode) for cid, mode in self.triggered if cid not in aborted]

    def delivered(self) -> list[Chunk]:
        """The chunks processed before the first cut (all if none): this batch's."""
        cuts = self.cuts()
        return self.processed if not cuts else self.processed[: self._triggered_at[cuts[0][0]]]

    def inflight(self, checkpoint_id: int) -> tuple[Chunk, ...]:
        """The recorded ranges of ``checkpoint_id``, one ``(channel, start, end)`` per
        channel (a channel's chunks are contiguous), in channel order."""
        ranges: dict[int, tuple[int, int]] = {}
        for channel, start, end in self.channel_state.get(checkpoint_id, ()):
            lo, hi = ranges.get(channel, (start, end))
            ranges[channel] = (min(lo, start), max(hi, end))
        return tuple((c, lo, hi) for c, (lo, hi) in sorted(ranges.items()))


class Alignment:
    """The source's barrier handler, fed the events of its micro-batches.

    Parameters
    ----------
    channels : int
        Number of channels.
    timeout_ms : int
        ``alignedCheckpointTimeout`` (read by ``aligned_with_timeout`` checkpoints).
    last_id : int or None
        The highest checkpoint id the handler's predecessors started or aborted: ids up
        to it are stale (R1).
    origin_ms : int
        The clock when the handler starts.
    mode : Mode or str, default "aligned"
        The mode of checkpoints whose barriers carry none (the source's always carry
        theirs).

    Attributes
    ----------
    checkpoint : ActiveCheckpoint or None
        The checkpoint whose barriers the source injected and that is not finished yet.
    trace : list of TraceEntry
        The events fed since construction or since the planner last emptied it (at
        every planning step; a rebuild's replay excluded).
    last_id, origin_ms
        As given (the state a replay of ``trace`` starts from).
    """

    def __init__(
        self,
        channels: int,
        timeout_ms: int | None,
        last_id: int | None,
        origin_ms: int,
        mode: Mode | str = Mode.ALIGNED,
    ) -> None:
        self.controller = BatchController()
        self.clock = ManualClock(origin_ms)
        self.handler: BarrierHandler[Chunk] = BarrierHandler(
            channels, mode, self.controller, self.clock, timeout_ms, last_id
        )
        self.last_id = last_id
        self.origin_ms = origin_ms
        self.checkpoint: ActiveCheckpoint | None = None
        self.arrived: list[int] = []
        self.trace: list[TraceEntry] = []

    @classmethod
    def rebuild(
        cls, channels: int, timeout_ms: int, last_id: int, active: ActiveCheckpoint | None
    ) -> Alignment:
        """The handler as it stood after the batch whose end offset holds ``last_id`` and
        ``active``: the barriers of ``active`` that arrived are fed again, at the time the
        first of them arrived, after one of each older checkpoint still pending (a
        restarted driver, or a start offset that is not the last one planned)."""
        if active is None:
            return cls(channels, timeout_ms, last_id, 0)
        first = active.first_barrier_ms
        alignment = cls(
            channels,
            timeout_ms,
            min((active.checkpoint_id, *active.older)) - 1,
            active.started_ms if first is None else first,
        )
        for older in active.older:  # pending on some channels, never on all (R10)
            alignment.feed(Barrier(older, 0, Mode.AT_LEAST_ONCE))
        alignment.inject(active, active.arrived)
        alignment.controller.clear()
        alignment.trace.clear()
        return alignment

    # -- events ----------------------------------------------------------------------

    def feed(self, event: Event, chunk: Chunk | None = None) -> None:
        """Hand one event (with its chunk, for data) to the handler and record it in
        :attr:`trace`.

        Raises
        ------
        BarrierProtocolError
            If the event arrives on a closed or unknown channel.
        """
        self.trace.append((event, chunk))
        if isinstance(event, Barrier):
            self.arrived.append(event.channel)
        dispatch(self.handler, self.clock, event, chunk)

    def advance(self, now_ms: int) -> None:
        """The clock moves to the planning step's time (never back): every later event of
        the step happens then."""
        self.feed(TimeAdvance(max(0, now_ms - self.clock.now_ms())))

    def inject(self, checkpoint: ActiveCheckpoint, behind: Sequence[int] = ()) -> None:
        """Inject the barriers of ``checkpoint`` at its barrier positions; those of the
        checkpoint injected before it that did not arrive are withdrawn.

        Parameters
        ----------
        checkpoint : ActiveCheckpoint
            Its ``arrived`` is not read.
        behind : sequence of int
            Channels whose barrier sits at their delivered position (right behind the
            older checkpoint's): it arrives now, in this order.
        """
        self.checkpoint = checkpoint
        self.arrived = []
        for channel in behind:
            self.feed(Barrier(checkpoint.checkpoint_id, channel, checkpoint.mode))

    def in_handler(self) -> bool:
        """Whether the injected checkpoint reached the handler (a barrier of it arrived)."""
        return bool(self.arrived)

    def cancel(self) -> None:
        """The coordinator cancelled the injected checkpoint: its cancellation marker
        reaches the handler (R5)."""
        assert self.checkpoint is not None
        self.feed(Cancel(self.checkpoint.checkpoint_id, 0))
        self.checkpoint, self.arrived = None, []

    def batch(self, positions: Sequence[int], reach: Sequence[int]) -> list[int]:
        """Feed one micro-batch (see the module docstring); return its end positions.

        Parameters
        ----------
        positions : sequence of int
            Delivered position of every channel before the batch.
        reach : sequence of int
            How far every channel could deliver in this batch (availability, admission).
        """
        checkpoint = self.checkpoint
        if checkpoint is None:
            return list(reach)
        barrier, cid, mode = checkpoint.barrier, checkpoint.checkpoint_id, checkpoint.mode
        blocked = self.handler.blocked_channels()
        free = mode is Mode.AT_LEAST_ONCE
        ends = list(positions)
        for c, (start, upto) in enumerate(zip(positions, reach, strict=True)):
            if c not in blocked:
                ends[c] = upto if free and c in self.arrived else min(upto, barrier[c])
                if ends[c] > start:
                    self.feed(Data(c), (c, start, ends[c]))
        for c in range(len(ends)):
            if c not in self.arrived and ends[c] >= barrier[c]:
                self.feed(Barrier(cid, c, mode))
        current = self.handler.current_checkpoint()
        if current is not None and current.phase is Phase.COLLECTING:
            for c in range(len(ends)):  # triggered unaligned: the barriers overtake
                if c not in current.barriers_received:
                    if ends[c] < barrier[c]:
                        self.feed(Data(c), (c, ends[c], barrier[c]))
                    self.feed(Barrier(cid, c, mode))
        end = list(positions)
        for channel, _, stop in self.controller.delivered():
            end[channel] = max(end[channel], stop)
        return end

    # -- decisions -------------------------------------------------------------------

    def finish(self) -> None:
        """Forget the injected checkpoint once the handler triggered or aborted it."""
        checkpoint = self.checkpoint
        if checkpoint is None or not self.in_handler():
            return
        pending = {view.checkpoint_id for view in self.handler.pending_checkpoints()}
        if checkpoint.checkpoint_id not in pending:
            self.checkpoint, self.arrived = None, []

    def state(self) -> ActiveCheckpoint | None:
        """The injected checkpoint as the offset carries it while it is in progress."""
        checkpoint = self.checkpoint
        if checkpoint is None:
            return None
        current = self.handler.current_checkpoint()
        return ActiveCheckpoint(
            checkpoint_id=checkpoint.checkpoint_id,
            kind=checkpoint.kind,
            mode=checkpoint.mode,
            barrier=checkpoint.barrier,
            arrived=tuple(self.arrived),
            started_ms=checkpoint.started_ms,
            reason=checkpoint.reason,
            first_barrier_ms=None if current is None or not self.arrived else current.started_at_ms,
            older=tuple(
                view.checkpoint_id
                for view in self.handler.pending_checkpoints()
                if view.checkpoint_id < checkpoint.checkpoint_id
            ),
        )
