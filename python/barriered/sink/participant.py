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
    """The sinks of one run (epoch) on one snapshot path."""

    def __init__(self, layout: SnapshotLayout, epoch: int | None) -> None:
        self.layout = layout
        self.epoch = epoch
        self._cuts: dict[int, tuple[int, list[str]]] = {}
        self._done: dict[int, list[SinkCommit]] = {}

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
        return committer.plan(self.layout, self.epoch, cut_batch)

    def commit(self, checkpoint_id: int, plans: list[SinkPlan]) -> None:
        """Commit the staged output of completed ``checkpoint_id`` (see :mod:`committer`)."""
        self._done[checkpoint_id] = committer.commit(self.layout, checkpoint_id, plans)

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
