"""Retention: keep the last ``retainedCheckpoints`` completed checkpoints, delete the rest.

A data file may only be deleted once no retained checkpoint can read it. Each table
version is a full snapshot, so a file added at version ``a`` and removed (by a Delta
remove action) at version ``r`` is read by exactly the versions ``a <= v < r``. The
committer records every file it removes, with ``r``, in ``_coordinator/tombstones.json``;
retention deletes a tombstoned file once every retained checkpoint's version of that
table is ``>= r``. Files that were never committed (an aborted checkpoint's) are deleted
with its acknowledgements. Nothing a retained checkpoint references is ever deleted.

In-flight records of a checkpoint that left the retention window are first removed from
the ``inflight`` table in one commit (so later versions no longer reference them), then
deleted by the same rule.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from barriered.statestore.acks import read_acks
from barriered.statestore.delta_tables import (
    INFLIGHT_PARTITIONS,
    commit_files,
    current_files,
    open_table,
)
from barriered.statestore.fileio import delete_file, delete_tree, join, read_json, write_json
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

STATE = "state"
INFLIGHT = "inflight"


@dataclass(frozen=True)
class Retained:
    """Where a completed checkpoint lives: its ``state`` and ``inflight`` versions."""

    checkpoint_id: int
    state_version: int
    inflight_version: int | None


def record_removed(layout: SnapshotLayout, table: str, version: int, paths: Iterable[str]) -> None:
    """Remember that ``paths`` of ``table`` stopped being read from ``version`` on."""
    new = [[version, p] for p in paths]
    if not new:
        return
    stones = read_json(layout.tombstones_file, default={}) or {}
    stones[table] = [*stones.get(table, []), *new]
    write_json(layout.tombstones_file, stones)


def _table_uri(layout: SnapshotLayout, table: str) -> str:
    return layout.state_table if table == STATE else layout.inflight_table


def drop_inflight(layout: SnapshotLayout, older_than: int) -> None:
    """Remove the in-flight records of checkpoints with id < ``older_than`` from the table."""
    table = open_table(layout.inflight_table, storage_options=layout.storage_options)
    if table is None:
        return
    ids = sorted(
        {
            int(pv)
            for f in current_files(table)
            if (pv := f["partition_values"].get("checkpoint_id")) is not None
            and int(pv) < older_than
        }
    )
    if not ids:
        return
    commit = commit_files(
        layout.inflight_table,
        pa.schema(table.schema().to_arrow()),
        INFLIGHT_PARTITIONS,
        None,
        (),
        [{"checkpoint_id": str(i)} for i in ids],
        metadata={"barriered.retention": f"in-flight records of checkpoints {ids}"},
        storage_options=layout.storage_options,
    )
    record_removed(layout, INFLIGHT, commit.version, commit.removed)
    log.info("retention: in-flight records of checkpoints %s removed from the table", ids)


def apply(layout: SnapshotLayout, retained: Sequence[Retained]) -> int:
    """Delete every tombstoned file no retained checkpoint reads; return how many.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    retained : sequence of Retained
        The completed checkpoints to keep (at least one).
    """
    if not retained:
        return 0
    drop_inflight(layout, min(r.checkpoint_id for r in retained))
    oldest: Mapping[str, int | None] = {
        STATE: min(r.state_version for r in retained),
        INFLIGHT: min(
            (r.inflight_version for r in retained if r.inflight_version is not None),
            default=None,
        ),
    }
    stones = read_json(layout.tombstones_file, default={}) or {}
    deleted = 0
    kept: dict[str, list[list[object]]] = {}
    for table, entries in stones.items():
        floor = oldest.get(table)
        keep = []
        for version, path in entries:
            if floor is None or int(version) <= floor:
                delete_file(join(_table_uri(layout, table), str(path)))
                deleted += 1
            else:
                keep.append([version, path])
        kept[table] = keep
    if deleted:
        write_json(layout.tombstones_file, kept)
        log.info(
            "retention: deleted %d file(s) no retained checkpoint (%s) reads",
            deleted,
            [r.checkpoint_id for r in retained],
        )
    return deleted


def discard(layout: SnapshotLayout, checkpoint_id: int, delete_data: bool) -> None:
    """Forget the acknowledgements of a finished checkpoint.

    Parameters
    ----------
    delete_data : bool
        Also delete the data files its participants wrote: only for a checkpoint that was
        aborted before any commit was attempted (its files were never committed).
    """
    if delete_data:
        for ack in read_acks(layout, checkpoint_id).values():
            table = STATE if ack.participant.startswith("state/") else INFLIGHT
            for f in ack.files:
                delete_file(join(_table_uri(layout, table), f.path))
    delete_tree(layout.acks_dir(checkpoint_id))
