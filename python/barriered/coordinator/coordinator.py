"""The checkpoint coordinator (Flink's ``CheckpointCoordinator``), pure and event-driven.

It runs in the driver and is driven by a ``StreamingQueryListener``: after every
micro-batch the adapter feeds it what happened (checkpoints the source started, barrier
positions, alignment start, the cut, acknowledgements and declines of participants) and
then calls :meth:`CheckpointCoordinator.tick`, which expires overdue checkpoints and
returns the savepoints to trigger now, and :meth:`CheckpointCoordinator.schedule`, the
next periodic checkpoint for the source planner to start. It never sleeps, never starts
a thread and never reads the time except through the injected
:class:`~barriered.coordinator.clock.Clock`.

Life of a checkpoint ``n``::

    schedule() -> Schedule(n)              the source starts n once due (a savepoint:
                                           tick() -> TriggerRequest(n), trigger log)
    adopt(n, mode, reason)                 the offset reports n started
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

- **Periodic checkpoints**: published by :meth:`~CheckpointCoordinator.schedule` for
  the source planner to start (the listener hears of a batch only after the next one
  was planned, so a trigger from the listener would start a batch later) and adopted
  (:meth:`~CheckpointCoordinator.adopt`) from the offset. The interval, min pause and
  max concurrent rules and the reserved id: :mod:`barriered.coordinator.scheduling`.
- **Savepoints** (:meth:`~CheckpointCoordinator.trigger_savepoint`) are forced (as in
  Flink): they ignore interval, min pause and max concurrent. They become pending at
  once (the id is returned, the timeout runs, they show in
  :meth:`~CheckpointCoordinator.history`) and their :class:`TriggerRequest` is handed
  out by the next ``tick()``. A savepoint does not restart the periodic interval.
- **Expiry, completion, subsumption, aborts and the failure limit**:
  :mod:`barriered.coordinator.outcomes`; **events** of pending checkpoints (cut, acks,
  declines): :mod:`barriered.coordinator.events`.
- **Listeners** run after the coordinator's state is updated and outside its lock
  (:mod:`barriered.coordinator.effects`); their exceptions are logged, never propagated.
- **Thread safety**: every public method holds one re-entrant lock, so a user thread may
  call :meth:`~CheckpointCoordinator.trigger_savepoint` while the listener thread ticks.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from barriered.barrier.modes import Mode
from barriered.control.model import CHECKPOINT, SAVEPOINT, CheckpointKind, CompletedCheckpoint
from barriered.control.schedule import Schedule
from barriered.control.stats import CheckpointStats
from barriered.control.triggers import TriggerRequest
from barriered.coordinator.clock import Clock
from barriered.coordinator.effects import Effects, Listeners
from barriered.coordinator.events import CheckpointEvents, Participants
from barriered.coordinator.outcomes import CheckpointOutcomes, Committer
from barriered.coordinator.pending import PendingCheckpoint
from barriered.coordinator.policy import ChannelSignals, ModeDecision, decide_mode
from barriered.coordinator.scheduling import PeriodicScheduler
from barriered.coordinator.settings import CoordinatorSettings
from barriered.errors import CheckpointError

__all__ = ["CheckpointCoordinator"]

logger = logging.getLogger(__name__)

SHUTDOWN_REASON = "coordinator shut down"
INTERRUPTED_REASON = "interrupted: the previous run stopped before the checkpoint finished"


class CheckpointCoordinator(CheckpointEvents):
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
        self._next_id = next_id
        self._lock = threading.RLock()
        self._last_batch_id: int | None = None
        self._signals: ChannelSignals | None = None
        self._listeners = Listeners()
        self._scheduler = PeriodicScheduler(settings, clock.now_ms())
        self._outcomes = CheckpointOutcomes(settings, self._scheduler, self._listeners, committer)
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
            coordinator._outcomes.tracker.record(stats)
        logger.info(
            "coordinator restored from %d checkpoint row(s); next checkpoint id %d",
            len(history),
            start,
        )
        return coordinator

    def interrupted(self, restored: int, spared: Iterable[int]) -> list[CheckpointStats]:
        """Record as aborted, with :data:`INTERRUPTED_REASON`, every id above the history's
        highest (and the ``restored`` checkpoint's) and below the next id that nobody
        finished and ``spared`` does not name (the ones this run started, the ones
        committed without a row): a run that scheduled or started it ended first. Without
        a row it would vanish from the history (ids 1, 2, 3, 5).

        Returns
        -------
        list of CheckpointStats
            The rows to append to ``_checkpoints`` (mode: the one the settings give).
        """
        with self._lock:
            decision = decide_mode(self._settings, None)
            mode = Mode.ALIGNED if decision.mode is Mode.ALIGNED_WITH_TIMEOUT else decision.mode
            now, mine = self._clock.now_ms(), set(spared)
            done = (s.checkpoint_id for s in self._outcomes.tracker.finished())
            highest = max([restored, *done])
            found = [
                CheckpointStats(
                    cid,
                    CHECKPOINT,
                    mode,
                    decision.reason,
                    "aborted",
                    now,
                    failure_reason=INTERRUPTED_REASON,
                    end_timestamp_ms=now,
                )
                for cid in range(highest + 1, self._next_id)
                if cid not in mine and not self._outcomes.knows(cid)
            ]
            for stats in found:
                self._outcomes.tracker.record(stats)
            return found

    # ------------------------------------------------------------------ listeners

    def add_complete_listener(self, listener: Callable[[CompletedCheckpoint], None]) -> None:
        """Call ``listener(completed)`` after every successful completion (notify-complete).

        Exceptions from listeners are logged, never propagated.
        """
        with self._lock:
            self._listeners.complete.append(listener)

    def add_abort_listener(self, listener: Callable[[CheckpointStats], None]) -> None:
        """Call ``listener(stats)`` after every abort (e.g. to delete orphaned files)."""
        with self._lock:
            self._listeners.abort.append(listener)

    def add_stats_listener(self, listener: Callable[[CheckpointStats], None]) -> None:
        """Call ``listener(stats)`` on every trigger, completion and abort (``_checkpoints``)."""
        with self._lock:
            self._listeners.stats.append(listener)

    # ------------------------------------------------------------------ triggering

    def tick(
        self,
        *,
        batch_id: int | None = None,
        signals: ChannelSignals | None = None,
    ) -> list[TriggerRequest]:
        """Expire overdue checkpoints and return the savepoints requested since the last tick.

        Call after every micro-batch (and when idle, as often as convenient).

        Parameters
        ----------
        batch_id : int, optional
            The micro-batch just finished; recorded as the trigger batch of checkpoints
            triggered from now on.
        signals : ChannelSignals, optional
            Fresh channel signals for the mode policy (kept until replaced).

        Returns
        -------
        list of TriggerRequest
            Savepoints to start, in id order. Empty after :meth:`shutdown`.

        Raises
        ------
        barriered.errors.CheckpointFailureLimitExceeded
            If expiring checkpoints exceeded the tolerable failures (or they already were
            exceeded earlier).
        """
        effects = Effects()
        try:
            with self._lock:
                self._outcomes.raise_if_failed()
                if self._shut_down:
                    return []
                now = self._clock.now_ms()
                if batch_id is not None:
                    self._last_batch_id = batch_id
                if signals is not None:
                    self._signals = signals
                self._outcomes.expire(now, effects)
                unsent = self._outcomes.unsent
                requests = [unsent[cid] for cid in sorted(unsent)]
                unsent.clear()
                return requests
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
        effects = Effects()
        try:
            with self._lock:
                self._raise_if_stopped()
                pending = self._trigger(self._clock.now_ms(), effects, target)
                return pending.checkpoint_id
        finally:
            effects.run()

    def schedule(self) -> Schedule | None:
        """The next periodic checkpoint, for the source planner to start when it is due.

        Reserves an id for it (kept until the source starts it or passes it by), so a
        savepoint requested meanwhile gets another id. The due time
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
            if self._shut_down or self._outcomes.error is not None:
                return None
            reserved = self._scheduler.reserved
            if reserved is None:
                reserved = self._next_id
                self._next_id += 1
            decision = self._decide(CHECKPOINT)
            return self._scheduler.publish(reserved, decision, self._outcomes.pending)

    @property
    def reserved_id(self) -> int | None:
        """The id reserved for the scheduled periodic checkpoint, if any."""
        with self._lock:
            return self._scheduler.reserved

    # ------------------------------------------------------------------ events

    def shutdown(self, reason: str = SHUTDOWN_REASON) -> None:
        """Abort every pending checkpoint (not counted) and stop triggering.

        Call when the query terminates. Idempotent.
        """
        effects = Effects()
        try:
            with self._lock:
                if self._shut_down:
                    return
                self._shut_down = True
                now = self._clock.now_ms()
                self._outcomes.abort_all(reason, now, effects)
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
            return sorted(self._outcomes.pending)

    @property
    def consecutive_failures(self) -> int:
        """Failures counted since the last completion."""
        with self._lock:
            return self._outcomes.failures.consecutive_failures

    def stats(self, checkpoint_id: int) -> CheckpointStats | None:
        """Statistics of one checkpoint (pending or finished and still kept)."""
        with self._lock:
            pending = self._outcomes.pending.get(checkpoint_id)
            if pending is not None:
                return pending.to_stats()
            return self._outcomes.tracker.get(checkpoint_id)

    def history(self) -> list[CheckpointStats]:
        """Statistics of every checkpoint kept, pending ones included, in id order."""
        with self._lock:
            outcomes = self._outcomes
            rows = outcomes.tracker.finished() + [p.to_stats() for p in outcomes.pending.values()]
            return sorted(rows, key=lambda s: s.checkpoint_id)

    def waiting_for(self, checkpoint_id: int) -> str | None:
        """What a pending checkpoint still waits for, in words (None: not pending)."""
        with self._lock:
            pending = self._outcomes.pending.get(checkpoint_id)
            return None if pending is None else pending.waiting_for()

    def latest_completed(self) -> CheckpointStats | None:
        """Statistics of the completed checkpoint (or savepoint) with the highest id."""
        with self._lock:
            return self._outcomes.tracker.latest_completed()

    def decide_mode(self, kind: CheckpointKind = CHECKPOINT) -> ModeDecision:
        """The mode a checkpoint triggered now would get, without triggering it."""
        with self._lock:
            return self._decide(kind)

    # ------------------------------------------------------------------ internals

    def _raise_if_stopped(self) -> None:
        self._outcomes.raise_if_failed()
        if self._shut_down:
            raise CheckpointError("the checkpoint coordinator is shut down (query terminated)")

    def _decide(self, kind: CheckpointKind) -> ModeDecision:
        recent = self._outcomes.tracker.recent_alignment_durations(
            self._settings.alignment_history_size
        )
        return decide_mode(self._settings, self._signals, recent, kind=kind)

    def _trigger(self, now: int, effects: Effects, target: str) -> PendingCheckpoint:
        kind: CheckpointKind = SAVEPOINT
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
        request = TriggerRequest(checkpoint_id, kind, decision.mode, decision.reason, now)
        logger.info(
            "%s %d triggered, %d participant(s), mode %s: %s",
            kind,
            checkpoint_id,
            len(expected),
            decision.mode,
            decision.reason,
        )
        self._outcomes.start(pending, request, effects)
        return pending
