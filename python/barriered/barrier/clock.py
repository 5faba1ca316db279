"""Injectable clocks for the barrier handler (only the alignment timeout reads time)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in milliseconds; it must never go backwards."""

    def now_ms(self) -> int:
        """Return the current time in milliseconds."""
        ...


class ManualClock:
    """A clock that only moves when told to, for tests and scenario replay.

    Parameters
    ----------
    start_ms : int, default 0
        The initial time.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

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
        self._now += ms
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
