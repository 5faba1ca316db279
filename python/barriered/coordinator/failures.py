"""Counting checkpoint failures (Flink's ``CheckpointFailureManager``).

Rules:

- Failures that count: ``"expired ..."``, ``"declined by ..."``, ``"commit failed: ..."``,
  and an :meth:`~barriered.coordinator.CheckpointCoordinator.abort` with
  ``counts_as_failure=True``. Subsumption and plain cancellations never count.
- Only *consecutive* failures count: any completion resets the counter.
- A checkpoint counts at most once, and a failure of a checkpoint older than the last
  completed one is ignored (with concurrent checkpoints a newer one already proved that
  checkpointing works).
- Savepoint failures are not counted here (as in Flink): a failed savepoint is reported to
  whoever asked for it and must not kill the query.
- When the counter exceeds ``tolerable_failures`` the query must fail with
  :class:`~barriered.errors.CheckpointFailureLimitExceeded`.
"""

from __future__ import annotations

import logging

from barriered.coordinator.settings import SETTING_KEYS
from barriered.errors import CheckpointFailureLimitExceeded

__all__ = ["EXPIRED", "SUBSUMED", "CheckpointFailureManager"]

logger = logging.getLogger(__name__)

EXPIRED = "expired"
SUBSUMED = "subsumed"


class CheckpointFailureManager:
    """Counts consecutive checkpoint failures against ``tolerable_failures``.

    Parameters
    ----------
    tolerable_failures : int
        Consecutive failures tolerated; one more is fatal.
    """

    def __init__(self, tolerable_failures: int) -> None:
        self._tolerable = tolerable_failures
        self._failed: list[tuple[int, str]] = []
        self._last_success_id = -1

    @property
    def consecutive_failures(self) -> int:
        """Failures counted since the last completion."""
        return len(self._failed)

    def on_success(self, checkpoint_id: int) -> None:
        """A checkpoint completed: reset the counter."""
        self._last_success_id = max(self._last_success_id, checkpoint_id)
        if self._failed:
            logger.info(
                "checkpoint %d completed: %d consecutive failure(s) forgiven",
                checkpoint_id,
                len(self._failed),
            )
        self._failed.clear()

    def on_failure(self, checkpoint_id: int, reason: str) -> CheckpointFailureLimitExceeded | None:
        """Count a failure; return the fatal error if the limit is now exceeded.

        Parameters
        ----------
        checkpoint_id : int
        reason : str
            Why it failed (as recorded in the statistics).

        Returns
        -------
        CheckpointFailureLimitExceeded or None
            The error to raise, or ``None`` while the failures are tolerated.
        """
        if checkpoint_id <= self._last_success_id:
            logger.info(
                "checkpoint %d failed (%s) but checkpoint %d already completed: not counted",
                checkpoint_id,
                reason,
                self._last_success_id,
            )
            return None
        if any(cid == checkpoint_id for cid, _ in self._failed):
            return None
        self._failed.append((checkpoint_id, reason))
        logger.warning(
            "checkpoint %d failed (%s): %d consecutive failure(s), %d tolerated",
            checkpoint_id,
            reason,
            len(self._failed),
            self._tolerable,
        )
        if len(self._failed) > self._tolerable:
            return self._error()
        return None

    def _error(self) -> CheckpointFailureLimitExceeded:
        key = SETTING_KEYS["tolerable_failures"]
        ids = ", ".join(str(cid) for cid, _ in self._failed)
        last_id, last_reason = self._failed[-1]
        hint = f"Fix the cause, or raise {key} to tolerate more failures"
        if last_reason.startswith(EXPIRED):
            hint += f" (or {SETTING_KEYS['checkpoint_timeout_ms']} if checkpoints need longer)"
        return CheckpointFailureLimitExceeded(
            f"{len(self._failed)} consecutive checkpoint failures (checkpoints {ids}), more than "
            f"{key}={self._tolerable} allows; last failure: checkpoint {last_id} ({last_reason}). "
            f"The query is failed. {hint}."
        )
