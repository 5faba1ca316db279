"""Retention: keep the last ``retainedCheckpoints`` completed checkpoints, delete the rest.

A data file may only be deleted once no retained checkpoint can read it. Each table
version is a full snapshot, so a file added at version ``a`` and removed (by a Delta
remove action) at version ``r`` is read by exactly the versions ``a <= v < r``. The
committer records every file it removes, with ``r``, in ``_coordinator/tombstones.json``;
retention deletes a tombstoned file once every retained checkpoint's version of that
table is ``>= r``. Files that were never committed (an aborted checkpoint's) are deleted
with its acknowledgements, but for keyed state files: a partition's live state reads
them and commits them with a later checkpoint. Nothing a retained checkpoint references
is ever deleted.

In-flight records of a checkpoint that left the retention window are first removed from
the ``inflight`` table in one commit (so later versions no longer reference them), then
deleted by the same rule. Files a compaction of ``_checkpoints`` replaced are tombstoned
too; no retained checkpoint reads an old version of that table.

The store tables of Spark's operators (``operators/<op>-<store>``, written by the JVM
provider) follow the same rule: their commits tombstone the files they replace under the
table name ``operators/<op>-<store>``, and a retained checkpoint reads the store
versions its ``state`` commit recorded (:attr:`Retained.stores`). A store no retained
checkpoint holds any more keeps only its current version's files.

Grace period (``retention.minAge``): a tombstoned file becomes *unread* when the last
retained version that read it leaves the window; retention stamps it then and deletes it
only ``minAge`` later, so a reader that loaded an older version a moment ago can still
read its files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from barriered import wall_time
from barriered.files.fileio import (
    delete_file,
    delete_tree,
    join,
    read_bytes,
    read_json,
    write_json,
)
from barriered.statestore.acks import Ack, read_acks
from barriered.statestore.delta_tables import (
    INFLIGHT_PARTITIONS,
    commit_files,
    current_files,
    open_table,
)
from barriered.statestore.dv_files import VECTORS_READ_KEY, is_vector_file
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

STATE = "state"
INFLIGHT = "inflight"
CHECKPOINTS = "_checkpoints"
#: Table name prefix of a Spark operator's store table (``operators/<op>-<store>``).
OPERATORS = "operators/"


@dataclass(frozen=True)
class Retained:
    """Where a completed checkpoint lives: its ``state`` and ``inflight`` versions, and
    the version of each Spark operator store table it holds (None: the store was empty)."""

    checkpoint_id: int
    state_version: int
    inflight_version: int | None
    stores: Mapping[str, int | None] = field(default_factory=dict)


def retained_of(
    history: Iterable[Mapping[str, Any]], stores: Mapping[int, Mapping[str, Mapping[str, object]]]
) -> dict[int, Retained]:
    """The completed checkpoints of ``history`` (``_checkpoints`` rows) that hold state, by
    id, with the versions of the store tables each holds (``stores``, by id)."""
    retained = {}
    for row in history:
        if row["status"] != "completed" or row.get("state_table_version") is None:
            continue
        cid, inflight = int(row["checkpoint_id"]), row.get("inflight_table_version")
        retained[cid] = Retained(
            cid,
            int(row["state_table_version"]),
            None if inflight is None else int(inflight),
            store_versions(stores.get(cid, {})),
        )
    return retained


def store_versions(stores: Mapping[str, Mapping[str, object]]) -> dict[str, int | None]:
    """Per store, its table version, from a checkpoint's ``barriered.operators`` value."""
    return {
        name: None if store.get("version") is None else int(str(store["version"]))
        for name, store in stores.items()
    }


def record_removed(layout: SnapshotLayout, table: str, version: int, paths: Iterable[str]) -> None:
    """Remember that ``paths`` of ``table`` stopped being read from ``version`` on."""
    new = [[version, p] for p in paths]
    if not new:
        return
    stones = read_json(layout.tombstones_file, default={}) or {}
    stones[table] = [*stones.get(table, []), *new]
    write_json(layout.tombstones_file, stones)


def table_uri(layout: SnapshotLayout, table: str) -> str:
    """The Delta table named ``table`` (``state``, ``inflight``, ``_checkpoints``,
    ``operators/<op>-<store>``)."""
    if table.startswith(OPERATORS):
        return layout.operator_table(table.removeprefix(OPERATORS))
    return {
        STATE: layout.state_table,
        INFLIGHT: layout.inflight_table,
        CHECKPOINTS: layout.checkpoints_table,
    }[table]


def ack_table(ack: Ack) -> str:
    """The table whose files ``ack`` lists (its files' paths are relative to it)."""
    if ack.participant.startswith("state/"):
        return STATE
    if ack.participant.startswith("operator/"):
        return OPERATORS + str(ack.extra["operator"])
    return INFLIGHT


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


def pinned_vectors(layout: SnapshotLayout, retained: Sequence[Retained]) -> set[str]:
    """The deletion vector files of the ``state`` table that the keyed partitions read
    at a retained checkpoint beyond what its version references (a restored file's
    vector, :mod:`barriered.statestore.dv_files`): listed in the checkpoint's commit."""
    pinned: set[str] = set()
    for r in retained:
        raw = read_bytes(join(layout.state_table, "_delta_log", f"{r.state_version:020d}.json"))
        for line in (raw or b"").decode("utf-8", "replace").splitlines():
            if '"commitInfo"' not in line:
                continue
            try:
                listed = json.loads(line)["commitInfo"].get(VECTORS_READ_KEY)
                pinned.update(json.loads(listed) if listed else ())
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning(
                    "retention: the commit of checkpoint %d (state version %d) is not "
                    "readable JSON; its pinned deletion vector files are not known",
                    r.checkpoint_id,
                    r.state_version,
                )
            break
    return pinned


def floors(retained: Sequence[Retained]) -> dict[str, int | None]:
    """The oldest version of each table a retained checkpoint reads (None: no version of
    that table is read by a retained checkpoint). Store tables appear once a retained
    checkpoint holds them."""
    out: dict[str, int | None] = {
        STATE: min(r.state_version for r in retained),
        INFLIGHT: min(
            (r.inflight_version for r in retained if r.inflight_version is not None),
            default=None,
        ),
        CHECKPOINTS: None,
    }
    for name in sorted({n for r in retained for n in r.stores}):
        versions = [v for r in retained if (v := r.stores.get(name)) is not None]
        out[OPERATORS + name] = min(versions, default=None)
    return out


def apply(
    layout: SnapshotLayout,
    retained: Sequence[Retained],
    min_age_ms: int = 0,
    now_ms: int | None = None,
) -> int:
    """Delete every tombstoned file no retained checkpoint has read for ``min_age_ms``;
        return how many.

        Parameters
        ----------
        layout : SnapshotLayout
            The snapshot path.
        retained : sequence of Retained
            The completed checkpoints to keep (at least one).
        min_age_ms : int, default 0
            The store tables of Spark's operators (``operators/<op>-<store>``, written by the JVM
    provider) follow the same rule: their commits tombstone the files they replace under the
    table name ``operators/<op>-<store>``, and a retained checkpoint reads the store
    versions its ``state`` commit recorded (:attr:`Retained.stores`). A store no retained
    checkpoint holds any more keeps only its current version's files.

    Grace period (``retention.minAge``): how long a file stays after it became unread.
        now_ms : int, optional
            The current time (epoch ms); the wall clock by default.
    """
    if not retained:
        return 0
    now = wall_time.now_ms() if now_ms is None else now_ms
    drop_inflight(layout, min(r.checkpoint_id for r in retained))
    oldest = floors(retained)
    stones = read_json(layout.tombstones_file, default={}) or {}
    deleted = stamped = 0
    kept: dict[str, list[list[object]]] = {}
    pinned: set[str] | None = None  # read once a vector file could go
    for table, entries in stones.items():
        floor = oldest.get(table)
        keep: list[list[object]] = []
        for entry in entries:
            version, path = int(entry[0]), str(entry[1])
            if floor is not None and version > floor:
                keep.append(entry)  # a retained checkpoint still reads it
                continue
            if table == STATE and is_vector_file(path):
                pinned = pinned_vectors(layout, retained) if pinned is None else pinned
                if path in pinned:  # a partition's restored file still reads it
                    keep.append(entry[:2])
                    continue
            unread_since = int(entry[2]) if len(entry) > 2 else now
            if now - unread_since >= min_age_ms:
                delete_file(join(table_uri(layout, table), path))
                deleted += 1
            else:
                stamped += len(entry) == 2
                keep.append([version, path, unread_since])
        kept[table] = keep
    if deleted or stamped:
        write_json(layout.tombstones_file, kept)
    if deleted:
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
        aborted before any commit was attempted (its files were never committed). A keyed
        partition's files stay: its live state reads them, and it reports them again at
        its next cut (:mod:`barriered.statestore.live_state`).
    """
    if delete_data:
        for ack in read_acks(layout, checkpoint_id).values():
            if ack_table(ack) == STATE:
                continue
            for f in ack.files:
                delete_file(join(table_uri(layout, ack_table(ack)), f.path))
    delete_tree(layout.acks_dir(checkpoint_id))
