"""Channel bookkeeping shared by every handler state: open, blocked and held channels.

:class:`HandlerContext` owns everything that outlives one handler state (which channels
are open or blocked, the held items, the highest checkpoint id seen) and funnels all side
effects to the controller, so the state classes stay small and only decide.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

from barriered.barrier.clock import Clock
from barriered.barrier.controller import BarrierController
from barriered.barrier.modes import AbortReason, Mode
from barriered.errors import BarrierProtocolError

__all__ = ["HandlerContext"]

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")


class HandlerContext(Generic[ItemT]):
    """Mutable channel state of one handler, and the gateway to its controller.

    Parameters
    ----------
    channels : int
        Number of input channels, ``0 .. channels - 1``.
    mode : Mode
        The handler mode: that of checkpoints whose barriers carry none.
    controller : BarrierController
        Receives triggers, aborts, processed items and channel state.
    clock : Clock
        Read when an alignment starts and when the timeout is checked.
    alignment_timeout_ms : int or None
        The alignment timeout ``T`` of ``aligned_with_timeout`` checkpoints.
    """

    def __init__(
        self,
        channels: int,
        mode: Mode,
        controller: BarrierController[ItemT],
        clock: Clock,
        alignment_timeout_ms: int | None,
    ) -> None:
        self.channels = channels
        self.mode = mode
        self.controller = controller
        self.clock = clock
        self.alignment_timeout_ms = alignment_timeout_ms
        self.max_id: int | None = None
        self._open: set[int] = set(range(channels))
        self._blocked: set[int] = set()
        self._held: dict[int, list[tuple[int, ItemT]]] = {}
        self._arrivals = 0

    # -- views -------------------------------------------------------------------------

    @property
    def open_channels(self) -> frozenset[int]:
        """Channels that have not seen end of partition."""
        return frozenset(self._open)

    @property
    def blocked_channels(self) -> frozenset[int]:
        """Channels whose data is currently held back."""
        return frozenset(self._blocked)

    @property
    def held_count(self) -> int:
        """Number of data items currently held on blocked channels."""
        return sum(len(items) for items in self._held.values())

    def now_ms(self) -> int:
        """Current time of the injected clock."""
        return self.clock.now_ms()

    # -- checks ------------------------------------------------------------------------

    def check_open(self, channel: int, event: str) -> None:
        """Raise :class:`BarrierProtocolError` unless ``channel`` exists and is open."""
        if not 0 <= channel < self.channels:
            raise BarrierProtocolError(
                f"{event} on channel {channel}, but the input has channels 0..{self.channels - 1}"
            )
        if channel not in self._open:
            raise BarrierProtocolError(
                f"{event} on channel {channel} after its end of partition; "
                "a closed channel must not deliver anything"
            )

    def is_new(self, checkpoint_id: int) -> bool:
        """Whether ``checkpoint_id`` is above every id started or aborted so far."""
        return self.max_id is None or checkpoint_id > self.max_id

    def note_id(self, checkpoint_id: int) -> None:
        """Raise ``max_id`` to ``checkpoint_id`` if it is higher."""
        if self.is_new(checkpoint_id):
            self.max_id = checkpoint_id

    def all_delivered(self, received: set[int]) -> bool:
        """Whether every open channel is in ``received`` (vacuously true if none is open)."""
        return self._open <= received

    # -- channel effects ---------------------------------------------------------------

    def deliver(self, channel: int, item: ItemT) -> bool:
        """Process ``item`` at once, or hold it if ``channel`` is blocked.

        Returns
        -------
        bool
            ``True`` if the item was processed, ``False`` if it was held.
        """
        self._arrivals += 1
        if channel in self._blocked:
            self._held.setdefault(channel, []).append((self._arrivals, item))
            return False
        self.controller.process(channel, item)
        return True

    def block(self, channel: int) -> None:
        """Hold all later data of ``channel`` until it is unblocked."""
        self._blocked.add(channel)

    def unblock_all(self) -> None:
        """Unblock every channel and process all held items in arrival order."""
        self._release(set(self._blocked))

    def close(self, channel: int) -> None:
        """Close ``channel`` for good; it is unblocked and its held items are processed."""
        self._open.discard(channel)
        if channel in self._blocked:
            self._release({channel})

    def _release(self, channels: set[int]) -> None:
        self._blocked -= channels
        released = [
            (seq, channel, item)
            for channel in channels
            for seq, item in self._held.pop(channel, [])
        ]
        released.sort(key=lambda entry: entry[0])
        for _, channel, item in released:
            self.controller.process(channel, item)

    # -- checkpoint effects ------------------------------------------------------------

    def trigger(self, checkpoint_id: int, mode: Mode) -> None:
        """Tell the controller to take ``checkpoint_id`` now."""
        log.debug("checkpoint %d: triggered %s", checkpoint_id, mode.value)
        self.controller.trigger(checkpoint_id, mode)

    def abort(self, checkpoint_id: int, reason: AbortReason) -> None:
        """Tell the controller that ``checkpoint_id`` is given up."""
        log.debug("checkpoint %d: aborted (%s)", checkpoint_id, reason.value)
        self.controller.abort(checkpoint_id, reason)

    def record(self, checkpoint_id: int, channel: int, item: ItemT) -> None:
        """Tell the controller that ``item`` is in-flight channel state of ``checkpoint_id``."""
        self.controller.record_channel_state(checkpoint_id, channel, item)
