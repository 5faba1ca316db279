"""Enumerations shared by the barrier handler: checkpoint modes, abort reasons, phases."""

from __future__ import annotations

from enum import Enum

__all__ = ["AbortReason", "Mode", "Phase"]


class Mode(str, Enum):
    """A checkpoint's mode: how a :class:`~barriered.barrier.handler.BarrierHandler`
    treats its barriers, and how a triggered checkpoint was taken (the ``mode`` of a
    ``trigger`` call: never ``aligned_with_timeout``, which triggers ``aligned`` or, after
    the switch, ``unaligned``).

    The values are the mode names of the conformance spec, the source options, the
    offsets and the ``_checkpoints`` table.
    """

    ALIGNED = "aligned"
    """Exactly once: block each channel at its barrier until every open channel has it."""

    UNALIGNED = "unaligned"
    """Exactly once: trigger at the first barrier, record in-flight data as channel state."""

    ALIGNED_WITH_TIMEOUT = "aligned_with_timeout"
    """Exactly once: start aligned, switch to unaligned once the alignment timeout elapses."""

    AT_LEAST_ONCE = "at_least_once"
    """Barrier tracker: never block, trigger when a barrier has arrived on every channel."""

    @property
    def exactly_once(self) -> bool:
        """Whether the mode gives exactly-once snapshots (all but ``at_least_once``)."""
        return self is not Mode.AT_LEAST_ONCE


class AbortReason(str, Enum):
    """Why a checkpoint was aborted (the ``reason`` of an ``abort`` call)."""

    SUBSUMED = "subsumed"
    """A barrier or cancel marker of a newer checkpoint arrived first."""

    CANCELLED = "cancelled"
    """A cancellation marker of this checkpoint arrived."""


class Phase(str, Enum):
    """Phase of the checkpoint a handler is currently working on."""

    ALIGNING = "aligning"
    """Exactly once, not yet triggered: channels that delivered the barrier are blocked."""

    COLLECTING = "collecting"
    """Exactly once, triggered unaligned: in-flight data is being recorded."""

    PENDING = "pending"
    """At least once: the barrier has reached some but not all open channels."""
