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
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in milliseconds that never goes backwards."""

    def now_ms(self) -> int:
        """Return the current time in milliseconds."""
        ...


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


class ManualClock:
    """A clock that only moves when told to, for tests and replays.

    Parameters
    ----------
    start_ms : int, default 0
        The initial time in milliseconds.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        """Return the current logical time in milliseconds."""
        return self._now

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds and return the new time.

        Raises
        ------
        ValueError
            If ``ms`` is negative.
        """
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {ms} ms)")
        self._now += int(ms)
        return self._now

    def set(self, now_ms: int) -> None:
        """Set the time to ``now_ms``.

        Raises
        ------
        ValueError
            If ``now_ms`` is earlier than the current time.
        """
        if now_ms < self._now:
            raise ValueError(f"a clock cannot go backwards (from {self._now} to {now_ms} ms)")
        self._now = int(now_ms)
