"""What the source and the participants report about a pending checkpoint.

The event half of :class:`~barriered.coordinator.coordinator.CheckpointCoordinator`
(which inherits it): checkpoints the source started on its own (adoption) and the ids
it passed, barrier positions, alignment start, the expected participants, the cut,
acknowledgements, declines and aborts. Each looks the checkpoint up among the
pending ones (an event for a checkpoint that is not pending is logged and ignored),
updates it under the coordinator's lock, and completes or aborts it by the rules of
:mod:`barriered.coordinator.outcomes`; listeners run after the lock is released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import TypeAlias

from barriered.barrier.modes import Mode
from barriered.control.model import CHECKPOINT, AckResult, AckStats
from barriered.coordinator.clock import Clock
from barriered.coordinator.effects import Effects
from barriered.coordinator.outcomes import CheckpointOutcomes
from barriered.coordinator.pending import PendingCheckpoint
from barriered.coordinator.scheduling import PeriodicScheduler

__all__ = ["CheckpointEvents", "Participants"]

logger = logging.getLogger(__name__)

Participants: TypeAlias = Callable[[], AbstractSet[str]] | AbstractSet[str]
"""The participants expected to acknowledge a checkpoint, or a function returning them
(called at every trigger), e.g. ``{"op0/kg0", ..., "op0/kg127"}``."""


class CheckpointEvents:
    """The events of pending checkpoints; the base of ``CheckpointCoordinator``.

    Every public method holds the coordinator's re-entrant lock.
    """

    _lock: threading.RLock
    _clock: Clock
    _participants: Participants
    _next_id: int
    _last_batch_id: int | None
    _scheduler: PeriodicScheduler
    _outcomes: CheckpointOutcomes

    def _at(self, at_ms: int | None) -> int:
        return self._clock.now_ms() if at_ms is None else int(at_ms)

    def _expected(self) -> frozenset[str]:
        source = self._participants
        return frozenset(source() if callable(source) else source)

    def on_source_last_id(self, last_id: int) -> None:
        """The source has started (or passed) every id up to ``last_id``.

        A reserved id at or below it that the source did not start is given up (the
        planner would find it stale): the next
        :meth:`~barriered.coordinator.coordinator.CheckpointCoordinator.schedule`
        reserves a new one. Call after adopting the checkpoints the same offset reports started.
        """
        with self._lock:
            self._next_id = max(self._next_id, last_id + 1)
            self._scheduler.passed(last_id, self._outcomes.knows)

    def adopt(self, checkpoint_id: int, mode: Mode, reason: str, at_ms: int | None = None) -> bool:
        """Register a checkpoint the source started on its own, so that it is acknowledged
        and committed like any other: the periodic checkpoint of the
        :meth:`~barriered.coordinator.coordinator.CheckpointCoordinator.schedule` (its
        reserved id; it counts as the periodic trigger, the interval runs from its start)
        or the final checkpoint of a Trigger.AvailableNow run.

        Parameters
        ----------
        checkpoint_id : int
            The id the source used; an id the coordinator already knows (pending or in
            its history) is ignored. It may be below the coordinator's ``next_id`` (the
            coordinator of a restored query learns the ids from the same offset).
        mode : Mode
            The mode the source used.
        reason : str
            Why the source started it.
        at_ms : int, optional
            When it was started (default: now).

        Returns
        -------
        bool
            True if the checkpoint is new to the coordinator.
        """
        effects = Effects()
        try:
            with self._lock:
                if self._outcomes.knows(checkpoint_id):
                    return False
                now = self._at(at_ms)
                expected = self._expected()
                self._next_id = max(self._next_id, checkpoint_id + 1)
                pending = PendingCheckpoint(
                    checkpoint_id,
                    CHECKPOINT,
                    mode,
                    reason,
                    now,
                    expected,
                    trigger_batch_id=self._last_batch_id,
                )
                scheduled = self._scheduler.adopted(checkpoint_id, now)
                logger.info(
                    "checkpoint %d started by the source%s (%s): %s",
                    checkpoint_id,
                    " on the coordinator's schedule" if scheduled else "",
                    mode,
                    reason,
                )
                self._outcomes.start(pending, None, effects)
                return True
        finally:
            effects.run()

    def on_barrier_positions(
        self, checkpoint_id: int, positions: Mapping[int, int], at_ms: int | None = None
    ) -> None:
        """The source fixed the barrier positions ``B_n(c)`` (the start delay ends here).

        Parameters
        ----------
        checkpoint_id : int
        positions : mapping of int to int
            Channel -> barrier position.
        at_ms : int, optional
            When, on the coordinator clock (default: now).
        """
        with self._lock:
            pending = self._outcomes.get(checkpoint_id, "barrier positions")
            if pending is not None:
                pending.set_positions(positions, self._at(at_ms))
                logger.debug("checkpoint %d: barrier positions %s", checkpoint_id, positions)

    def on_alignment_started(self, checkpoint_id: int, at_ms: int | None = None) -> None:
        """The first barrier of the checkpoint was delivered to Spark.

        Only the first call counts. Alignment duration = this -> :meth:`on_cut`.
        """
        with self._lock:
            pending = self._outcomes.get(checkpoint_id, "alignment start")
            if pending is not None:
                pending.alignment_started(self._at(at_ms))

    def expect(self, checkpoint_id: int, participants: Iterable[str]) -> None:
        """Add participants (e.g. in-flight writers ``"inflight/ch3"``) that must acknowledge.

        Raises
        ------
        barriered.errors.CheckpointError
            If the cut of the checkpoint was already reported.
        """
        if isinstance(participants, str):
            participants = [participants]
        with self._lock:
            pending = self._outcomes.get(checkpoint_id, "expect")
            if pending is not None:
                pending.expect(participants)

    def on_cut(
        self,
        checkpoint_id: int,
        at_ms: int | None = None,
        batch_id: int | None = None,
        *,
        effective_mode: Mode | None = None,
    ) -> None:
        """The snapshot batch (the cut) is known; seals the expected participants.

        Completes the checkpoint if every expected participant already acknowledged.

        Parameters
        ----------
        checkpoint_id : int
        at_ms : int, optional
            When, on the coordinator clock (default: now); ends the alignment.
        batch_id : int, optional
            The micro-batch that is the cut.
        effective_mode : Mode, optional
            The mode the handler really used (e.g. ``"unaligned"`` after an alignment
            timeout).

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If completing failed in the committer once too often.
        """
        effects = Effects()
        try:
            with self._lock:
                pending = self._outcomes.get(checkpoint_id, "cut")
                if pending is None:
                    return
                at = self._at(at_ms)
                pending.cut(at, batch_id, effective_mode)
                logger.info("checkpoint %d: cut at batch %s", checkpoint_id, batch_id)
                self._outcomes.maybe_complete(pending, at, effects)
        finally:
            effects.run()

    def acknowledge(
        self,
        checkpoint_id: int,
        participant: str,
        stats: AckStats | None = None,
        at_ms: int | None = None,
    ) -> AckResult:
        """A participant persisted its part of the checkpoint.

        Completes the checkpoint when this was the last expected acknowledgement and the
        cut is known.

        Parameters
        ----------
        checkpoint_id : int
        participant : str
            E.g. ``"op0/kg17"`` or ``"inflight/ch3"``.
        stats : AckStats, optional
            What it persisted.
        at_ms : int, optional
            When, on the coordinator clock (default: now).

        Returns
        -------
        {"success", "duplicate", "unknown", "discarded"}
            See :data:`~barriered.control.model.AckResult`. On ``"discarded"`` the
            participant's files belong to an aborted checkpoint and may be deleted.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If the commit failed once too often.
        """
        effects = Effects()
        try:
            with self._lock:
                pending = self._outcomes.pending.get(checkpoint_id)
                if pending is None:
                    result = self._outcomes.late_ack_result(checkpoint_id)
                    logger.debug(
                        "checkpoint %d: ack of %s is %s", checkpoint_id, participant, result
                    )
                    return result
                result = pending.acknowledge(participant, stats or AckStats())
                if result == "unknown":
                    logger.warning(
                        "checkpoint %d: ack from unexpected participant %r ignored",
                        checkpoint_id,
                        participant,
                    )
                elif result == "success":
                    self._outcomes.maybe_complete(pending, self._at(at_ms), effects)
                return result
        finally:
            effects.run()

    def decline(
        self, checkpoint_id: int, participant: str, reason: str, at_ms: int | None = None
    ) -> None:
        """A participant could not take its part: abort the checkpoint (counts as failure).

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If this exceeded the tolerable failures.
        """
        self._abort_pending(
            checkpoint_id,
            f"decline by {participant}",
            f"declined by {participant}: {reason}",
            counts=True,
            at_ms=at_ms,
        )

    def abort(
        self,
        checkpoint_id: int,
        reason: str,
        *,
        counts_as_failure: bool = False,
        at_ms: int | None = None,
    ) -> bool:
        """Abort a pending checkpoint.

        Parameters
        ----------
        checkpoint_id : int
        reason : str
            Recorded as the failure reason (e.g. ``"cancelled"``, or ``"subsumed"`` when
            the source's barrier handler subsumed it).
        counts_as_failure : bool, default False
            Whether it counts against ``tolerable_failures`` (an error, not a
            cancellation).
        at_ms : int, optional
            When, on the coordinator clock (default: now).

        Returns
        -------
        bool
            Whether a pending checkpoint was aborted.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If this exceeded the tolerable failures.
        """
        return self._abort_pending(
            checkpoint_id, "abort", reason, counts=counts_as_failure, at_ms=at_ms
        )

    def _abort_pending(
        self, checkpoint_id: int, what: str, reason: str, *, counts: bool, at_ms: int | None
    ) -> bool:
        effects = Effects()
        try:
            with self._lock:
                pending = self._outcomes.get(checkpoint_id, what)
                if pending is None:
                    return False
                self._outcomes.abort(
                    pending, reason, self._at(at_ms), counts=counts, effects=effects
                )
                return True
        finally:
            effects.run()
