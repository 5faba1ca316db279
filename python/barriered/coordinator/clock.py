"""Injectable clocks for the checkpoint coordinator.

The coordinator never reads the time on its own: it asks a :class:`Clock`. One clock
serves two purposes, scheduling (interval, min pause, timeout) and the timestamps written
to the ``_checkpoints`` table, so :class:`SystemClock` returns **epoch milliseconds that
never go backwards**: the wall-clock time at construction plus the monotonic time elapsed
since. A wall-clock jump (NTP, daylight saving, a VM resume) therefore cannot expire or
postpone a checkpoint, and the recorded trigger timestamps stay readable dates.

Tests use :class:`ManualClock`, which only moves when told to.
"""

from __future__ import annotations

import time

from barriered.barrier.clock import Clock, ManualClock

__all__ = ["Clock", "ManualClock", "SystemClock"]


class SystemClock:
    """Epoch milliseconds, advanced by :func:`time.monotonic_ns`.

    ``now_ms()`` is ``time.time()`` at construction plus the monotonic time elapsed since,
    in milliseconds: readable as a date, immune to wall-clock jumps.
    """

    def __init__(self) -> None:
        self._wall0_ms = time.time_ns() // 1_000_000
        self._mono0_ns = time.monotonic_ns()

    def now_ms(self) -> int:
        """Return the current time as epoch milliseconds (monotonic)."""
        return self._wall0_ms + (time.monotonic_ns() - self._mono0_ns) // 1_000_000
