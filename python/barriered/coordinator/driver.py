"""Drives one query's :class:`CheckpointCoordinator` from Spark's query progress.

After every micro-batch the listener hands the barriered source's progress to
:meth:`QueryCoordinator.on_progress`, which

1. replays what the source planner did in that batch (it is all in the end offset:
   barrier positions fixed, aborts, the cut with its in-flight ranges),
2. collects the acknowledgements the executors published under ``_acks/<id>/``,
3. lets the coordinator complete checkpoints (committed, recorded and retained by the
   run's one :mod:`~barriered.coordinator.checkpoint_store`), expire old ones, hand out
   requested savepoints and publish the schedule of the next periodic one
   (:mod:`barriered.control.schedule`), which the planner starts itself when it is due;
   the coordinator adopts it from the offset that reports it started,
4. writes what it tells the source, once (:mod:`barriered.coordinator.control_channel`).

Finished checkpoints are appended to the ``_checkpoints`` table. After a completion the
coordinator tells the source, through its control record, the positions before which no
retained checkpoint needs the upstream's records any more (the upstream may release
them). Savepoints are requested with :meth:`QueryCoordinator.request_savepoint`.

The coordinator writes for its run's epoch only (:mod:`barriered.statestore.ownership`):
before every commit and every write to the control record, ``_checkpoints`` or retention
it checks that no newer run took the path over; a fenced coordinator writes nothing more.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from barriered import wall_time
from barriered.config import BarrieredConf
from barriered.control.model import AckStats, CompletedCheckpoint
from barriered.control.offsets import SourceOffset
from barriered.control.stats import CheckpointStats
from barriered.control.triggers import FINAL_REASON, TriggerRequest
from barriered.coordinator.checkpoint_store import CheckpointStore
from barriered.coordinator.clock import SystemClock
from barriered.coordinator.control_channel import ControlChannel
from barriered.coordinator.coordinator import CheckpointCoordinator
from barriered.coordinator.policy import ChannelSignals
from barriered.coordinator.settings import settings_from_conf
from barriered.errors import (
    BarrieredError,
    CheckpointError,
    CheckpointFailureLimitExceeded,
    FencedError,
)
from barriered.files.fileio import read_json
from barriered.statestore import checkpoints_table, operators, ownership
from barriered.statestore.acks import inflight_participant, read_acks, state_participant
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


class QueryCoordinator:
    """The coordinator of one query on one snapshot path.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    next_id : int
        Lower bound of the next checkpoint id (from the source's offset).
    epoch : int, optional
        The run's epoch on the snapshot path (the source took it at start); every write
        is fenced by it. None only for a path that predates ownership.
    restored : mapping, optional
        What the run was restored from (the source offset's ``restore``: ``from``,
        ``checkpoint_id``): the sinks' tables are taken back to that checkpoint's output.
    keyed : frozenset of str, optional
        The run's keyed operators (those declared on the stream it reads,
        :mod:`barriered.coordinator.deferred_registrations`): every checkpoint waits for
        their key groups, and for no other operator registered on the path. None: every
        registered operator.
    """

    def __init__(
        self,
        layout: SnapshotLayout,
        next_id: int = 1,
        epoch: int | None = None,
        restored: Mapping[str, Any] | None = None,
        keyed: frozenset[str] | None = None,
    ) -> None:
        self._run_operators = keyed
        stored = read_json(layout.config_file, default={}) or {}
        self.conf = BarrieredConf(**stored.get("conf", {}))
        # the settings this process registered for the path (the query's), else those
        # config.json records (without secrets)
        self.layout = SnapshotLayout.configured(layout.root)
        self.channels = int(stored.get("channels", 0))
        history = checkpoints_table.read_rows(self.layout)
        self.core = CheckpointCoordinator.from_history(
            history,
            settings_from_conf(self.conf),
            SystemClock(),
            self._participants,
            lambda done: self.store.commit(done),
            next_id=next_id,
        )
        self.core.add_stats_listener(self._on_stats)
        self.core.add_complete_listener(self._on_complete)
        self._collecting: set[int] = set()
        self._barrier_batch: dict[int, int] = {}
        self._crashed: str | None = None
        self.epoch = epoch
        #: The Spark run this coordinator serves (set by :meth:`identify`).
        self.run_id: str | None = None
        #: Set when a newer run took the snapshot path over: nothing is written any more.
        self._fenced: str | None = None
        self._lease = (
            None
            if epoch is None
            else ownership.Lease(self.layout, epoch, ownership.QUERY, self.conf.lease_timeout_ms)
        )
        self._control = ControlChannel(
            self.layout, epoch, self.conf.coordinator_timeout_ms // 4, self._taken_over
        )
        #: Commits, records and retains this run's checkpoints, in one order.
        self.store = CheckpointStore(
            self.layout, self.conf, epoch, restored, history, self._fence, self.fail
        )
        self.sinks = self.store.sinks
        self._restored_id = int((restored or {}).get("checkpoint_id", 0))

    def record_interrupted(self, started: frozenset[int]) -> None:
        """Record as aborted the ids a run that ended first left unfinished (not started by
        this run's first batch, ``started``, nor committed); never for a refused run."""
        committed = self.store.committed
        for stats in self.core.interrupted(self._restored_id, started | committed):
            self._on_stats(stats)

    # -- ownership ------------------------------------------------------------------------

    def identify(self, query_id: str, run_id: str) -> None:
        """Record which query and run hold this epoch (shown when another is refused)."""
        self.run_id = run_id
        if self._lease is not None:
            self._lease.identity = {"query_id": query_id, "run_id": run_id}
            self._owned(self._lease.renew, force=True)

    def _owned(self, action: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``action``; a :class:`FencedError` marks this coordinator fenced."""
        try:
            return action(*args, **kwargs)
        except FencedError as exc:
            if self._fenced is None:
                log.error("checkpoint coordinator of %s fenced: %s", self.layout.root, exc)
            self._fenced = str(exc)
            raise

    def _fence(self, what: str) -> None:
        """Refuse ``what`` (raise :class:`FencedError`) unless this run owns the path."""
        if self._fenced is not None:
            raise FencedError(f"{what} refused: {self._fenced}")
        if self.epoch is not None:
            self._owned(ownership.check, self.layout, self.epoch, what)

    def _taken_over(self) -> bool:
        """Whether a newer run took the snapshot path over (without marking it fenced)."""
        return self.epoch is not None and ownership.newer_epoch_exists(self.layout, self.epoch)

    @property
    def fenced(self) -> str | None:
        """Why this coordinator writes nothing any more (a newer run took the path)."""
        return self._fenced

    # -- participants and completion ------------------------------------------------------

    def operators(self) -> list[dict[str, Any]]:
        """The keyed operators of this run: those registered on the snapshot path that the
        run declared (every registered one when it did not say)."""
        registered = self.layout.registrations()
        if self._run_operators is None:
            return list(registered.values())
        return [r for name, r in registered.items() if name in self._run_operators]

    def _participants(self) -> frozenset[str]:
        names = set()
        for op in self.operators():
            for kg in range(int(op["max_parallelism"])):
                names.add(state_participant(op["operator"], kg))
        return frozenset(names)

    def fail(self, error: BarrieredError) -> None:
        """Fail the query with ``error`` and do nothing more: no trigger, ack or commit.

        The error goes to the control record's ``fatal`` at once; the source raises it
        before planning its next batch (a listener cannot fail a query itself).
        """
        self._crashed = str(error)
        self._control.record = self._control.record.with_fatal(error)
        self._control.flush(wall_time.now_ms())
        log.error("checkpoint coordinator of %s fails the query: %s", self.layout.root, error)

    def _renew(self) -> None:
        if self._lease is not None:
            self._owned(self._lease.renew)

    def _on_stats(self, stats: CheckpointStats) -> None:
        if stats.status == "pending" or self._crashed or self._fenced:
            return
        cid = stats.checkpoint_id
        self.store.record(stats, self._barrier_batch.pop(cid, None))
        if stats.status == "aborted":
            self._control.record = self._control.record.with_cancelled([cid])

    def _on_complete(self, done: CompletedCheckpoint) -> None:
        if self._fenced:
            return
        release, positions = self.store.completed(done, self._unfinished)
        self._control.record = self._control.record.with_completed(
            done.checkpoint_id, release, positions
        )
        log.info(
            "checkpoint %d completed (%s), state table version %s",
            done.checkpoint_id,
            done.effective_mode or done.mode,
            done.state_table_version,
        )

    def _unfinished(self) -> tuple[int, frozenset[int]]:
        """The first id not finished (pending, or reserved: the source may start it at any
        moment) and the pending ids."""
        pending, reserved = self.core.pending_ids, self.core.reserved_id
        first = min(
            [*pending, *([] if reserved is None else [reserved])], default=self.core.next_id
        )
        return first, frozenset(pending)

    # -- savepoints -----------------------------------------------------------------------

    def request_savepoint(self, target: str) -> int:
        """Trigger an aligned savepoint now and publish it to the source; return its id.

        It is committed to this snapshot path like any checkpoint (kind ``savepoint``);
        :func:`barriered.savepoint` then copies it to ``target``.
        """
        if self._crashed:
            raise CheckpointError(f"the coordinator crashed ({self._crashed})")
        with self._handling():
            self._fence("a savepoint")
            checkpoint_id = self.core.trigger_savepoint(target)
            self.tick()
        return checkpoint_id

    def status(self, checkpoint_id: int) -> tuple[str, str | None] | None:
        """``(status, failure reason)`` of a checkpoint this coordinator knows, else None."""
        stats = self.core.stats(checkpoint_id)
        return None if stats is None else (stats.status, stats.failure_reason)

    # -- progress -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _handling(self) -> Iterator[None]:
        """Write what the coordinator tells the source once, when it is done: on the way
        out, the fatal "too many failed checkpoints" error too, which the source fails
        the query with (a listener cannot fail a query), before it is re-raised."""
        try:
            yield
        except CheckpointFailureLimitExceeded as exc:
            if not (self._crashed or self._fenced):
                self._control.record = self._control.record.with_fatal(exc)
            raise
        finally:
            self._control.flush(wall_time.now_ms())

    def between_batches(self, tick: bool) -> None:
        """Collect late acknowledgements and, when ``tick``, expire and trigger."""
        if self._crashed or self._fenced:
            return
        self._renew()
        with self._handling():
            self.collect_acks()
            if tick:
                self.tick()

    def ended(self, run_id: str | None = None, failed: bool = False) -> None:
        """Run ``run_id`` of the query ended: when it is this coordinator's, record every
        checkpoint still pending as aborted (not a failure: the run ended first;
        ``failed``: with an error); release what it holds open (the sinks' clients)."""
        try:
            ours = run_id is None or self.run_id in (None, run_id)
            if ours and not (self._crashed or self._fenced):
                why = "failed" if failed else "stopped"
                with self._handling():
                    self.core.shutdown(
                        f"interrupted: the run {why} before the checkpoint completed"
                    )
        finally:
            self.sinks.ended()

    def on_progress(
        self,
        batch_id: int,
        start: Mapping[str, Any] | None,
        end: Mapping[str, Any],
        report: Mapping[str, Any] | None,
        duration_ms: int,
    ) -> list[TriggerRequest]:
        """Handle one micro-batch's progress of the barriered source; return new triggers."""
        self.sinks.ran(batch_id)
        if self._crashed or self._fenced:
            return []
        self._renew()
        with self._handling():
            self._control.heartbeat(batch_id, wall_time.now_ms())
            return self._apply(
                batch_id, start, SourceOffset.from_dict(dict(end)), report, duration_ms
            )

    def _apply(
        self,
        batch_id: int,
        start: Mapping[str, Any] | None,
        offset: SourceOffset,
        report: Mapping[str, Any] | None,
        duration_ms: int,
    ) -> list[TriggerRequest]:
        core = self.core
        for started in offset.started:
            cid = started.checkpoint_id
            if core.stats(cid) is None:
                core.adopt(cid, started.mode, started.reason, started.at_ms)
            core.on_barrier_positions(cid, dict(enumerate(started.barrier)), started.at_ms)
            core.on_alignment_started(cid, started.at_ms)
            self._barrier_batch[cid] = batch_id
        for aborted in offset.aborted:
            core.abort(aborted.checkpoint_id, f"aborted by the source: {aborted.reason.value}")
        core.on_source_last_id(offset.last_id)
        if offset.cut is not None:
            cut = offset.cut
            sinks = self.sinks.on_cut(cut.checkpoint_id, batch_id)
            core.expect(
                cut.checkpoint_id,
                [
                    *(inflight_participant(c) for c, _, _ in cut.inflight),
                    *operators.participants(self.layout, self.epoch),
                    *sinks,
                ],
            )
            self._collecting.add(cut.checkpoint_id)
            core.on_cut(cut.checkpoint_id, cut.at_ms, batch_id, effective_mode=cut.mode)
        self.collect_acks()
        if offset.cut is not None:
            self._final_unacknowledged(offset.cut.checkpoint_id, batch_id)
        signals = None
        if report and start and duration_ms > 0:
            begin = SourceOffset.from_dict(dict(start)).positions
            available = report.get("available", [])
            delivered = {c: offset.positions[c] - begin[c] for c in range(len(begin))}
            backlog = {c: max(0, available[c] - offset.positions[c]) for c in range(len(begin))}
            signals = ChannelSignals.from_batch(backlog, delivered, duration_ms)
        return self.tick(batch_id, signals)

    def _final_unacknowledged(self, checkpoint_id: int, batch_id: int) -> None:
        """Abort the final checkpoint of an availableNow run when its cut batch ended
        without every acknowledgement: its participants acknowledge in that batch, no
        later batch comes, and the source waits for it before the run ends (it fails the
        query with this reason), so it is aborted now instead of pending for
        ``checkpointTimeout`` (a registered operator that does not run, say)."""
        stats = self.core.stats(checkpoint_id)
        waiting = self.core.waiting_for(checkpoint_id)
        if stats is None or waiting is None or stats.mode_reason != FINAL_REASON:
            return
        self.core.abort(
            checkpoint_id,
            f"the final checkpoint of an availableNow run: its cut batch {batch_id} ended "
            f"with {waiting}, and no later batch can bring them",
            counts_as_failure=True,
        )

    def tick(
        self, batch_id: int | None = None, signals: ChannelSignals | None = None
    ) -> list[TriggerRequest]:
        """Expire, publish savepoint requests and the schedule to the source."""
        if self._crashed or self._fenced:
            return []
        out = self.core.tick(batch_id=batch_id, signals=signals)
        if out:
            self._fence(f"publishing trigger requests {[r.checkpoint_id for r in out]}")
            self._control.record = self._control.record.with_requests(out)
        schedule = self.core.schedule()
        if schedule is not None:
            self._control.record = self._control.record.with_schedule(schedule)
        return out

    def collect_acks(self) -> None:
        """Feed newly published acknowledgements of cut checkpoints to the coordinator."""
        for cid in sorted(self._collecting):
            if self._crashed:
                return
            if cid not in self.core.pending_ids:
                self._collecting.discard(cid)
                continue
            for participant, ack in read_acks(self.layout, cid, self.epoch).items():
                state = participant.startswith(("state/", operators.PARTICIPANT_PREFIX))
                self.core.acknowledge(cid, participant, ack.stats(state))
            for participant in self.sinks.staged(cid):
                self.core.acknowledge(cid, participant, AckStats())
            if cid not in self.core.pending_ids:
                self._collecting.discard(cid)
