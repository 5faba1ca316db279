"""The sink as a participant of checkpoints, for one run's coordinator.

At the cut of checkpoint ``n`` the coordinator expects one participant per sink that
staged a batch in this run (``sink/<sink>``); it is acknowledged once the cut batch is
staged. Spark runs the sink's driver-side ``commit`` of a batch before it reports the
batch's progress, which is where the coordinator learns of the cut, so the
acknowledgement is normally there at once; waiting for it makes the order explicit (a
checkpoint never completes without the output of its cut batch staged).

The writer names a staged batch by the epoch that owns the snapshot path *when it
stages*: a run that lost the path (a zombie, in the moments before it notices it is
fenced) stages under the new run's epoch. So before planning a checkpoint's commit the
participants check every batch of their epoch against the batches this run ran: a batch
this run did not run, or one staged after this run's progress of it (Spark reports a
batch's progress only after its sink commit), was staged by another run, and the
checkpoint fails with a :class:`~barriered.errors.SinkError` instead of committing it.

The same participants serve ``barriered-kafka`` sinks (their plans are published by
:mod:`barriered.sink.kafka.publisher`); at a run's start they also fence the Kafka sinks'
older producers (``init_transactions``) before finishing interrupted publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from barriered import wall_time
from barriered.errors import SinkError
from barriered.files.fileio import exists
from barriered.sink import commit_plan, committer, owner, rewind, staging
from barriered.sink.commit_plan import SinkCommit, SinkPlan
from barriered.sink.kafka import publisher
from barriered.sink.options import SinkSettings
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


class SinkParticipants:
    """The sinks of one run (epoch) on one snapshot path.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    epoch : int or None
        The run's epoch (None: a path without ownership, no sink).
    continues : bool, default False
        The run continues the previous one from Spark's checkpoint location (no
        ``restoreFrom``): what older runs staged below this run's first batch is carried
        into this run's first checkpoint (see :mod:`barriered.sink.commit_plan`).
    lineage : Lineage, optional
        The run was restored from another snapshot path: it may take over the output
        tables that path's sinks own (:mod:`barriered.sink.owner`).
    """

    def __init__(
        self,
        layout: SnapshotLayout,
        epoch: int | None,
        continues: bool = False,
        lineage: owner.Lineage | None = None,
    ) -> None:
        self.layout = layout
        self.epoch = epoch
        self.continues = continues
        self.lineage = lineage
        self._cuts: dict[int, tuple[int, list[str]]] = {}
        self._done: dict[int, list[SinkCommit]] = {}
        #: Batch id -> when this run's coordinator saw its progress (ms).
        self._ran: dict[int, int] = {}
        self.carry: dict[str, int] | None = None
        if continues and epoch is not None:
            firsts = {
                s: staging.staged_ids(layout, s, epoch) for s in staging.sink_ids(layout, epoch)
            }
            self.carry = {s: ids[0] for s, ids in firsts.items() if ids}

    def recover(
        self, committed: Mapping[int, tuple[int, Mapping[str, Any]]], restored: int | None
    ) -> None:
        """At the run's start: finish the sink commits of completed checkpoints a crash
        interrupted and, for a run restored from checkpoint ``restored`` of this path,
        take the sinks' tables back to its output (later checkpoints' output is produced
        again by this run; see :mod:`barriered.sink.rewind`).

        Raises
        ------
        SinkRewindError
            When a table was written by someone else after the restored checkpoint.
        """
        if self.epoch is not None:  # no transaction of an older run commits from now on
            publisher.fence(self.layout, self.epoch)
        committer.finish(
            self.layout,
            {c: v for c, v in committed.items() if restored is None or c <= restored},
            lambda cid, p: rewind.superseded(self.layout, cid, p),
            self.lineage,
            self.epoch,
        )
        if restored is not None:
            rewind.rewind(self.layout, restored, committed, self.epoch)

    def ended(self) -> None:
        """The run ended: close its Kafka sinks' clients (nothing is left to publish)."""
        publisher.close(self.layout.root)

    def ran(self, batch_id: int, at_ms: int | None = None) -> None:
        """This run ran ``batch_id`` (its progress arrived, after its sink commit)."""
        self._ran[batch_id] = wall_time.now_ms() if at_ms is None else at_ms

    def _rerun(self, batch_id: int) -> bool:
        """Whether ``batch_id`` is a batch a continuing run ran again from Spark's offset
        log before its first reported one: Spark plans no new offset for it, so its
        progress carries no report of the barriered source and never reaches this run's
        coordinator (a run refused in its first batch leaves that batch planned)."""
        return self.continues and bool(self._ran) and batch_id < min(self._ran)

    def _check_own(self, plans: list[SinkPlan]) -> None:
        """Refuse a plan holding a batch of this epoch another run staged."""
        for p in plans:
            for epoch, batch_id in p.batches:
                batch = staging.read(self.layout, p.sink_id, epoch, batch_id)
                if epoch != self.epoch or batch is None or self._rerun(batch_id):
                    continue
                seen = self._ran.get(batch_id)
                if seen is None or batch.staged_ms > seen:
                    when = (
                        "never ran"
                        if seen is None
                        else f"reported the batch's progress at {seen} ms"
                    )
                    raise SinkError(
                        f"sink {p.sink_id!r}: batch {batch_id} staged under epoch {epoch} "
                        f"at {batch.staged_ms} ms ({batch.file(self.layout)!r}) was not "
                        f"staged by this run (this run {when}): an older run that lost the "
                        f"snapshot path {self.layout.root!r} is still writing. Its output "
                        "is not committed; stop the older run, then restart this query "
                        "(restoreFrom=latest)"
                    )

    def on_cut(self, checkpoint_id: int, batch_id: int) -> list[str]:
        """Participants the coordinator must wait for at the cut in ``batch_id``."""
        if self.epoch is None:
            return []
        sinks = staging.sink_ids(self.layout, self.epoch)
        self._cuts[checkpoint_id] = (batch_id, sinks)
        return [committer.participant(s) for s in sinks]

    def staged(self, checkpoint_id: int) -> list[str]:
        """Participants of ``checkpoint_id`` whose cut batch is staged now."""
        if self.epoch is None or checkpoint_id not in self._cuts:
            return []
        batch_id, sinks = self._cuts[checkpoint_id]
        return [
            committer.participant(s)
            for s in sinks
            if exists(self.layout.staged_file(s, self.epoch, batch_id))
        ]

    def plans(self, checkpoint_id: int, cut_batch: int | None) -> list[SinkPlan]:
        """What checkpoint ``checkpoint_id`` commits to the sinks.

        Raises
        ------
        SinkError
            When a batch of this epoch in the plan was staged by another run.
        """
        if self.epoch is None or cut_batch is None:
            return []
        self._cuts.pop(checkpoint_id, None)
        plans = commit_plan.plan(self.layout, self.epoch, cut_batch, self.carry)
        self._check_own(plans)
        for p in plans:  # the checkpoint does not complete with output it cannot commit
            last = staging.read(self.layout, p.sink_id, *p.batches[-1])
            if last is not None and isinstance(last.settings, SinkSettings):
                committer.guard(self.layout.root, last.settings, last.schema, self.lineage)
        return plans

    def commit(self, checkpoint_id: int, plans: list[SinkPlan]) -> None:
        """Commit the staged output of completed ``checkpoint_id`` (see :mod:`committer`)."""
        self._done[checkpoint_id] = committer.commit(
            self.layout, checkpoint_id, plans, self.lineage, self.epoch
        )

    def sweep(self, min_age_ms: int) -> None:
        """Delete what older runs staged and no checkpoint of this run will commit."""
        if self.epoch is not None:
            committer.sweep(self.layout, self.epoch, min_age_ms, self.carry)

    def row(self, checkpoint_id: int) -> dict[str, Any]:
        """The ``_checkpoints`` columns of the sink commit of ``checkpoint_id``."""
        done = self._done.pop(checkpoint_id, [])
        self._cuts.pop(checkpoint_id, None)
        if not done:
            return {}
        versions = [d.version for d in done if d.version is not None]
        return {
            "sink_table_version": versions[0] if len(done) == 1 and versions else None,
            "sink_rows": sum(d.rows for d in done),
            "sink_bytes": sum(d.bytes for d in done),
        }
