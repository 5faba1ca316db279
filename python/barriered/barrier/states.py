"""Handler states of the exactly-once modes, one small class per state.

Modelled on Flink's ``SingleCheckpointBarrierHandler`` states: every event method takes
the shared :class:`~barriered.barrier.context.HandlerContext` and returns the next state.

- :class:`WaitingForFirstBarrier` - no checkpoint is current.
- :class:`CollectingBarriers` - aligning the current checkpoint (aligned phase).
- :class:`CollectingChannelState` - the current checkpoint was triggered unaligned and its
  in-flight data is being recorded (collecting phase).
- :class:`TrackingBarriers` - at-least-once checkpoints are pending (Flink's
  ``CheckpointBarrierTracker``, R10).

As a Flink barrier carries its ``CheckpointOptions``, every barrier carries the mode of
its checkpoint, so one long-lived handler takes checkpoints of different modes one after
the other: the first barrier of a new id starts it in its own mode
(:func:`start_checkpoint`), after the current checkpoint was aborted ``subsumed``.

The rules R1-R10 cited below are those of ``docs/barrier-handler.md``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, TypeVar

from barriered.barrier.context import HandlerContext
from barriered.barrier.modes import AbortReason, Mode, Phase

__all__ = [
    "CheckpointView",
    "CollectingBarriers",
    "CollectingChannelState",
    "HandlerState",
    "TrackingBarriers",
    "WaitingForFirstBarrier",
    "start_checkpoint",
]

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")


@dataclass(frozen=True)
class CheckpointView:
    """Read-only snapshot of a checkpoint a handler is working on.

    Attributes
    ----------
    checkpoint_id : int
        The checkpoint id.
    phase : Phase
        ``aligning``, ``collecting`` (exactly once) or ``pending`` (at least once).
    barriers_received : frozenset of int
        Channels that have delivered the checkpoint's barrier.
    started_at_ms : int
        Clock value when its first barrier arrived.
    """

    checkpoint_id: int
    phase: Phase
    barriers_received: frozenset[int]
    started_at_ms: int


class HandlerState(ABC):
    """One state of the barrier handler; every event method returns the next state.

    The handler has already checked that the event's channel exists and is open, and
    for end of partition has already closed the channel in the context.
    """

    def on_data(self, ctx: HandlerContext[ItemT], channel: int, item: ItemT) -> HandlerState:
        """A data item arrived: process it, or hold it if its channel is blocked."""
        ctx.deliver(channel, item)
        return self

    @abstractmethod
    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int, mode: Mode
    ) -> HandlerState:
        """The barrier of ``checkpoint_id``, a checkpoint in ``mode``, arrived on ``channel``."""

    @abstractmethod
    def on_cancel(self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int) -> HandlerState:
        """The cancellation marker of ``checkpoint_id`` arrived on ``channel``."""

    @abstractmethod
    def on_end_of_partition(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        """``channel`` was closed (already removed from the open channels)."""

    def on_time(self, ctx: HandlerContext[Any]) -> HandlerState:
        """Called after every event: react to the time of the clock (default: nothing)."""
        return self

    def views(self) -> tuple[CheckpointView, ...]:
        """The checkpoints in progress, oldest first (default: none)."""
        return ()

    def alignment_deadline_ms(self) -> int | None:
        """Clock value at which the current alignment times out (default: none)."""
        return None


class _ExactlyOnceState(HandlerState):
    """Shared rules of the exactly-once states for ids that are not the current one."""

    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int, mode: Mode
    ) -> HandlerState:
        if ctx.is_new(checkpoint_id):  # R2 / R7 / R8
            self._end_current(ctx, AbortReason.SUBSUMED)
            return start_checkpoint(ctx, channel, checkpoint_id, mode)
        log.debug("checkpoint %d: stale barrier on channel %d ignored", checkpoint_id, channel)
        return self  # R1

    def on_cancel(self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int) -> HandlerState:
        if ctx.is_new(checkpoint_id):  # R5, newer id
            self._end_current(ctx, AbortReason.SUBSUMED)
            ctx.note_id(checkpoint_id)
            ctx.abort(checkpoint_id, AbortReason.CANCELLED)
            return WaitingForFirstBarrier()
        log.debug("checkpoint %d: stale cancel on channel %d ignored", checkpoint_id, channel)
        return self  # R1

    def _end_current(self, ctx: HandlerContext[Any], reason: AbortReason) -> None:
        """Abort the current checkpoint, if any, and unblock every channel."""


class WaitingForFirstBarrier(_ExactlyOnceState):
    """No checkpoint is current; the next new barrier starts one."""

    def on_end_of_partition(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        return self


class _CurrentCheckpointState(_ExactlyOnceState):
    """A state with a current checkpoint, whose own barriers and cancels are always handled.

    Parameters
    ----------
    checkpoint_id : int
        The current checkpoint.
    received : set of int
        Channels that delivered its barrier.
    started_at_ms : int
        Clock value at its first barrier (the timeout is measured from here, R9).
    """

    phase: Phase

    def __init__(self, checkpoint_id: int, received: set[int], started_at_ms: int) -> None:
        self.checkpoint_id = checkpoint_id
        self.received = received
        self.started_at_ms = started_at_ms

    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int, mode: Mode
    ) -> HandlerState:
        if checkpoint_id == self.checkpoint_id:
            self.received.add(channel)
            return self._barrier_of_current(ctx, channel)
        return super().on_barrier(ctx, channel, checkpoint_id, mode)

    def on_cancel(self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int) -> HandlerState:
        if checkpoint_id == self.checkpoint_id:  # R5, current id
            self._end_current(ctx, AbortReason.CANCELLED)
            return WaitingForFirstBarrier()
        return super().on_cancel(ctx, channel, checkpoint_id)

    def _end_current(self, ctx: HandlerContext[Any], reason: AbortReason) -> None:
        ctx.abort(self.checkpoint_id, reason)
        ctx.unblock_all()

    @abstractmethod
    def _barrier_of_current(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        """``channel`` delivered the current barrier (already added to ``received``)."""

    def views(self) -> tuple[CheckpointView, ...]:
        return (
            CheckpointView(
                self.checkpoint_id, self.phase, frozenset(self.received), self.started_at_ms
            ),
        )


class CollectingBarriers(_CurrentCheckpointState):
    """Aligning the current checkpoint: channels that delivered its barrier are blocked.

    Parameters
    ----------
    checkpoint_id, received, started_at_ms
        As for every state with a current checkpoint.
    timeout_ms : int or None
        The alignment timeout of an ``aligned_with_timeout`` checkpoint (R9), else None.
    """

    phase = Phase.ALIGNING

    def __init__(
        self, checkpoint_id: int, received: set[int], started_at_ms: int, timeout_ms: int | None
    ) -> None:
        super().__init__(checkpoint_id, received, started_at_ms)
        self.timeout_ms = timeout_ms

    def _barrier_of_current(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        ctx.block(channel)  # R3
        return self.complete_if_aligned(ctx)

    def on_end_of_partition(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        return self.complete_if_aligned(ctx)  # R6

    def complete_if_aligned(self, ctx: HandlerContext[Any]) -> HandlerState:
        """Trigger ``aligned`` and unblock all if every open channel delivered (R3, R6)."""
        if not ctx.all_delivered(self.received):
            return self
        ctx.trigger(self.checkpoint_id, Mode.ALIGNED)
        ctx.unblock_all()
        return WaitingForFirstBarrier()

    def alignment_deadline_ms(self) -> int | None:
        return None if self.timeout_ms is None else self.started_at_ms + self.timeout_ms

    def on_time(self, ctx: HandlerContext[Any]) -> HandlerState:
        timeout = self.timeout_ms
        if timeout is None or ctx.now_ms() - self.started_at_ms < timeout:
            return self
        log.debug("checkpoint %d: alignment timed out after %d ms", self.checkpoint_id, timeout)
        ctx.trigger(self.checkpoint_id, Mode.UNALIGNED)  # R9
        ctx.unblock_all()  # held data is processed, not recorded
        return CollectingChannelState(self.checkpoint_id, self.received, self.started_at_ms)


class CollectingChannelState(_CurrentCheckpointState):
    """The current checkpoint was triggered unaligned; its in-flight data is recorded.

    A data item on an open channel that has not yet delivered the barrier is processed
    and recorded as channel state (R7). Nothing is blocked.
    """

    phase = Phase.COLLECTING

    def on_data(self, ctx: HandlerContext[ItemT], channel: int, item: ItemT) -> HandlerState:
        ctx.deliver(channel, item)
        if channel not in self.received:
            ctx.record(self.checkpoint_id, channel, item)
        return self

    def _barrier_of_current(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        return self.complete_if_collected(ctx)

    def on_end_of_partition(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        return self.complete_if_collected(ctx)  # R6

    def complete_if_collected(self, ctx: HandlerContext[Any]) -> HandlerState:
        """End the collection once every open channel delivered the barrier (R7, R6)."""
        if not ctx.all_delivered(self.received):
            return self
        log.debug("checkpoint %d: channel state complete", self.checkpoint_id)
        return WaitingForFirstBarrier()


class _Pending:
    """A pending checkpoint: the channels that delivered its barrier and when it started."""

    __slots__ = ("received", "started_at_ms")

    def __init__(self, channel: int, started_at_ms: int) -> None:
        self.received = {channel}
        self.started_at_ms = started_at_ms


class TrackingBarriers(HandlerState):
    """At-least-once checkpoints (R10): tracks every pending one, blocks nothing.

    The only state of an ``at_least_once`` handler. In a handler that also takes
    exactly-once checkpoints, the first barrier of a newer exactly-once checkpoint aborts
    every pending one ``subsumed`` and starts it.
    """

    def __init__(self) -> None:
        self._pending: dict[int, _Pending] = {}

    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int, mode: Mode
    ) -> HandlerState:
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.received.add(channel)
        elif ctx.is_new(checkpoint_id) and mode.exactly_once:
            # a newer exactly-once checkpoint subsumes every pending one (as R2 / R8)
            for cid in sorted(self._pending):
                ctx.abort(cid, AbortReason.SUBSUMED)
            return start_checkpoint(ctx, channel, checkpoint_id, mode)
        elif ctx.is_new(checkpoint_id):
            ctx.note_id(checkpoint_id)
            pending = self._pending[checkpoint_id] = _Pending(channel, ctx.now_ms())
            log.debug("checkpoint %d: pending from channel %d", checkpoint_id, channel)
        else:
            log.debug("checkpoint %d: stale barrier on channel %d ignored", checkpoint_id, channel)
            return self
        if ctx.all_delivered(pending.received):
            self._complete(ctx, checkpoint_id)
        return self

    def on_cancel(self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int) -> HandlerState:
        if checkpoint_id in self._pending or ctx.is_new(checkpoint_id):
            ctx.note_id(checkpoint_id)
            ctx.abort(checkpoint_id, AbortReason.CANCELLED)
            self._drop_up_to(checkpoint_id)
        else:
            log.debug("checkpoint %d: stale cancel on channel %d ignored", checkpoint_id, channel)
        return self

    def on_end_of_partition(self, ctx: HandlerContext[Any], channel: int) -> HandlerState:
        for checkpoint_id in sorted(self._pending):
            pending = self._pending.get(checkpoint_id)
            if pending is not None and ctx.all_delivered(pending.received):
                self._complete(ctx, checkpoint_id)
        return self

    def views(self) -> tuple[CheckpointView, ...]:
        return tuple(
            CheckpointView(cid, Phase.PENDING, frozenset(p.received), p.started_at_ms)
            for cid, p in sorted(self._pending.items())
        )

    def _complete(self, ctx: HandlerContext[Any], checkpoint_id: int) -> None:
        ctx.trigger(checkpoint_id, Mode.AT_LEAST_ONCE)
        self._drop_up_to(checkpoint_id)

    def _drop_up_to(self, checkpoint_id: int) -> None:
        """Forget ``checkpoint_id`` and, silently, every older pending checkpoint."""
        for cid in [cid for cid in self._pending if cid <= checkpoint_id]:
            if cid != checkpoint_id:
                log.debug("checkpoint %d: dropped, subsumed by %d", cid, checkpoint_id)
            del self._pending[cid]


def start_checkpoint(
    ctx: HandlerContext[Any], channel: int, checkpoint_id: int, mode: Mode
) -> HandlerState:
    """Start the new checkpoint ``checkpoint_id`` in ``mode`` at its first barrier, on
    ``channel``.

    Unaligned mode triggers at once and starts collecting (R7); the aligned modes block
    ``channel`` and start aligning (R2), with the context's alignment timeout in mode
    ``aligned_with_timeout`` (R9); at-least-once makes it pending (R10). Any of them may
    complete at once if ``channel`` is the only open one.
    """
    if mode is Mode.AT_LEAST_ONCE:
        return TrackingBarriers().on_barrier(ctx, channel, checkpoint_id, mode)
    ctx.note_id(checkpoint_id)
    now = ctx.now_ms()
    if mode is Mode.UNALIGNED:
        ctx.trigger(checkpoint_id, Mode.UNALIGNED)
        return CollectingChannelState(checkpoint_id, {channel}, now).complete_if_collected(ctx)
    log.debug("checkpoint %d: alignment started on channel %d", checkpoint_id, channel)
    ctx.block(channel)
    timeout = ctx.alignment_timeout_ms if mode is Mode.ALIGNED_WITH_TIMEOUT else None
    return CollectingBarriers(checkpoint_id, {channel}, now, timeout).complete_if_aligned(ctx)
