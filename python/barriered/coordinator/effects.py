"""The coordinator's listeners and the effects that run them outside its lock.

Listeners are registered on the :class:`~barriered.coordinator.coordinator.CheckpointCoordinator`
(complete, abort, stats). The coordinator never calls one while it holds its lock:
every state change collects the calls in an :class:`Effects` and runs them once the
lock is released, after its state is updated. A listener's exception is logged, never
propagated.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from barriered.control.model import CompletedCheckpoint
from barriered.control.stats import CheckpointStats

__all__ = ["Effects", "Listeners"]

logger = logging.getLogger(__name__)


class Effects:
    """Callbacks collected under the lock and run after it is released."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, Callable[[], None]]] = []

    def add(self, what: str, call: Callable[[], None]) -> None:
        """Queue ``call``; ``what`` names it in the log if it raises."""
        self._calls.append((what, call))

    def run(self) -> None:
        """Run the queued calls in order; log and ignore their exceptions."""
        calls, self._calls = self._calls, []
        for what, call in calls:
            try:
                call()
            except Exception:
                logger.exception("%s raised; ignored", what)


class Listeners:
    """The registered complete, abort and stats listeners."""

    def __init__(self) -> None:
        self.complete: list[Callable[[CompletedCheckpoint], None]] = []
        self.abort: list[Callable[[CheckpointStats], None]] = []
        self.stats: list[Callable[[CheckpointStats], None]] = []

    def completed(self, completed: CompletedCheckpoint, effects: Effects) -> None:
        """Queue the complete listeners' calls for ``completed``."""
        for listener in list(self.complete):
            effects.add(
                f"complete listener {listener!r} for checkpoint {completed.checkpoint_id}",
                functools.partial(listener, completed),
            )

    def aborted(self, stats: CheckpointStats, effects: Effects) -> None:
        """Queue the abort listeners' calls for the aborted checkpoint's ``stats``."""
        for listener in list(self.abort):
            effects.add(
                f"abort listener {listener!r} for checkpoint {stats.checkpoint_id}",
                functools.partial(listener, stats),
            )

    def changed(self, stats: CheckpointStats, effects: Effects) -> None:
        """Queue the stats listeners' calls for a trigger, completion or abort."""
        for listener in list(self.stats):
            effects.add(
                f"stats listener {listener!r} for checkpoint {stats.checkpoint_id}",
                functools.partial(listener, stats),
            )
