"""The checkpoint coordinator (Flink's ``CheckpointCoordinator``), pure and event-driven.

It runs in the driver and is driven by a ``StreamingQueryListener``: after every
micro-batch the adapter feeds it what happened (barrier positions fixed by the source,
alignment start, the cut, acknowledgements and declines of participants) and then calls
:meth:`CheckpointCoordinator.tick`, which expires overdue checkpoints and returns the
checkpoints to trigger now. It never sleeps, never starts a thread and never reads the
time except through the injected :class:`~barriered.coordinator.clock.Clock`.

Life of a checkpoint ``n``::

    tick() -> TriggerRequest(n)            the adapter writes it to the trigger log
    on_barrier_positions(n, B_n)           the source fixed B_n(c): start delay ends
    on_alignment_started(n)                first barrier delivered to Spark
    expect(n, {"inflight/ch3", ...})       in-flight writers, known at the cut
    on_cut(n, batch_id=...)                the snapshot batch; seals the participants
    acknowledge(n, "op0/kg17", AckStats)   one per expected participant
      -> committer(CompletedCheckpoint)    the single Delta commit
      -> subsume older pending checkpoints, notify complete listeners

Order the adapter must respect: ``expect`` before ``on_cut`` (the cut seals the
expected set), and an acknowledgement from a participant that is not expected is
rejected as ``"unknown"``. A checkpoint completes only once the cut is known *and* every
expected participant acknowledged, so it cannot complete before the in-flight writers
were added.

Rules:

- **Periodic trigger** in :meth:`~CheckpointCoordinator.tick` when the interval has
  elapsed since the last checkpoint trigger (since construction for the first one), at
  least ``min_pause_ms`` passed since the last completion or abort, and fewer than
  ``max_concurrent`` checkpoints (savepoints included) are pending.
- **Scheduled periodic checkpoints**: the same rules, published instead of applied.
  :meth:`~CheckpointCoordinator.schedule` reserves the next periodic checkpoint's id and
  says when it is due (interval, min pause), whether it is paused (max concurrent) and
  in which mode; the source planner starts it in the first batch it plans once due
  (the listener hears of a batch only after the next one was planned, so a trigger
  from ``tick()`` starts a batch later) and the coordinator adopts it
  (:meth:`~CheckpointCoordinator.adopt`) from the offset. ``tick(periodic=False)`` then
  triggers forced checkpoints only.
- **Manual checkpoints and savepoints** (:meth:`~CheckpointCoordinator.trigger_checkpoint`,
  :meth:`~CheckpointCoordinator.trigger_savepoint`) are forced (as in Flink): they ignore
  interval, min pause and max concurrent. They become pending at once (the id is
  returned, the timeout runs, they show in :meth:`~CheckpointCoordinator.history`) and
  their :class:`TriggerRequest` is handed out by the next ``tick()``, ahead of any
  periodic one. A manual checkpoint restarts the periodic interval; a savepoint does not.
- **Expiry**: checkpoints pending for ``checkpoint_timeout_ms`` or longer are aborted
  ``"expired"`` at the next ``tick()``.
- **Completion**: committer, then subsumption (a completed checkpoint aborts every older
  pending checkpoint ``"subsumed"``; savepoints are never subsumed and, not being used
  for automatic recovery, subsume nothing), then listeners. A committer exception aborts
  the checkpoint with ``"commit failed: ..."``.
- **Failures** are counted by :class:`~barriered.coordinator.failures.CheckpointFailureManager`;
  when they exceed ``tolerable_failures`` the method that noticed raises
  :class:`~barriered.errors.CheckpointFailureLimitExceeded`, every pending checkpoint is
  aborted, and later ``tick``/``trigger_*`` calls raise the same error again.
- **Listeners** run after the coordinator's state is updated and outside its lock; their
  exceptions are logged, never propagated.
- **Thread safety**: every public method holds one re-entrant lock, so a user thread may
  call :meth:`~CheckpointCoordinator.trigger_savepoint` while the listener thread ticks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, TypeAlias

from barriered.coordinator.clock import Clock
from barriered.coordinator.failures import EXPIRED, SUBSUMED, CheckpointFailureManager
from barriered.coordinator.model import (
    ALIGNED_WITH_TIMEOUT,
    CHECKPOINT,
    SAVEPOINT,
    AckResult,
    AckStats,
    CheckpointKind,
    CompletedCheckpoint,
    Mode,
    TriggerRequest,
)
from barriered.coordinator.pending import PendingCheckpoint
from barriered.coordinator.policy import ChannelSignals, ModeDecision, decide_mode
from barriered.coordinator.settings import CoordinatorSettings
from barriered.coordinator.stats import CheckpointStats, CheckpointStatsTracker
from barriered.datasource.schedule import Schedule
from barriered.errors import CheckpointError, CheckpointFailureLimitExceeded

__all__ = ["CheckpointCoordinator", "Committer", "Participants"]

logger = logging.getLogger(__name__)

Participants: TypeAlias = Callable[[], AbstractSet[str]] | AbstractSet[str]
"""The participants expected to acknowledge a checkpoint, or a function returning them
(called at every trigger), e.g. ``{"op0/kg0", ..., "op0/kg127"}``."""

Committer: TypeAlias = Callable[[CompletedCheckpoint], object]
"""Commits a fully acknowledged checkpoint (the single Delta transaction). If it returns
an ``int`` that is recorded as the state table version. Raising aborts the checkpoint."""

FAILED_REASON = "coordinator failed: too many consecutive checkpoint failures"
SHUTDOWN_REASON = "coordinator shut down"
INTERRUPTED_REASON = "interrupted: the previous run stopped before the checkpoint finished"


class _Effects:
    """Callbacks collected under the lock and run after it is released."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, Callable[[], None]]] = []

    def add(self, what: str, call: Callable[[], None]) -> None:
        self._calls.append((what, call))

    def run(self) -> None:
        calls, self._calls = self._calls, []
        for what, call in calls:
            try:
                call()
            except Exception:
                logger.exception("%s raised; ignored", what)


class CheckpointCoordinator:
    """Triggers, tracks, completes and aborts checkpoints; decides their mode.

    See the module docstring for the rules and the order of events.

    Parameters
    ----------
    settings : CoordinatorSettings
    clock : Clock
        Time source; all ``at_ms`` arguments must be on the same clock.
    participants : set of str, or callable returning one
        Participants expected to acknowledge every checkpoint, captured at the trigger.
    committer : callable, optional
        Called with the :class:`CompletedCheckpoint` once fully acknowledged, before it
        counts as completed; may return the state table version (``int``).
    next_id : int, default 1
        Id of the first checkpoint; a restored run passes one more than the highest id
        it knows (see :meth:`from_history`).

    Raises
    ------
    barriered.errors.CheckpointError
        If ``next_id`` is negative.
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        clock: Clock,
        participants: Participants,
        committer: Committer | None = None,
        *,
        next_id: int = 1,
    ) -> None:
        if isinstance(next_id, bool) or not isinstance(next_id, int) or next_id < 0:
            raise CheckpointError(f"next_id must be an integer >= 0, got {next_id!r}")
        self._settings = settings
        self._clock = clock
        self._participants = participants
        self._committer = committer
        self._next_id = next_id
        self._lock = threading.RLock()
        self._pending: dict[int, PendingCheckpoint] = {}
        self._unsent: dict[int, TriggerRequest] = {}
        self._started_ms = clock.now_ms()
        self._last_periodic_ms: int | None = None
        self._last_end_ms: int | None = None
        self._last_batch_id: int | None = None
        #: The id reserved for the periodic checkpoint the source starts (see schedule()).
        self._reserved: int | None = None
        self._signals: ChannelSignals | None = None
        self._failures = CheckpointFailureManager(settings.tolerable_failures)
        self._tracker = CheckpointStatsTracker(settings.stats_history_size)
        self._complete_listeners: list[Callable[[CompletedCheckpoint], None]] = []
        self._abort_listeners: list[Callable[[CheckpointStats], None]] = []
        self._stats_listeners: list[Callable[[CheckpointStats], None]] = []
        self._error: CheckpointFailureLimitExceeded | None = None
        self._shut_down = False

    # ------------------------------------------------------------------ restore

    @classmethod
    def from_history(
        cls,
        rows: Iterable[Mapping[str, Any]],
        settings: CoordinatorSettings,
        clock: Clock,
        participants: Participants,
        committer: Committer | None = None,
        *,
        next_id: int | None = None,
    ) -> CheckpointCoordinator:
        """Create a coordinator that continues a previous run.

        Parameters
        ----------
        rows : iterable of mapping
            ``_checkpoints`` rows (:meth:`CheckpointStats.to_row`) of the previous runs.
        settings, clock, participants, committer
            As for the constructor.
        next_id : int, optional
            A lower bound for the next id (e.g. from the source's barrier log).

        Returns
        -------
        CheckpointCoordinator
            With the history loaded (rows still ``"pending"`` become ``"aborted"``,
            ``"interrupted: ..."``, not counted as failures) and the next id one above
            the highest id seen.

        Raises
        ------
        barriered.errors.CheckpointError
            If a row is malformed.
        """
        history = [CheckpointStats.from_row(row) for row in rows]
        highest = max((s.checkpoint_id for s in history), default=0)
        start = max(highest + 1, next_id if next_id is not None else 1)
        coordinator = cls(settings, clock, participants, committer, next_id=start)
        for stats in sorted(history, key=lambda s: s.checkpoint_id):
            if not stats.is_finished:
                stats = dataclasses.replace(
                    stats, status="aborted", failure_reason=INTERRUPTED_REASON
                )
            coordinator._tracker.record(stats)
        logger.info(
            "coordinator restored from %d checkpoint row(s); next checkpoint id %d",
            len(history),
            start,
        )
        return coordinator

    # ------------------------------------------------------------------ listeners

    def add_complete_listener(self, listener: Callable[[CompletedCheckpoint], None]) -> None:
        """Call ``listener(completed)`` after every successful completion (notify-complete).

        Exceptions from listeners are logged, never propagated.
        """
        with self._lock:
            self._complete_listeners.append(listener)

    def add_abort_listener(self, listener: Callable[[CheckpointStats], None]) -> None:
        """Call ``listener(stats)`` after every abort (e.g. to delete orphaned files)."""
        with self._lock:
            self._abort_listeners.append(listener)

    def add_stats_listener(self, listener: Callable[[CheckpointStats], None]) -> None:
        """Call ``listener(stats)`` on every trigger, completion and abort (``_checkpoints``)."""
        with self._lock:
            self._stats_listeners.append(listener)

    # ------------------------------------------------------------------ triggering

    def tick(
        self,
        *,
        batch_id: int | None = None,
        signals: ChannelSignals | None = None,
        periodic: bool = True,
    ) -> list[TriggerRequest]:
        """Expire overdue checkpoints, trigger a periodic one if due, return new triggers.

        Call after every micro-batch (and when idle, as often as convenient).

        Parameters
        ----------
        batch_id : int, optional
            The micro-batch just finished; recorded as the trigger batch of checkpoints
            triggered from now on.
        signals : ChannelSignals, optional
            Fresh channel signals for the mode policy (kept until replaced).
        periodic : bool, default True
            Whether to trigger a due periodic checkpoint here. False when the source
            starts periodic checkpoints itself on the published :meth:`schedule`.

        Returns
        -------
        list of TriggerRequest
            Checkpoints to start, in id order: forced ones requested since the last tick,
            then the periodic one if it was triggered now. Empty after :meth:`shutdown`.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If expiring checkpoints exceeded the tolerable failures (or they already were
            exceeded earlier).
        """
        effects = _Effects()
        try:
            with self._lock:
                self._raise_if_failed()
                if self._shut_down:
                    return []
                now = self._clock.now_ms()
                if batch_id is not None:
                    self._last_batch_id = batch_id
                if signals is not None:
                    self._signals = signals
                self._expire(now, effects)
                if periodic and self._periodic_due(now):
                    self._trigger(CHECKPOINT, now, effects)
                    self._last_periodic_ms = now
                requests = [self._unsent[cid] for cid in sorted(self._unsent)]
                self._unsent.clear()
                return requests
        finally:
            effects.run()

    def trigger_checkpoint(self) -> int:
        """Request a checkpoint now, regardless of interval, min pause and max concurrent.

        It is pending from now on; its request is returned by the next :meth:`tick`.

        Returns
        -------
        int
            The checkpoint id.

        Raises
        ------
        barriered.errors.CheckpointError
            After :meth:`shutdown` (``CheckpointFailureLimitExceeded`` after the limit).
        """
        effects = _Effects()
        try:
            with self._lock:
                self._raise_if_stopped()
                now = self._clock.now_ms()
                pending = self._trigger(CHECKPOINT, now, effects)
                self._last_periodic_ms = now
                return pending.checkpoint_id
        finally:
            effects.run()

    def trigger_savepoint(self, target: str) -> int:
        """Request a savepoint to ``target``: always aligned, never subsumed, forced.

        It is pending from now on; its request is returned by the next :meth:`tick`.

        Parameters
        ----------
        target : str
            Where the savepoint is to be written.

        Returns
        -------
        int
            The savepoint's checkpoint id.

        Raises
        ------
        barriered.errors.CheckpointError
            If ``target`` is empty, or after :meth:`shutdown`
            (``CheckpointFailureLimitExceeded`` after the limit).
        """
        if not isinstance(target, str) or not target.strip():
            raise CheckpointError(f"savepoint target must be a non-empty path, got {target!r}")
        effects = _Effects()
        try:
            with self._lock:
                self._raise_if_stopped()
                pending = self._trigger(SAVEPOINT, self._clock.now_ms(), effects, target)
                return pending.checkpoint_id
        finally:
            effects.run()

    def schedule(self) -> Schedule | None:
        """The next periodic checkpoint, for the source planner to start when it is due.

        Reserves an id for it (kept until the source starts it or passes it by), so a
        forced checkpoint or savepoint requested meanwhile gets another id. The due time
        follows the interval and min pause rules; ``paused`` is set while
        ``max_concurrent`` checkpoints are pending; the mode is the policy's decision for
        a checkpoint triggered now. The source's start comes back through :meth:`adopt`.

        Returns
        -------
        Schedule or None
            None after :meth:`shutdown` or once the failure limit was exceeded (nothing
            may start any more). Its ``epoch`` is None: the caller publishes it for its run.
        """
        with self._lock:
            if self._shut_down or self._error is not None:
                return None
            if self._reserved is None:
                self._reserved = self._next_id
                self._next_id += 1
            decision = self._decide(CHECKPOINT)
            return Schedule(
                checkpoint_id=self._reserved,
                due_ms=self._due_ms(),
                mode=decision.mode,
                reason=decision.reason,
                paused=self._pause_reason(),
            )

    @property
    def reserved_id(self) -> int | None:
        """The id reserved for the scheduled periodic checkpoint, if any."""
        with self._lock:
            return self._reserved

    def on_source_last_id(self, last_id: int) -> None:
        """The source has started (or passed) every id up to ``last_id``.

        A reserved id at or below it that the source did not start is given up (the
        planner would find it stale): the next :meth:`schedule` reserves a new one.
        Call after adopting the checkpoints the same offset reports started.
        """
        with self._lock:
            self._next_id = max(self._next_id, last_id + 1)
            reserved = self._reserved
            if reserved is None or reserved > last_id:
                return
            if reserved not in self._pending and self._tracker.get(reserved) is None:
                logger.info(
                    "checkpoint id %d reserved for the schedule was passed by the source "
                    "(its last id is %d); the next schedule reserves another",
                    reserved,
                    last_id,
                )
            self._reserved = None

    def adopt(self, checkpoint_id: int, mode: Mode, reason: str, at_ms: int | None = None) -> bool:
        """Register a checkpoint the source started on its own, so that it is acknowledged
        and committed like any other: the periodic checkpoint of the :meth:`schedule` (its
        reserved id; it counts as the periodic trigger, the interval runs from its start)
        or the final checkpoint of a Trigger.AvailableNow run.

        Parameters
        ----------
        checkpoint_id : int
            The id the source used; an id the coordinator already knows (pending or in
            its history) is ignored. It may be below :attr:`next_id` (the coordinator of
            a restored query learns the ids from the same offset).
        mode : str
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
        effects = _Effects()
        try:
            with self._lock:
                if checkpoint_id in self._pending or self._tracker.get(checkpoint_id):
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
                self._pending[checkpoint_id] = pending
                scheduled = checkpoint_id == self._reserved
                if scheduled:
                    self._reserved = None
                    self._last_periodic_ms = now
                logger.info(
                    "checkpoint %d started by the source%s (%s): %s",
                    checkpoint_id,
                    " on the coordinator's schedule" if scheduled else "",
                    mode,
                    reason,
                )
                self._notify_stats(pending.to_stats(), effects)
                return True
        finally:
            effects.run()

    # ------------------------------------------------------------------ events

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
            pending = self._get(checkpoint_id, "barrier positions")
            if pending is not None:
                pending.set_positions(positions, self._at(at_ms))
                logger.debug("checkpoint %d: barrier positions %s", checkpoint_id, positions)

    def on_alignment_started(self, checkpoint_id: int, at_ms: int | None = None) -> None:
        """The first barrier of the checkpoint was delivered to Spark.

        Only the first call counts. Alignment duration = this -> :meth:`on_cut`.
        """
        with self._lock:
            pending = self._get(checkpoint_id, "alignment start")
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
            pending = self._get(checkpoint_id, "expect")
            if pending is not None:
                pending.expect(participants)

    def on_cut(
        self,
        checkpoint_id: int,
        at_ms: int | None = None,
        batch_id: int | None = None,
        *,
        effective_mode: str | None = None,
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
        effective_mode : str, optional
            The mode the handler really used (e.g. ``"unaligned"`` after an alignment
            timeout).

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If completing failed in the committer once too often.
        """
        effects = _Effects()
        try:
            with self._lock:
                pending = self._get(checkpoint_id, "cut")
                if pending is None:
                    return
                at = self._at(at_ms)
                pending.cut(at, batch_id, effective_mode)
                logger.info("checkpoint %d: cut at batch %s", checkpoint_id, batch_id)
                self._maybe_complete(pending, at, effects)
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
            See :data:`~barriered.coordinator.model.AckResult`. On ``"discarded"`` the
            participant's files belong to an aborted checkpoint and may be deleted.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If the commit failed once too often.
        """
        effects = _Effects()
        try:
            with self._lock:
                pending = self._pending.get(checkpoint_id)
                if pending is None:
                    result = self._late_ack_result(checkpoint_id)
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
                    self._maybe_complete(pending, self._at(at_ms), effects)
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
        effects = _Effects()
        try:
            with self._lock:
                pending = self._get(checkpoint_id, f"decline by {participant}")
                if pending is not None:
                    self._abort(
                        pending,
                        f"declined by {participant}: {reason}",
                        self._at(at_ms),
                        counts=True,
                        effects=effects,
                    )
        finally:
            effects.run()

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
        effects = _Effects()
        try:
            with self._lock:
                pending = self._get(checkpoint_id, "abort")
                if pending is None:
                    return False
                self._abort(
                    pending, reason, self._at(at_ms), counts=counts_as_failure, effects=effects
                )
                return True
        finally:
            effects.run()

    def shutdown(self, reason: str = SHUTDOWN_REASON) -> None:
        """Abort every pending checkpoint (not counted) and stop triggering.

        Call when the query terminates. Idempotent.
        """
        effects = _Effects()
        try:
            with self._lock:
                if self._shut_down:
                    return
                self._shut_down = True
                now = self._clock.now_ms()
                for pending in list(self._pending.values()):
                    self._abort(pending, reason, now, counts=False, effects=effects)
                logger.info("coordinator shut down (%s)", reason)
        finally:
            effects.run()

    # ------------------------------------------------------------------ queries

    @property
    def settings(self) -> CoordinatorSettings:
        """The settings."""
        return self._settings

    @property
    def next_id(self) -> int:
        """The id the next checkpoint will get."""
        with self._lock:
            return self._next_id

    @property
    def pending_ids(self) -> list[int]:
        """Ids of the pending checkpoints, ascending."""
        with self._lock:
            return sorted(self._pending)

    @property
    def consecutive_failures(self) -> int:
        """Failures counted since the last completion."""
        with self._lock:
            return self._failures.consecutive_failures

    def stats(self, checkpoint_id: int) -> CheckpointStats | None:
        """Statistics of one checkpoint (pending or finished and still kept)."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is not None:
                return pending.to_stats()
            return self._tracker.get(checkpoint_id)

    def history(self) -> list[CheckpointStats]:
        """Statistics of every checkpoint kept, pending ones included, in id order."""
        with self._lock:
            rows = self._tracker.finished() + [p.to_stats() for p in self._pending.values()]
            return sorted(rows, key=lambda s: s.checkpoint_id)

    def latest_completed(self) -> CheckpointStats | None:
        """Statistics of the completed checkpoint (or savepoint) with the highest id."""
        with self._lock:
            return self._tracker.latest_completed()

    def decide_mode(self, kind: CheckpointKind = CHECKPOINT) -> ModeDecision:
        """The mode a checkpoint triggered now would get, without triggering it."""
        with self._lock:
            return self._decide(kind)

    # ------------------------------------------------------------------ internals

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _raise_if_stopped(self) -> None:
        self._raise_if_failed()
        if self._shut_down:
            raise CheckpointError("the checkpoint coordinator is shut down (query terminated)")

    def _at(self, at_ms: int | None) -> int:
        return self._clock.now_ms() if at_ms is None else int(at_ms)

    def _get(self, checkpoint_id: int, what: str) -> PendingCheckpoint | None:
        pending = self._pending.get(checkpoint_id)
        if pending is None:
            logger.debug("checkpoint %d is not pending: %s ignored", checkpoint_id, what)
        return pending

    def _late_ack_result(self, checkpoint_id: int) -> AckResult:
        # "discarded" only when the abort is known for sure: the adapter may delete files.
        finished = self._tracker.get(checkpoint_id)
        if finished is None:
            return "unknown"
        return "duplicate" if finished.status == "completed" else "discarded"

    def _due_ms(self) -> int:
        """When the next periodic checkpoint is due: ``checkpoint_interval_ms`` after the
        last periodic (or manual) trigger, at least ``min_pause_ms`` after the last end."""
        s = self._settings
        since = self._started_ms if self._last_periodic_ms is None else self._last_periodic_ms
        due = since + s.checkpoint_interval_ms
        if self._last_end_ms is not None:
            due = max(due, self._last_end_ms + s.min_pause_ms)
        return due

    def _pause_reason(self) -> str | None:
        """Why no periodic checkpoint may start now, whenever due (None: it may)."""
        if len(self._pending) >= self._settings.max_concurrent:
            return (
                f"{len(self._pending)} checkpoint(s) pending {sorted(self._pending)}, "
                f"maxConcurrentCheckpoints={self._settings.max_concurrent}"
            )
        return None

    def _periodic_due(self, now: int) -> bool:
        s = self._settings
        since = self._started_ms if self._last_periodic_ms is None else self._last_periodic_ms
        if now - since < s.checkpoint_interval_ms:
            return False
        if now < self._due_ms():
            logger.debug(
                "periodic checkpoint due but min pause: %d of %d ms since the last end",
                now - (self._last_end_ms or 0),
                s.min_pause_ms,
            )
            return False
        paused = self._pause_reason()
        if paused is not None:
            logger.debug("periodic checkpoint due but %s", paused)
            return False
        return True

    def _decide(self, kind: CheckpointKind) -> ModeDecision:
        recent = self._tracker.recent_alignment_durations(self._settings.alignment_history_size)
        return decide_mode(self._settings, self._signals, recent, kind=kind)

    def _expected(self) -> frozenset[str]:
        source = self._participants
        return frozenset(source() if callable(source) else source)

    def _trigger(
        self, kind: CheckpointKind, now: int, effects: _Effects, target: str | None = None
    ) -> PendingCheckpoint:
        decision = self._decide(kind)
        expected = self._expected()
        checkpoint_id = self._next_id
        self._next_id += 1
        pending = PendingCheckpoint(
            checkpoint_id,
            kind,
            decision.mode,
            decision.reason,
            now,
            expected,
            savepoint_target=target,
            trigger_batch_id=self._last_batch_id,
        )
        self._pending[checkpoint_id] = pending
        self._unsent[checkpoint_id] = TriggerRequest(
            checkpoint_id=checkpoint_id,
            kind=kind,
            mode=decision.mode,
            mode_reason=decision.reason,
            timestamp_ms=now,
            savepoint_target=target,
            alignment_timeout_ms=(
                self._settings.aligned_timeout_ms if decision.mode == ALIGNED_WITH_TIMEOUT else None
            ),
            trigger_batch_id=self._last_batch_id,
        )
        logger.info(
            "%s %d triggered, %d participant(s), mode %s: %s",
            kind,
            checkpoint_id,
            len(expected),
            decision.mode,
            decision.reason,
        )
        self._notify_stats(pending.to_stats(), effects)
        return pending

    def _expire(self, now: int, effects: _Effects) -> None:
        timeout = self._settings.checkpoint_timeout_ms
        error: CheckpointFailureLimitExceeded | None = None
        for pending in [p for p in self._pending.values() if p.age_ms(now) >= timeout]:
            logger.warning(
                "%s %d expired after %d ms (timeout %d ms), %d/%d acks",
                pending.kind,
                pending.checkpoint_id,
                pending.age_ms(now),
                timeout,
                len(pending.acks),
                len(pending.expected),
            )
            error = self._abort(pending, EXPIRED, now, counts=True, effects=effects, defer=True)
            if error is not None:
                break
        if error is not None:
            self._fail(error, now, effects)
            raise error

    def _maybe_complete(self, pending: PendingCheckpoint, at: int, effects: _Effects) -> None:
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
                self._abort(
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
        del self._pending[cid]
        self._unsent.pop(cid, None)
        self._last_end_ms = end
        self._failures.on_success(cid)
        stats = pending.to_stats("completed", end_ms=end, state_table_version=version)
        self._tracker.record(stats)
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
            for older in [p for p in self._pending.values() if p.checkpoint_id < cid]:
                if older.kind == CHECKPOINT:
                    self._abort(older, SUBSUMED, end, counts=False, effects=effects)
        self._notify_stats(stats, effects)
        for listener in list(self._complete_listeners):
            effects.add(
                f"complete listener {listener!r} for checkpoint {cid}",
                functools.partial(listener, completed),
            )

    def _abort(
        self,
        pending: PendingCheckpoint,
        reason: str,
        at: int,
        *,
        counts: bool,
        effects: _Effects,
        defer: bool = False,
        cause: BaseException | None = None,
    ) -> CheckpointFailureLimitExceeded | None:
        """Abort ``pending``; with ``counts``, count it and fail if over the limit.

        With ``defer`` the limit error is returned instead of raised (the caller finishes
        its loop, then fails).
        """
        cid = pending.checkpoint_id
        del self._pending[cid]
        self._unsent.pop(cid, None)
        end = max(at, pending.trigger_ms)
        self._last_end_ms = end
        stats = pending.to_stats("aborted", failure_reason=reason, end_ms=end)
        self._tracker.record(stats)
        log = logger.warning if counts else logger.info
        log("%s %d aborted: %s", pending.kind, cid, reason)
        self._notify_stats(stats, effects)
        for listener in list(self._abort_listeners):
            effects.add(
                f"abort listener {listener!r} for checkpoint {cid}",
                functools.partial(listener, stats),
            )
        if not counts or pending.kind != CHECKPOINT:
            return None
        error = self._failures.on_failure(cid, reason)
        if error is None or defer:
            return error
        self._fail(error, end, effects)
        if cause is not None:
            raise error from cause
        raise error

    def _fail(self, error: CheckpointFailureLimitExceeded, now: int, effects: _Effects) -> None:
        self._error = error
        logger.error("%s", error)
        for pending in list(self._pending.values()):
            self._abort(pending, FAILED_REASON, now, counts=False, effects=effects)

    def _notify_stats(self, stats: CheckpointStats, effects: _Effects) -> None:
        for listener in list(self._stats_listeners):
            effects.add(
                f"stats listener {listener!r} for checkpoint {stats.checkpoint_id}",
                functools.partial(listener, stats),
            )
