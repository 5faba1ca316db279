"""What a completed checkpoint commits to each sink: its *plan*, and what a commit did.

The coordinator plans checkpoint ``n`` (:func:`plan`: the batches each sink staged up to
the cut batch) while committing it; the plans go into the ``state`` table's commit
metadata (:data:`PLAN_KEY`, :func:`plans_json`), the completion point, and a later run
reads them back (:func:`plans_from_metadata`) to finish or rewind the sinks' commits.
:mod:`barriered.sink.committer` commits a ``barriered-delta`` plan,
:mod:`barriered.sink.kafka.publisher` publishes a ``barriered-kafka`` one.

A run that *continues* an older one (a restart from Spark's own checkpoint location, no
``restoreFrom``) does not re-run the older run's batches below its first one: those
still staged are *carried* into its first checkpoint's plan (:func:`carried`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from barriered.sink import staging
from barriered.statestore.layout import SnapshotLayout

#: Key of the plan in the ``state`` table's commit metadata.
PLAN_KEY = "barriered.sink"


@dataclass(frozen=True)
class SinkPlan:
    """What checkpoint ``n`` commits to one sink: staged ``(epoch, batch)`` in order.

    ``epoch`` is the run that planned the commit (its commit metadata carries it);
    ``kind`` the sink (``delta``: ``path`` is the output table; ``kafka``: the folder of
    its staged records, published by :mod:`barriered.sink.kafka.publisher`).
    """

    sink_id: str
    path: str
    epoch: int
    batches: tuple[tuple[int, int], ...]
    kind: str = staging.DELTA

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (in the state commit's metadata)."""
        extra = {} if self.kind == staging.DELTA else {"kind": self.kind}
        return {
            "path": self.path,
            "epoch": self.epoch,
            "batches": [list(b) for b in self.batches],
            **extra,
        }


@dataclass(frozen=True)
class SinkCommit:
    """What a sink commit did: the output table's version and what it added."""

    sink_id: str
    version: int | None
    rows: int = 0
    bytes: int = 0


def carried(layout: SnapshotLayout, sink_id: str, epoch: int, below: int) -> list[tuple[int, int]]:
    """Batches older runs of ``sink_id`` staged below batch ``below`` (still recorded)."""
    return [
        (old, b)
        for old in staging.epochs(layout, sink_id)
        if old < epoch
        for b in staging.staged_ids(layout, sink_id, old)
        if b < below
    ]


def plan(
    layout: SnapshotLayout, epoch: int, cut_batch: int, carry: Mapping[str, int] | None = None
) -> list[SinkPlan]:
    """The batches the run of ``epoch`` staged up to ``cut_batch``, per sink; with
    ``carry`` (sink -> this run's first batch), first those older runs staged below it."""
    plans = []
    for sink_id in staging.sink_ids(layout, epoch):
        below = (carry or {}).get(sink_id)
        batches = [] if below is None else carried(layout, sink_id, epoch, below)
        batches += [
            (epoch, b) for b in staging.staged_ids(layout, sink_id, epoch) if b <= cut_batch
        ]
        last = staging.read(layout, sink_id, *batches[-1]) if batches else None
        if last is not None:
            kind = staging.kind(last.settings)
            plans.append(SinkPlan(sink_id, last.settings.path, epoch, tuple(batches), kind))
    return plans


def plans_json(plans: Sequence[SinkPlan]) -> str:
    """The plans as the JSON of the commit metadata."""
    return json.dumps({p.sink_id: p.to_dict() for p in plans}, sort_keys=True)


def plans_from_metadata(metadata: Mapping[str, Any]) -> list[SinkPlan]:
    """The plans recorded in a state commit's metadata (none before this sink existed)."""
    raw = json.loads(metadata.get(PLAN_KEY) or "{}")
    return [
        SinkPlan(
            sid,
            str(p["path"]),
            int(p["epoch"]),
            tuple((int(e), int(b)) for e, b in p["batches"]),
            str(p.get("kind", staging.DELTA)),
        )
        for sid, p in raw.items()
    ]
