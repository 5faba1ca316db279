"""The at-least-once barrier tracker (rule R10), modelled on Flink's CheckpointBarrierTracker.

Nothing is ever blocked, held or recorded. Several checkpoints may be pending at once; a
pending checkpoint triggers when its barrier has arrived on every open channel, and then
every older pending checkpoint is dropped silently.
"""

from __future__ import annotations

import logging
from typing import Any

from barriered.barrier.context import HandlerContext
from barriered.barrier.modes import AbortReason, Mode, Phase
from barriered.barrier.states import CheckpointView, HandlerState

__all__ = ["TrackingBarriers"]

log = logging.getLogger(__name__)


class _Pending:
    """A pending checkpoint: the channels that delivered its barrier and when it started."""

    __slots__ = ("received", "started_at_ms")

    def __init__(self, channel: int, started_at_ms: int) -> None:
        self.received = {channel}
        self.started_at_ms = started_at_ms


class TrackingBarriers(HandlerState):
    """The only state of the at-least-once handler: tracks every pending checkpoint."""

    def __init__(self) -> None:
        self._pending: dict[int, _Pending] = {}

    def on_barrier(
        self, ctx: HandlerContext[Any], channel: int, checkpoint_id: int
    ) -> HandlerState:
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            pending.received.add(channel)
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
