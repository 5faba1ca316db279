"""The narrow side-effect interface of the barrier handler.

The handler decides; the controller acts. The source planner's
:class:`~barriered.datasource.alignment.BatchController` implements it to cut
micro-batches and persist in-flight data.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from barriered.barrier.modes import AbortReason, Mode

__all__ = ["BarrierController"]

ItemT_contra = TypeVar("ItemT_contra", contravariant=True)


class BarrierController(Protocol[ItemT_contra]):
    """Receives every decision of a :class:`~barriered.barrier.handler.BarrierHandler`.

    Calls arrive synchronously, in decision order, from inside the handler's event
    methods. Implementations must not call back into the handler.
    """

    def trigger(self, checkpoint_id: int, mode: Mode) -> None:
        """Take checkpoint ``checkpoint_id`` now (at this point of the processed stream)."""
        ...

    def abort(self, checkpoint_id: int, reason: AbortReason) -> None:
        """Give up ``checkpoint_id``; channel state recorded for it must be discarded."""
        ...

    def process(self, channel: int, item: ItemT_contra) -> None:
        """Hand ``item`` of ``channel`` downstream (called exactly once per data item)."""
        ...

    def record_channel_state(self, checkpoint_id: int, channel: int, item: ItemT_contra) -> None:
        """Persist ``item`` (already processed) as in-flight data of ``checkpoint_id``."""
        ...
