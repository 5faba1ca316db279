"""The sink as a participant of checkpoints, for one run's coordinator.

At the cut of checkpoint ``n`` the coordinator expects one participant per sink that
staged a batch in this run (``sink/<sink>``); it is acknowledged once the cut batch is
staged. Spark runs the sink's driver-side ``commit`` of a batch before it reports the
batch's progress, which is where the coordinator learns of the cut, so the
acknowledgement is normally there at once; waiting for it makes the order explicit (a
checkpoint never completes without the output of its cut batch staged).
"""

from __future__ import annotations

import logging
from typing import Any

from barriered.sink import committer, staging
from barriered.sink.committer import SinkCommit, SinkPlan
from barriered.statestore.fileio import exists
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
        into this run's first checkpoint (see :mod:`barriered.sink.committer`).
    """

    def __init__(self, layout: SnapshotLayout, epoch: int | None, continues: bool = False) -> None:
        self.layout = layout
        self.epoch = epoch
        self._cuts: dict[int, tuple[int, list[str]]] = {}
        self._done: dict[int, list[SinkCommit]] = {}
        self.carry: dict[str, int] | None = None
        if continues and epoch is not None:
            firsts = {
                s: staging.staged_ids(layout, s, epoch) for s in staging.sink_ids(layout, epoch)
            }
            self.carry = {s: ids[0] for s, ids in firsts.items() if ids}

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
        """What checkpoint ``checkpoint_id`` commits to the sinks."""
        if self.epoch is None or cut_batch is None:
            return []
        self._cuts.pop(checkpoint_id, None)
        return committer.plan(self.layout, self.epoch, cut_batch, self.carry)

    def commit(self, checkpoint_id: int, plans: list[SinkPlan]) -> None:
        """Commit the staged output of completed ``checkpoint_id`` (see :mod:`committer`)."""
        self._done[checkpoint_id] = committer.commit(self.layout, checkpoint_id, plans)

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
