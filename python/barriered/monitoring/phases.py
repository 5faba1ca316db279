"""The phases of one finished checkpoint on a time line, from its ``_checkpoints`` row.

A row records the trigger and end times and three durations (coordinator clock, ms,
:mod:`barriered.control.stats`); the phases are laid out from them, in order:

1. ``start_delay``: trigger -> the source fixed the barrier positions (``start_delay_ms``,
   Flink's ``checkpointStartDelayNanos``);
2. ``alignment``: the first barrier delivered to Spark -> the cut
   (``alignment_duration_ms``, Flink's ``checkpointAlignmentTime``), placed right after the
   start delay;
3. ``state_write``: the longest a task took to write its keyed state at the cut
   (``state_write_ms``, Flink's async duration), placed right after the alignment;
4. ``acknowledge_commit``: from there to the end (the remaining acknowledgements, the
   Delta commit and, with a sink, its publish), or ``abort`` for an aborted checkpoint.

A phase whose duration the row does not have is left out; phases are clipped to the
checkpoint's end. The page draws them as timing bars, the traces as child spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Phase", "phases"]


@dataclass(frozen=True)
class Phase:
    """One phase of a checkpoint.

    Attributes
    ----------
    name : str
        ``start_delay``, ``alignment``, ``state_write``, ``acknowledge_commit`` or
        ``abort``.
    start_ms, end_ms : int
        Epoch milliseconds, coordinator clock.
    """

    name: str
    start_ms: int
    end_ms: int

    @property
    def duration_ms(self) -> int:
        """``end_ms - start_ms``."""
        return self.end_ms - self.start_ms


def _ms(row: Mapping[str, Any], column: str) -> int | None:
    value = row.get(column)
    if value is None or (isinstance(value, float) and value != value):
        return None
    return max(0, int(value))


def bounds(row: Mapping[str, Any]) -> tuple[int, int]:
    """The trigger and end times of a finished checkpoint (epoch ms); the end is the
    trigger plus the end-to-end duration when the row has no end time."""
    start = int(row["trigger_timestamp_ms"])
    end = _ms(row, "end_timestamp_ms")
    if end is None:
        end = start + (_ms(row, "end_to_end_duration_ms") or 0)
    return start, max(start, end)


def phases(row: Mapping[str, Any]) -> list[Phase]:
    """The phases of a finished checkpoint's row, in order (see the module docstring).

    Parameters
    ----------
    row : mapping
        A ``_checkpoints`` row.

    Returns
    -------
    list of Phase
        Consecutive phases inside ``[trigger, end]``.
    """
    start, end = bounds(row)
    found: list[Phase] = []
    at = start
    for name, column in (
        ("start_delay", "start_delay_ms"),
        ("alignment", "alignment_duration_ms"),
        ("state_write", "state_write_ms"),
    ):
        duration = _ms(row, column)
        if duration is None or (duration == 0 and name == "state_write"):
            continue
        stop = min(end, at + duration)
        found.append(Phase(name, at, stop))
        at = stop
    last = "acknowledge_commit" if row.get("status") == "completed" else "abort"
    if end > at or not found:
        found.append(Phase(last, at, end))
    return found
