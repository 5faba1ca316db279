"""How pending checkpoints end: completion, subsumption, abort, expiry, the failure limit.

The coordinator's table of pending checkpoints and the rules that finish them:

- **Completion** (once the cut is known and every expected participant acknowledged):
  the committer, then subsumption (a completed checkpoint aborts every older pending
  checkpoint ``"subsumed"``; savepoints are never subsumed and, not being used for
  automatic recovery, subsume nothing), then the listeners. A committer exception aborts
  the checkpoint with ``"commit failed: ..."``.
- **Expiry**: checkpoints pending for ``checkpoint_timeout_ms`` or longer are aborted
  ``"expired after ... ms (checkpointTimeout ...): ..."`` naming what they still waited
  for (:meth:`PendingCheckpoint.waiting_for`).
- **Failures** are counted by :class:`~barriered.coordinator.failures.CheckpointFailureManager`;
  when they exceed ``tolerable_failures`` the method that noticed raises
  :class:`~barriered.errors.CheckpointFailureLimitExceeded`, every pending checkpoint is
  aborted, and the coordinator raises the same error again from then on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TypeAlias

from barriered.control.model import CHECKPOINT, AckResult, CompletedCheckpoint
from barriered.control.stats import CheckpointStatsTracker
from barriered.control.triggers import TriggerRequest
from barriered.coordinator.effects import Effects, Listeners
from barriered.coordinator.failures import EXPIRED, SUBSUMED, CheckpointFailureManager
from barriered.coordinator.pending import PendingCheckpoint
from barriered.coordinator.scheduling import PeriodicScheduler
from barriered.coordinator.settings import SETTING_KEYS, CoordinatorSettings
from barriered.errors import CheckpointFailureLimitExceeded

__all__ = ["FAILED_REASON", "CheckpointOutcomes", "Committer"]

logger = logging.getLogger(__name__)

FAILED_REASON = "coordinator failed: too many consecutive checkpoint failures"

Committer: TypeAlias = Callable[[CompletedCheckpoint], object]
"""Commits a fully acknowledged checkpoint (the single Delta transaction). If it returns
an ``int`` that is recorded as the state table version. Raising aborts the checkpoint."""


class CheckpointOutcomes:
    """The pending checkpoints and the finished ones' statistics; ends checkpoints.

    Not thread safe: the coordinator calls it under its lock.

    Parameters
    ----------
    settings : CoordinatorSettings
    scheduler : PeriodicScheduler
        Told of every end (the min pause runs from it).
    listeners : Listeners
    committer : callable, optional
        See :data:`Committer`.
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        scheduler: PeriodicScheduler,
        listeners: Listeners,
        committer: Committer | None,
    ) -> None:
        self._settings = settings
        self._scheduler = scheduler
        self._listeners = listeners
        self._committer = committer
        self.pending: dict[int, PendingCheckpoint] = {}
        #: Trigger requests not yet handed out by ``tick()``.
        self.unsent: dict[int, TriggerRequest] = {}
        self.tracker = CheckpointStatsTracker(settings.stats_history_size)
        self.failures = CheckpointFailureManager(settings.tolerable_failures)
        #: Set once the failures exceeded the limit.
        self.error: CheckpointFailureLimitExceeded | None = None

    def raise_if_failed(self) -> None:
        """Raise the failure limit error if it was exceeded."""
        if self.error is not None:
            raise self.error

    def knows(self, checkpoint_id: int) -> bool:
        """Whether the checkpoint is pending or in the kept history."""
        return checkpoint_id in self.pending or self.tracker.get(checkpoint_id) is not None

    def start(
        self, pending: PendingCheckpoint, request: TriggerRequest | None, effects: Effects
    ) -> None:
        """Register a new pending checkpoint (and the request to hand out, if any)."""
        self.pending[pending.checkpoint_id] = pending
        if request is not None:
            self.unsent[pending.checkpoint_id] = request
        self._listeners.changed(pending.to_stats(), effects)

    def get(self, checkpoint_id: int, what: str) -> PendingCheckpoint | None:
        """The pending checkpoint, or None (``what`` is then logged as ignored)."""
        pending = self.pending.get(checkpoint_id)
        if pending is None:
            logger.debug("checkpoint %d is not pending: %s ignored", checkpoint_id, what)
        return pending

    def late_ack_result(self, checkpoint_id: int) -> AckResult:
        """The result of an acknowledgement of a checkpoint that is not pending."""
        # "discarded" only when the abort is known for sure: the adapter may delete files.
        finished = self.tracker.get(checkpoint_id)
        if finished is None:
            return "unknown"
        return "duplicate" if finished.status == "completed" else "discarded"

    def expire(self, now: int, effects: Effects) -> None:
        """Abort ``"expired"`` every checkpoint pending for the timeout or longer.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If that exceeded the tolerable failures.
        """
        timeout = self._settings.checkpoint_timeout_ms
        error: CheckpointFailureLimitExceeded | None = None
        for pending in [p for p in self.pending.values() if p.age_ms(now) >= timeout]:
            reason = (
                f"{EXPIRED} after {pending.age_ms(now)} ms ({SETTING_KEYS['checkpoint_timeout_ms']}"
                f"={timeout} ms), waiting for {pending.waiting_for()}"
            )
            error = self.abort(pending, reason, now, counts=True, effects=effects, defer=True)
            if error is not None:
                break
        if error is not None:
            self.fail(error, now, effects)
            raise error

    def maybe_complete(self, pending: PendingCheckpoint, at: int, effects: Effects) -> None:
        """Complete ``pending`` if it is fully acknowledged: commit, subsume, notify.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If the commit failed once too often.
        """
        if not pending.fully_acknowledged:
            return
        cid = pending.checkpoint_id
        end = max(at, pending.trigger_ms, pending.cut_ms or 0)
        completed = pending.to_completed(end)
        version: int | None = None
        if self._committer is not None:
            try:
                returned = self._committer(completed)
            except Exception as exc:
                logger.warning("%s %d: commit failed", pending.kind, cid, exc_info=True)
                self.abort(
                    pending,
                    f"commit failed: {type(exc).__name__}: {exc}",
                    end,
                    counts=True,
                    effects=effects,
                    cause=exc,
                )
                return
            if isinstance(returned, int) and not isinstance(returned, bool):
                version = returned
        del self.pending[cid]
        self.unsent.pop(cid, None)
        self._scheduler.ended(end)
        self.failures.on_success(cid)
        stats = pending.to_stats("completed", end_ms=end, state_table_version=version)
        self.tracker.record(stats)
        completed = dataclasses.replace(completed, state_table_version=version)
        logger.info(
            "%s %d completed in %d ms (mode %s, %d acks, %d state bytes, %d in-flight rows)",
            pending.kind,
            cid,
            stats.end_to_end_duration_ms or 0,
            stats.effective_mode or stats.mode,
            stats.num_acknowledged,
            stats.state_bytes,
            stats.inflight_rows,
        )
        if pending.kind == CHECKPOINT:
            for older in [p for p in self.pending.values() if p.checkpoint_id < cid]:
                if older.kind == CHECKPOINT:
                    self.abort(older, SUBSUMED, end, counts=False, effects=effects)
        self._listeners.changed(stats, effects)
        self._listeners.completed(completed, effects)

    def abort(
        self,
        pending: PendingCheckpoint,
        reason: str,
        at: int,
        *,
        counts: bool,
        effects: Effects,
        defer: bool = False,
        cause: BaseException | None = None,
    ) -> CheckpointFailureLimitExceeded | None:
        """Abort ``pending``; with ``counts``, count it and fail if over the limit.

        With ``defer`` the limit error is returned instead of raised (the caller finishes
        its loop, then fails).
        """
        cid = pending.checkpoint_id
        del self.pending[cid]
        self.unsent.pop(cid, None)
        end = max(at, pending.trigger_ms)
        self._scheduler.ended(end)
        stats = pending.to_stats("aborted", failure_reason=reason, end_ms=end)
        self.tracker.record(stats)
        log = logger.warning if counts else logger.info
        log("%s %d aborted: %s", pending.kind, cid, reason)
        self._listeners.changed(stats, effects)
        self._listeners.aborted(stats, effects)
        if not counts or pending.kind != CHECKPOINT:
            return None
        error = self.failures.on_failure(cid, reason)
        if error is None or defer:
            return error
        self.fail(error, end, effects)
        if cause is not None:
            raise error from cause
        raise error

    def abort_all(self, reason: str, now: int, effects: Effects) -> None:
        """Abort every pending checkpoint (not counted as failures)."""
        for pending in list(self.pending.values()):
            self.abort(pending, reason, now, counts=False, effects=effects)

    def fail(self, error: CheckpointFailureLimitExceeded, now: int, effects: Effects) -> None:
        """The failures exceeded the limit: remember ``error``, abort everything pending."""
        self.error = error
        logger.error("%s", error)
        self.abort_all(FAILED_REASON, now, effects)
