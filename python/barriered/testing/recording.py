"""A :class:`~barriered.barrier.BarrierController` that records every call (tests only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from barriered.barrier import AbortReason, Mode

__all__ = ["RecordingController"]

ItemT = TypeVar("ItemT")


@dataclass
class RecordingController(Generic[ItemT]):
    """A :class:`BarrierController` that records every call, for tests.

    Attributes
    ----------
    triggered : list of (int, Mode)
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

    triggered: list[tuple[int, Mode]] = field(default_factory=list)
    aborted: list[tuple[int, AbortReason]] = field(default_factory=list)
    processed: list[tuple[int, ItemT]] = field(default_factory=list)
    channel_state: dict[int, list[ItemT]] = field(default_factory=dict)
    calls: list[tuple[object, ...]] = field(default_factory=list)

    def trigger(self, checkpoint_id: int, mode: Mode) -> None:
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
