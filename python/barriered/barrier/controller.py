"""The narrow side-effect interface of the barrier handler, and a recording implementation.

The handler decides; the controller acts. A Spark source planner implements
:class:`BarrierController` to cut micro-batches, inject barrier markers and persist
in-flight data; tests use :class:`RecordingController`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from barriered.barrier.modes import AbortReason, CheckpointMode

__all__ = ["BarrierController", "RecordingController"]

ItemT = TypeVar("ItemT")
ItemT_contra = TypeVar("ItemT_contra", contravariant=True)


class BarrierController(Protocol[ItemT_contra]):
    """Receives every decision of a :class:`~barriered.barrier.handler.BarrierHandler`.

    Calls arrive synchronously, in decision order, from inside the handler's event
    methods. Implementations must not call back into the handler.
    """

    def trigger(self, checkpoint_id: int, mode: CheckpointMode) -> None:
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


@dataclass
class RecordingController(Generic[ItemT]):
    """A :class:`BarrierController` that records every call, for tests and replays.

    Attributes
    ----------
    triggered : list of (int, CheckpointMode)
        Triggered checkpoints in order.
    aborted : list of (int, AbortReason)
        Aborted checkpoints in order.
    processed : list of (int, ItemT)
        ``(channel, item)`` in processing order.
    channel_state : dict of int to list of ItemT
        Recorded items per checkpoint, in recording order; an abort removes its entry.
    calls : list of tuple
        Every call as ``(method name, *arguments)``, in order.
    """

    triggered: list[tuple[int, CheckpointMode]] = field(default_factory=list)
    aborted: list[tuple[int, AbortReason]] = field(default_factory=list)
    processed: list[tuple[int, ItemT]] = field(default_factory=list)
    channel_state: dict[int, list[ItemT]] = field(default_factory=dict)
    calls: list[tuple[object, ...]] = field(default_factory=list)

    def trigger(self, checkpoint_id: int, mode: CheckpointMode) -> None:
        """Record a trigger."""
        self.calls.append(("trigger", checkpoint_id, mode))
        self.triggered.append((checkpoint_id, mode))

    def abort(self, checkpoint_id: int, reason: AbortReason) -> None:
        """Record an abort and discard the checkpoint's channel state."""
        self.calls.append(("abort", checkpoint_id, reason))
        self.aborted.append((checkpoint_id, reason))
        self.channel_state.pop(checkpoint_id, None)

    def process(self, channel: int, item: ItemT) -> None:
        """Record a processed item."""
        self.calls.append(("process", channel, item))
        self.processed.append((channel, item))

    def record_channel_state(self, checkpoint_id: int, channel: int, item: ItemT) -> None:
        """Record an item of in-flight channel state."""
        self.calls.append(("record_channel_state", checkpoint_id, channel, item))
        self.channel_state.setdefault(checkpoint_id, []).append(item)
