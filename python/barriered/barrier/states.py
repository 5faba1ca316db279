"""Handler states of the exactly-once modes, one small class per state.

Modelled on Flink's ``SingleCheckpointBarrierHandler`` states: every event method takes
the shared :class:`~barriered.barrier.context.HandlerContext` and returns the next state.

- :class:`WaitingForFirstBarrier` - no checkpoint is current.
- :class:`CollectingBarriers` - aligning the current checkpoint (aligned phase).
- :class:`CollectingChannelState` - the current checkpoint was triggered unaligned and its
  in-flight data is being recorded (collecting phase).

The rules R1-R9 cited below are those of ``docs/barrier-handler.md``.
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
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int
    ) -> HandlerState:
        """The barrier of ``checkpoint_id`` arrived on ``channel``."""

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


class _ExactlyOnceState(HandlerState):
    """Shared rules of the exactly-once states for ids that are not the current one."""

    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int
    ) -> HandlerState:
        if ctx.is_new(checkpoint_id):  # R2 / R7 / R8
            self._end_current(ctx, AbortReason.SUBSUMED)
            return start_checkpoint(ctx, channel, checkpoint_id)
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
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int
    ) -> HandlerState:
        if checkpoint_id == self.checkpoint_id:
            self.received.add(channel)
            return self._barrier_of_current(ctx, channel)
        return super().on_barrier(ctx, channel, checkpoint_id)

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
    """Aligning the current checkpoint: channels that delivered its barrier are blocked."""

    phase = Phase.ALIGNING

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

    def on_time(self, ctx: HandlerContext[Any]) -> HandlerState:
        timeout = ctx.alignment_timeout_ms
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


def start_checkpoint(ctx: HandlerContext[Any], channel: int, checkpoint_id: int) -> HandlerState:
    """Start the new checkpoint ``checkpoint_id`` at its first barrier, on ``channel``.

    Unaligned mode triggers at once and starts collecting (R7); the aligned modes block
    ``channel`` and start aligning (R2). Either may complete at once if ``channel`` is the
    only open one.
    """
    ctx.note_id(checkpoint_id)
    now = ctx.now_ms()
    if ctx.mode is Mode.UNALIGNED:
        ctx.trigger(checkpoint_id, Mode.UNALIGNED)
        return CollectingChannelState(checkpoint_id, {channel}, now).complete_if_collected(ctx)
    log.debug("checkpoint %d: alignment started on channel %d", checkpoint_id, channel)
    ctx.block(channel)
    return CollectingBarriers(checkpoint_id, {channel}, now).complete_if_aligned(ctx)
