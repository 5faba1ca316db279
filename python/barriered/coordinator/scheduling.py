"""When the next periodic checkpoint is due, and the id reserved for it (coordinator side).

The coordinator publishes the next periodic checkpoint as a
:class:`~barriered.control.schedule.Schedule`, which the source planner starts when
it is due; the coordinator adopts it from the offset. Rules:

- **Interval**: due ``checkpoint_interval_ms`` after the start of the last periodic
  checkpoint, or after construction for the first one. A savepoint does not restart it; a
  checkpoint the source started on the schedule does (the interval runs from its start).
- **Min pause**: at least ``min_pause_ms`` after the last completion or abort.
- **Max concurrent**: paused while ``max_concurrent`` checkpoints (savepoints included)
  are pending.
- **Reserved id**: the published schedule carries an id reserved for it, kept until the
  source starts it (adoption) or passes it by (its last id is at or above it), so a savepoint
  requested meanwhile gets another id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from barriered.control.schedule import Schedule
from barriered.coordinator.policy import ModeDecision
from barriered.coordinator.settings import CoordinatorSettings

__all__ = ["PeriodicScheduler"]

logger = logging.getLogger(__name__)


class PeriodicScheduler:
    """The periodic checkpoint's clock readings and the schedule's reserved id.

    Not thread safe: the coordinator calls it under its lock.

    Parameters
    ----------
    settings : CoordinatorSettings
        Interval, min pause and max concurrent.
    started_ms : int
        When the coordinator was created (the first interval runs from here).
    """

    def __init__(self, settings: CoordinatorSettings, started_ms: int) -> None:
        self._settings = settings
        self._started_ms = started_ms
        self._last_periodic_ms: int | None = None
        self._last_end_ms: int | None = None
        #: The id reserved for the periodic checkpoint the source starts (see publish()).
        self.reserved: int | None = None

    def ended(self, end: int) -> None:
        """A checkpoint completed or was aborted at ``end``: the min pause runs from here."""
        self._last_end_ms = end

    def due_ms(self) -> int:
        """When the next periodic checkpoint is due: ``checkpoint_interval_ms`` after the
        last periodic one started, at least ``min_pause_ms`` after the last end."""
        s = self._settings
        since = self._started_ms if self._last_periodic_ms is None else self._last_periodic_ms
        due = since + s.checkpoint_interval_ms
        if self._last_end_ms is not None:
            due = max(due, self._last_end_ms + s.min_pause_ms)
        return due

    def pause_reason(self, pending: Collection[int]) -> str | None:
        """Why no periodic checkpoint may start now, whenever due (None: it may)."""
        if len(pending) >= self._settings.max_concurrent:
            return (
                f"{len(pending)} checkpoint(s) pending {sorted(pending)}, "
                f"maxConcurrentCheckpoints={self._settings.max_concurrent}"
            )
        return None

    def publish(self, reserved: int, decision: ModeDecision, pending: Collection[int]) -> Schedule:
        """The schedule of the next periodic checkpoint under the ``reserved`` id."""
        self.reserved = reserved
        return Schedule(
            checkpoint_id=reserved,
            due_ms=self.due_ms(),
            mode=decision.mode,
            reason=decision.reason,
            paused=self.pause_reason(pending),
        )

    def passed(self, last_id: int, known: Callable[[int], bool]) -> None:
        """The source started or passed every id up to ``last_id``: a reserved id at or
        below it is given up (``known`` says whether the coordinator knows the id)."""
        reserved = self.reserved
        if reserved is None or reserved > last_id:
            return
        if not known(reserved):
            logger.info(
                "checkpoint id %d reserved for the schedule was passed by the source "
                "(its last id is %d); the next schedule reserves another",
                reserved,
                last_id,
            )
        self.reserved = None

    def adopted(self, checkpoint_id: int, now: int) -> bool:
        """The source started ``checkpoint_id`` at ``now``; True if it is the scheduled
        one (it then counts as the periodic trigger)."""
        if checkpoint_id != self.reserved:
            return False
        self.reserved = None
        self._last_periodic_ms = now
        return True
