"""One checkpoint's barrier alignment across micro-batches, decided by the barrier handler.

The source planner gives every checkpoint whose barrier positions ``B(c)`` it fixed an
:class:`Alignment`: a :class:`~barriered.barrier.BarrierHandler` in the checkpoint's
mode, its clock and the production controller :class:`BatchController`, kept across
micro-batches (and rebuilt from the offset's :class:`ActiveCheckpoint` after a restart).
For each micro-batch the planner only says how far every channel could deliver; the
alignment turns that into handler events and reads the handler's decisions back from
its controller and :meth:`~barriered.barrier.BarrierHandler.blocked_channels`:

1. The clock moves to the batch's time (every event of a batch happens then), which
   may end an alignment that timed out (R9).
2. Every channel that is not blocked delivers data up to its barrier position ``B(c)``
   (past it once its barrier arrived, in at-least-once mode), as one chunk
   ``(channel, start, end)``; then the barrier of every channel that reached ``B(c)``.
3. Once the checkpoint was triggered unaligned (mode unaligned, or the switch of R9),
   the barriers overtake the backlog: the data ``[end, B(c))`` of every channel still
   without its barrier arrives, then its barrier, and the handler records that data as
   channel state: the cut's in-flight ranges.

The batch delivers exactly what the handler processed before it triggered; what it
processes after the trigger belongs after the cut (later batches).
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

__all__ = ["Alignment", "BatchController", "Chunk", "TraceEntry", "feed"]

Chunk = tuple[int, int, int]
"""Records ``[start, end)`` of a channel: ``(channel, start, end)``."""

TraceEntry = tuple[Event, Chunk | None]
"""An event fed to a handler, with its data chunk (``None`` but for data)."""


def feed(
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
        handler.on_barrier(event.channel, event.checkpoint_id)
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
        Triggered checkpoints and how they were taken.
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
        self._cut_at: int | None = None

    def clear(self) -> None:
        """Forget everything recorded (a new micro-batch)."""
        self.__init__()  # type: ignore[misc]

    def trigger(self, checkpoint_id: int, mode: Mode) -> None:
        """The checkpoint is taken here: what was processed so far is its batch."""
        if self._cut_at is None:
            self._cut_at = len(self.processed)
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

    def delivered(self) -> list[Chunk]:
        """The chunks processed before the first trigger (all if none): this batch's."""
        return self.processed if self._cut_at is None else self.processed[: self._cut_at]

    def inflight(self, checkpoint_id: int) -> tuple[Chunk, ...]:
        """The recorded ranges of ``checkpoint_id``, one ``(channel, start, end)`` per
        channel (a channel's chunks are contiguous), in channel order."""
        ranges: dict[int, tuple[int, int]] = {}
        for channel, start, end in self.channel_state.get(checkpoint_id, ()):
            lo, hi = ranges.get(channel, (start, end))
            ranges[channel] = (min(lo, start), max(hi, end))
        return tuple((c, lo, hi) for c, (lo, hi) in sorted(ranges.items()))


class Alignment:
    """The barrier handler of one checkpoint, fed the events of its micro-batches.

    Parameters
    ----------
    checkpoint : ActiveCheckpoint
        The checkpoint: id, mode, barrier positions, and the channels whose barrier
        already arrived (a rebuild after a restart replays them at their first time).
    channels : int
        Number of channels.
    timeout_ms : int
        ``alignedCheckpointTimeout`` (used in mode ``aligned_with_timeout`` only).

    Attributes
    ----------
    trace : list of TraceEntry
        Every event fed since construction (a rebuild's replay excluded).
    origin_ms : int
        The clock when the trace starts.
    """

    def __init__(self, checkpoint: ActiveCheckpoint, channels: int, timeout_ms: int) -> None:
        self.checkpoint = checkpoint
        self.controller = BatchController()
        first = checkpoint.first_barrier_ms
        self.clock = ManualClock(checkpoint.started_ms if first is None else first)
        timeout = timeout_ms if checkpoint.mode is Mode.ALIGNED_WITH_TIMEOUT else None
        self.handler: BarrierHandler[Chunk] = BarrierHandler(
            channels, checkpoint.mode, self.controller, self.clock, timeout
        )
        self.arrived = list(checkpoint.arrived)
        for channel in checkpoint.arrived:
            self.handler.on_barrier(channel, checkpoint.checkpoint_id)
        self.controller.clear()
        self.origin_ms = self.clock.now_ms()
        self.trace: list[TraceEntry] = []

    # -- events ----------------------------------------------------------------------

    def _feed(self, event: Event, chunk: Chunk | None = None) -> None:
        self.trace.append((event, chunk))
        if isinstance(event, Barrier):
            self.arrived.append(event.channel)
        feed(self.handler, self.clock, event, chunk)

    def cancel(self) -> None:
        """The coordinator cancelled the checkpoint (R5)."""
        self.controller.clear()
        self._feed(Cancel(self.checkpoint.checkpoint_id, 0))

    def batch(self, positions: Sequence[int], reach: Sequence[int], now_ms: int) -> list[int]:
        """Feed one micro-batch (see the module docstring); return its end positions.

        Parameters
        ----------
        positions : sequence of int
            Delivered position of every channel before the batch.
        reach : sequence of int
            How far every channel could deliver in this batch (availability, admission).
        now_ms : int
            The batch's time.
        """
        self.controller.clear()
        barrier = self.checkpoint.barrier
        self._feed(TimeAdvance(max(0, now_ms - self.clock.now_ms())))
        blocked = self.handler.blocked_channels()
        free = self.checkpoint.mode is Mode.AT_LEAST_ONCE
        ends = list(positions)
        for c, (start, upto) in enumerate(zip(positions, reach, strict=True)):
            if c not in blocked:
                ends[c] = upto if free and c in self.arrived else min(upto, barrier[c])
                if ends[c] > start:
                    self._feed(Data(c), (c, start, ends[c]))
        for c in range(len(ends)):
            if c not in self.arrived and ends[c] >= barrier[c]:
                self._feed(Barrier(self.checkpoint.checkpoint_id, c))
        current = self.handler.current_checkpoint()
        if current is not None and current.phase is Phase.COLLECTING:
            for c in range(len(ends)):  # triggered unaligned: the barriers overtake
                if c not in current.barriers_received:
                    if ends[c] < barrier[c]:
                        self._feed(Data(c), (c, ends[c], barrier[c]))
                    self._feed(Barrier(self.checkpoint.checkpoint_id, c))
        end = list(positions)
        for channel, _, stop in self.controller.delivered():
            end[channel] = max(end[channel], stop)
        return end

    # -- decisions -------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the checkpoint was triggered or aborted (its handler saw it and has
        nothing left of it)."""
        handler = self.handler
        return handler.max_checkpoint_id() is not None and handler.current_checkpoint() is None

    def state(self) -> ActiveCheckpoint:
        """The checkpoint as the offset carries it while it aligns."""
        current = self.handler.current_checkpoint()
        return ActiveCheckpoint(
            checkpoint_id=self.checkpoint.checkpoint_id,
            kind=self.checkpoint.kind,
            mode=self.checkpoint.mode,
            barrier=self.checkpoint.barrier,
            arrived=tuple(self.arrived),
            started_ms=self.checkpoint.started_ms,
            reason=self.checkpoint.reason,
            first_barrier_ms=None if current is None or not self.arrived else current.started_at_ms,
        )
