"""The public facade of the barrier handler state machine.

A :class:`BarrierHandler` sits on one input with ``channels`` channels and is fed the
events of those channels in arrival order. It decides when a checkpoint is triggered or
aborted, which channels are blocked, which data is held back and which data is in-flight
channel state, and reports every decision to its :class:`BarrierController`.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

from barriered.barrier.clock import Clock
from barriered.barrier.context import HandlerContext
from barriered.barrier.controller import BarrierController
from barriered.barrier.modes import Mode
from barriered.barrier.states import (
    CheckpointView,
    HandlerState,
    TrackingBarriers,
    WaitingForFirstBarrier,
)
from barriered.errors import ConfigError

__all__ = ["BarrierHandler"]

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")


class BarrierHandler(Generic[ItemT]):
    """Barrier alignment for one multi-channel input (rules R1-R10 of the conformance spec).

    Like Flink's ``SingleCheckpointBarrierHandler``, one handler lives as long as its
    input and takes one checkpoint after the other: a barrier may carry the mode of its
    checkpoint (as Flink's carries its ``CheckpointOptions``), and the first barrier of a
    new id starts the checkpoint in that mode, subsuming the current one (R2, R8).

    Parameters
    ----------
    channels : int
        Number of input channels (>= 1), numbered ``0 .. channels - 1``; all start open.
    mode : Mode or str
        ``aligned``, ``unaligned``, ``aligned_with_timeout`` or ``at_least_once``: the
        mode of every checkpoint whose barriers carry none.
    controller : BarrierController
        Receives ``trigger``, ``abort``, ``process`` and ``record_channel_state`` calls.
    clock : Clock
        Time source for the alignment timeout.
    alignment_timeout_ms : int or None, default None
        The timeout ``T`` (>= 0) after which the alignment of an ``aligned_with_timeout``
        checkpoint switches to unaligned. Required in ``aligned_with_timeout`` mode.
    last_checkpoint_id : int or None, default None
        The highest id a previous handler of this input started or aborted (a handler
        rebuilt after a restart): barriers and cancels of ids up to it are stale (R1).

    Raises
    ------
    ConfigError
        If ``channels < 1``, the mode is unknown, or the timeout is negative, or missing
        in ``aligned_with_timeout`` mode.

    Notes
    -----
    Every event method raises :class:`~barriered.errors.BarrierProtocolError` for a
    channel that does not exist or is already closed, and then changes nothing. After
    every event the alignment timeout is checked, so a switch to unaligned is already
    reflected when the method returns.

    Examples
    --------
    >>> from barriered.barrier import ManualClock
    >>> from barriered.datasource.alignment import BatchController
    >>> ctl = BatchController()
    >>> handler = BarrierHandler(2, Mode.ALIGNED, ctl, ManualClock())
    >>> handler.on_barrier(0, 1)
    >>> handler.on_data(0, (0, 0, 5))
    >>> sorted(handler.blocked_channels()), handler.held_items()
    ([0], 1)
    >>> handler.on_barrier(1, 1)
    >>> ctl.triggered, ctl.processed
    ([(1, <Mode.ALIGNED: 'aligned'>)], [(0, 0, 5)])
    """

    def __init__(
        self,
        channels: int,
        mode: Mode | str,
        controller: BarrierController[ItemT],
        clock: Clock,
        alignment_timeout_ms: int | None = None,
        last_checkpoint_id: int | None = None,
    ) -> None:
        mode = _mode(mode)
        if channels < 1:
            raise ConfigError(f"a barrier handler needs at least one channel, got {channels}")
        if (alignment_timeout_ms is None and mode is Mode.ALIGNED_WITH_TIMEOUT) or (
            alignment_timeout_ms is not None and alignment_timeout_ms < 0
        ):
            raise ConfigError(
                "mode aligned_with_timeout needs alignment_timeout_ms >= 0, "
                f"got {alignment_timeout_ms!r}"
            )
        self._ctx: HandlerContext[ItemT] = HandlerContext(
            channels, mode, controller, clock, alignment_timeout_ms
        )
        self._ctx.max_id = last_checkpoint_id
        self._state: HandlerState = (
            TrackingBarriers() if mode is Mode.AT_LEAST_ONCE else WaitingForFirstBarrier()
        )

    # -- events ------------------------------------------------------------------------

    def on_data(self, channel: int, item: ItemT) -> None:
        """A data item arrived on ``channel``: process, hold and/or record it."""
        self._ctx.check_open(channel, "data")
        self._state = self._state.on_data(self._ctx, channel, item)
        self._after_event()

    def on_barrier(self, channel: int, checkpoint_id: int, mode: Mode | str | None = None) -> None:
        """The barrier of ``checkpoint_id`` arrived on ``channel``.

        Parameters
        ----------
        channel : int
        checkpoint_id : int
        mode : Mode or str, optional
            The mode of the checkpoint (default: the handler's). Only the first barrier
            of a new id reads it: it starts the checkpoint in that mode.

        Raises
        ------
        BarrierProtocolError
            If ``channel`` does not exist or is closed.
        ConfigError
            If ``mode`` is unknown or ``aligned_with_timeout`` in a handler without an
            alignment timeout.
        """
        self._ctx.check_open(channel, f"barrier of checkpoint {checkpoint_id}")
        mode = self._ctx.mode if mode is None else _mode(mode)
        if mode is Mode.ALIGNED_WITH_TIMEOUT and self._ctx.alignment_timeout_ms is None:
            raise ConfigError(
                f"checkpoint {checkpoint_id} is aligned_with_timeout, but the barrier handler "
                "has no alignment_timeout_ms"
            )
        self._state = self._state.on_barrier(self._ctx, channel, checkpoint_id, mode)
        self._after_event()

    def on_cancel(self, channel: int, checkpoint_id: int) -> None:
        """The cancellation marker of ``checkpoint_id`` arrived on ``channel``."""
        self._ctx.check_open(channel, f"cancel of checkpoint {checkpoint_id}")
        self._state = self._state.on_cancel(self._ctx, channel, checkpoint_id)
        self._after_event()

    def on_end_of_partition(self, channel: int) -> None:
        """``channel`` is closed for good: it is never required again and never blocks."""
        self._ctx.check_open(channel, "end of partition")
        log.debug("channel %d: end of partition", channel)
        self._ctx.close(channel)
        self._state = self._state.on_end_of_partition(self._ctx, channel)
        self._after_event()

    def on_time_advanced(self) -> None:
        """Check the alignment timeout against the clock; call whenever time may have moved."""
        self._after_event()

    def _after_event(self) -> None:
        self._state = self._state.on_time(self._ctx)

    # -- read-only views ---------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        """The handler mode."""
        return self._ctx.mode

    @property
    def channels(self) -> int:
        """Number of channels, open or closed."""
        return self._ctx.channels

    @property
    def alignment_timeout_ms(self) -> int | None:
        """The alignment timeout of ``aligned_with_timeout`` checkpoints, or ``None``."""
        return self._ctx.alignment_timeout_ms

    def blocked_channels(self) -> frozenset[int]:
        """Channels whose data is held back (always empty unless aligning)."""
        return self._ctx.blocked_channels

    def open_channels(self) -> frozenset[int]:
        """Channels that have not delivered end of partition."""
        return self._ctx.open_channels

    def held_items(self) -> int:
        """Number of data items held on blocked channels, not yet processed."""
        return self._ctx.held_count

    def max_checkpoint_id(self) -> int | None:
        """Highest checkpoint id started or aborted so far (``None`` before the first)."""
        return self._ctx.max_id

    def current_checkpoint(self) -> CheckpointView | None:
        """The checkpoint being aligned or collected, or ``None``.

        In ``at_least_once`` mode this is the newest pending checkpoint (completing it
        drops all older ones); see :meth:`pending_checkpoints` for all of them.
        """
        views = self._state.views()
        return views[-1] if views else None

    def pending_checkpoints(self) -> tuple[CheckpointView, ...]:
        """Every checkpoint in progress, oldest first (at most one in exactly-once modes)."""
        return self._state.views()

    def alignment_deadline_ms(self) -> int | None:
        """Clock value at which the current alignment switches to unaligned, or ``None``.

        Only set while an ``aligned_with_timeout`` checkpoint is aligning; a planner can
        use it to schedule its next :meth:`on_time_advanced` call.
        """
        return self._state.alignment_deadline_ms()


def _mode(mode: Mode | str) -> Mode:
    try:
        return Mode(mode)
    except ValueError:
        known = ", ".join(m.value for m in Mode)
        raise ConfigError(f"unknown barrier mode {mode!r}; expected one of {known}") from None
