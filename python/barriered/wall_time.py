"""Wall-clock time as the snapshot path records it: epoch milliseconds."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Return the wall-clock time in epoch milliseconds (what files and rows record).

    Scheduling that must not jump with the wall clock uses the coordinator's
    :class:`~barriered.coordinator.clock.SystemClock` instead.
    """
    return time.time_ns() // 1_000_000
