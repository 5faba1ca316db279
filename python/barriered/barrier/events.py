"""Typed handler events and a parser for the conformance notation.

The notation of ``docs/barrier-handler.md``: ``d@c`` (data on channel ``c``),
``bN@c`` (barrier of checkpoint ``N``), ``xN@c`` (cancellation marker of ``N``),
``eop@c`` (end of partition) and ``t+MS`` (the clock advances by ``MS`` ms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from barriered.barrier.modes import Mode
from barriered.errors import BarrierProtocolError

__all__ = [
    "Barrier",
    "Cancel",
    "Data",
    "EndOfPartition",
    "Event",
    "TimeAdvance",
    "format_event",
    "parse_event",
]


@dataclass(frozen=True)
class Data:
    """A data item on ``channel``."""

    channel: int


@dataclass(frozen=True)
class Barrier:
    """The barrier of checkpoint ``checkpoint_id`` on ``channel``, with the checkpoint's
    ``mode`` (None: the handler's; the notation has none)."""

    checkpoint_id: int
    channel: int
    mode: Mode | None = None


@dataclass(frozen=True)
class Cancel:
    """The cancellation marker of checkpoint ``checkpoint_id`` on ``channel``."""

    checkpoint_id: int
    channel: int


@dataclass(frozen=True)
class EndOfPartition:
    """``channel`` is closed for good."""

    channel: int


@dataclass(frozen=True)
class TimeAdvance:
    """The logical clock advances by ``ms`` milliseconds."""

    ms: int


Event: TypeAlias = Data | Barrier | Cancel | EndOfPartition | TimeAdvance
"""Any event of the conformance notation."""

_PATTERN = re.compile(r"(?:(d|eop)|([bx])(\d+))@(\d+)|t\+(\d+)")


def parse_event(text: str) -> Event:
    """Parse one event of the conformance notation.

    Parameters
    ----------
    text : str
        ``d@c``, ``bN@c``, ``xN@c``, ``eop@c`` or ``t+MS`` (surrounding blanks allowed).

    Returns
    -------
    Event
        The typed event.

    Raises
    ------
    BarrierProtocolError
        If ``text`` is not in the notation.

    Examples
    --------
    >>> parse_event("b3@1")
    Barrier(checkpoint_id=3, channel=1, mode=None)
    >>> parse_event("t+10")
    TimeAdvance(ms=10)
    """
    match = _PATTERN.fullmatch(text.strip())
    if match is None:
        raise BarrierProtocolError(
            f"malformed event {text!r}: expected d@c, bN@c, xN@c, eop@c or t+MS"
        )
    simple, marker, checkpoint, channel, ms = match.groups()
    if ms is not None:
        return TimeAdvance(int(ms))
    if simple == "d":
        return Data(int(channel))
    if simple == "eop":
        return EndOfPartition(int(channel))
    if marker == "b":
        return Barrier(int(checkpoint), int(channel))
    return Cancel(int(checkpoint), int(channel))


def format_event(event: Event) -> str:
    """Render ``event`` in the conformance notation (inverse of :func:`parse_event`; a
    barrier's mode is not part of the notation)."""
    if isinstance(event, Data):
        return f"d@{event.channel}"
    if isinstance(event, Barrier):
        return f"b{event.checkpoint_id}@{event.channel}"
    if isinstance(event, Cancel):
        return f"x{event.checkpoint_id}@{event.channel}"
    if isinstance(event, EndOfPartition):
        return f"eop@{event.channel}"
    return f"t+{event.ms}"
