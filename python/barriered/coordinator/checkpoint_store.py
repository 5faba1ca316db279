"""The one committer of a run's checkpoints: its store (Flink's ``CompletedCheckpointStore``).

Every write that makes a fully acknowledged checkpoint durable, and everything after,
happens here and in this order:

1. :meth:`CheckpointStore.commit`: the checkpoint's tables (in-flight records, Spark operator
   stores, then the ``state`` table, whose commit is the completion point and carries the
   sinks' plans; :mod:`barriered.statestore.checkpoint_commit`), then the sinks' output
   (:mod:`barriered.sink.participant`);
2. :meth:`CheckpointStore.record`: its row in ``_checkpoints`` (an aborted checkpoint's files
   are discarded);
3. :meth:`CheckpointStore.completed`: retention of older checkpoints, the sinks' sweep, every
   ``retention.maintenanceInterval`` completions the maintenance, and the positions the
   coordinator then tells the source (the completion, what the upstream may release).

A crash between two steps leaves what a restore repairs: a completed checkpoint whose
sink commit is missing is committed by the next run (:meth:`SinkParticipants.recover`).
Every step is fenced by the run's epoch (a newer run took the path: nothing more).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from barriered import crash_points
from barriered.config import BarrieredConf
from barriered.control.model import CompletedCheckpoint
from barriered.control.stats import CheckpointStats
from barriered.errors import BarrieredError, CheckpointFailureLimitExceeded
from barriered.monitoring import hub as monitoring_hub
from barriered.sink import commit_plan
from barriered.sink import owner as sink_owner
from barriered.sink.participant import SinkParticipants
from barriered.statestore import checkpoints_table, maintenance, operators, ownership, retention
from barriered.statestore.acks import Ack
from barriered.statestore.checkpoint_commit import (
    CheckpointCommit,
    commit_checkpoint,
    upstream_start,
)
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout

__all__ = ["CheckpointStore"]

log = logging.getLogger(__name__)


class CheckpointStore:
    """Commits one run's completed checkpoints, records every finished one, and keeps the
    retained ones.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    conf : BarrieredConf
        The run's settings (retention).
    epoch : int or None
        The run's epoch; None only for a path that predates ownership.
    restored : mapping or None
        What the run was restored from (the source offset's ``restore``).
    history : sequence of dict
        The rows of ``_checkpoints`` when the run started.
    fence : callable
        Refuses (raises :class:`~barriered.errors.FencedError`) what it is given to do
        once a newer run took the path over.
    fail : callable
        Fails the query with an error (a crash point, a failed sink commit).
    """

    def __init__(
        self,
        layout: SnapshotLayout,
        conf: BarrieredConf,
        epoch: int | None,
        restored: Mapping[str, Any] | None,
        history: Sequence[Mapping[str, Any]],
        fence: Callable[[str], None],
        fail: Callable[[BarrieredError], None],
    ) -> None:
        self.layout, self._conf, self._epoch = layout, conf, epoch
        self._fence, self._fail = fence, fail
        #: The table commits of this run's checkpoints, until recorded (retention).
        self._commits: dict[int, CheckpointCommit] = {}
        self._completions = 0  # since this run started: maintenance every N
        committed = committed_checkpoints(layout)
        #: The checkpoints committed when the run started.
        self.committed = frozenset(committed)
        #: Per completed checkpoint, where a restore from it reads the upstream from.
        self._needs_upstream_from: dict[int, tuple[int, ...]] = {
            cid: upstream_start(
                json.loads(meta.get("barriered.barrier") or "{}"),
                json.loads(meta.get("barriered.inflight") or "{}"),
                by_value=meta.get("barriered.inflight_version") is not None,
            )
            for cid, (_, meta) in committed.items()
        }
        owner = None if epoch is None else ownership.owner_of(layout, epoch)
        continues = owner is not None and owner.restore_from is None
        #: The run's sinks (their participants, commits and rows).
        self.sinks = SinkParticipants(
            layout, epoch, continues, sink_owner.lineage(layout.root, restored)
        )
        restored_id = None  # a restore from this path: the sinks' output goes back too
        if owner is not None and owner.restore_from and (restored or {}).get("from") == layout.root:
            restored_id = int((restored or {})["checkpoint_id"])
        if epoch is not None:  # output of completed checkpoints a crash left uncommitted
            fence("finishing the sink commits of completed checkpoints")
            self.sinks.recover(committed, restored_id)
        stores = {cid: operators.stores_of(meta) for cid, (_, meta) in committed.items()}
        self._retained = retention.retained_of(history, stores)
        monitoring_hub.started(conf, layout, restored, owner)  # metrics, traces, page

    def commit(self, done: CompletedCheckpoint) -> int:
        """Commit ``done``'s tables, then its sinks' output; return the ``state`` table's
        version (the completion point)."""
        cid = done.checkpoint_id
        crash_points.hit(self.layout, crash_points.BEFORE_COMMIT, cid, self._fail)
        self._fence(f"committing checkpoint {cid}")
        acks: list[Ack] = [a.payload for a in done.acks.values() if isinstance(a.payload, Ack)]
        sink_plans = self.sinks.plans(cid, done.cut_batch_id)
        commit = commit_checkpoint(
            self.layout,
            done,
            acks,
            list(self.layout.registrations().values()),  # the state table's columns
            self._epoch,
            {commit_plan.PLAN_KEY: commit_plan.plans_json(sink_plans)},
        )
        self._commits[cid] = commit
        if self._epoch is not None and ownership.newer_epoch_exists(self.layout, self._epoch):
            # The takeover came between the check above and this commit.
            self._fence(
                f"checkpoint {cid} reached state table version {commit.state_version} while "
                "this run was being fenced; recording it"
            )
        retention.record_removed(self.layout, retention.STATE, commit.state_version, commit.removed)
        self._needs_upstream_from[cid] = upstream_start(
            {str(k): v for k, v in done.positions.items()},
            commit.inflight_ranges,
            by_value=commit.inflight_version is not None,
        )
        crash_points.hit(self.layout, crash_points.AFTER_COMMIT, cid, self._fail)
        try:
            self.sinks.commit(cid, sink_plans)
        except (BarrieredError, OSError) as exc:  # completed: the next run commits it
            self._fail(
                CheckpointFailureLimitExceeded(
                    f"the sink commit of completed checkpoint {cid} failed ({exc}); restart "
                    "the query (restoreFrom=latest) to finish it"
                )
            )
            raise
        crash_points.hit(self.layout, crash_points.AFTER_SINK_COMMIT, cid, self._fail)
        return commit.state_version

    def record(self, stats: CheckpointStats, barrier_batch: int | None) -> None:
        """Append a finished checkpoint's row to ``_checkpoints`` (``barrier_batch``: the
        batch that fixed its barriers); discard an aborted one's files."""
        self._fence(f"recording checkpoint {stats.checkpoint_id} in _checkpoints")
        row = stats.to_row()
        commit = self._commits.get(stats.checkpoint_id)
        row["inflight_table_version"] = commit.inflight_version if commit else None
        row["barrier_batch_id"] = barrier_batch
        row.update(self.sinks.row(stats.checkpoint_id))
        checkpoints_table.append(self.layout, row)
        monitoring_hub.recorded(self._conf, self.layout, row)  # metrics, traces, page
        if stats.status == "aborted":
            log.warning("checkpoint %d aborted: %s", stats.checkpoint_id, stats.failure_reason)
            self._commits.pop(stats.checkpoint_id, None)
            reason = stats.failure_reason or ""
            retention.discard(
                self.layout, stats.checkpoint_id, delete_data=not reason.startswith("commit")
            )

    def completed(
        self,
        done: CompletedCheckpoint,
        unfinished: Callable[[], tuple[int, Collection[int]]],
    ) -> tuple[list[int] | None, list[int]]:
        """Retention after ``done`` completed (and, every ``maintenanceInterval``
        completions, the maintenance, below the first id ``unfinished()`` names, sparing
        its pending ids).

        Returns
        -------
        release : list of int or None
            Per channel, the position before which no retained checkpoint needs the
            upstream's records (None: nothing retained).
        positions : list of int
            ``done``'s barrier positions, per channel.
        """
        self._fence(f"retention after checkpoint {done.checkpoint_id}")
        commit = self._commits.pop(done.checkpoint_id, None)
        if done.state_table_version is not None:
            self._retained[done.checkpoint_id] = retention.Retained(
                done.checkpoint_id,
                done.state_table_version,
                commit.inflight_version if commit else None,
                commit.stores if commit else {},
            )
        conf = self._conf
        keep = sorted(self._retained)[-conf.retained_checkpoints :]
        self._retained = {cid: self._retained[cid] for cid in keep}
        retained = list(self._retained.values())
        retention.apply(self.layout, retained, conf.retention_min_age_ms)
        retention.discard(self.layout, done.checkpoint_id, delete_data=False)
        self.sinks.sweep(conf.retention_min_age_ms)
        self._completions += 1
        if self._completions % conf.retention_maintenance_interval == 0:
            finished_below, pending = unfinished()
            maintenance.run(
                self.layout,
                retained,
                conf.retention_history_size,
                conf.retention_min_age_ms,
                finished_below=finished_below,
                pending=pending,
                settled_before_ms=done.trigger_timestamp_ms,
            )
        starts = [self._needs_upstream_from[c] for c in keep if c in self._needs_upstream_from]
        # A checkpoint taken before channels joined (new Kafka partitions) reads them
        # from their start when restored: it needs all of them (0).
        width = max((len(s) for s in starts), default=0)
        padded = [[*s, *[0] * (width - len(s))] for s in starts]
        release = [min(column) for column in zip(*padded, strict=True)] if starts else None
        return release, [done.positions[c] for c in sorted(done.positions)]
