"""Savepoints: a self-contained copy of one completed checkpoint.

A savepoint folder has the layout of a snapshot path holding exactly one checkpoint:
the ``state`` table (one commit, carrying the same barrier positions and in-flight
ranges as the original), the ``inflight`` table when the checkpoint has in-flight
records, its ``_checkpoints`` row, the configuration, the operator registrations and
the upstream's manifest, plus ``_savepoint.json``. Data files are copied, not
referenced, so the savepoint survives retention (and deletion) of the original snapshot
path and can be moved to another machine. Restore it with
``.option("restoreFrom", "<savepoint folder>")`` into a new snapshot path.

The ``state`` files holding rows of the checkpoint are copied with their deletion
vectors (a file none of whose rows the checkpoint holds is left out). A snapshot path of
the earlier layout (one file per key group, the key group a partition column) is
converted on the way: each key group's file is written again with its ``key_group``
column, so the savepoint has this version's layout (``barriered savepoint`` is the
migration of such a path).

Files are written in dependency order and ``_savepoint.json`` last; the target must not
exist or be empty, and nothing is ever overwritten.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from barriered import wall_time
from barriered.errors import SnapshotStoreError
from barriered.files.fileio import (
    copy_file,
    copy_tree,
    exists,
    filesystem,
    join,
    list_names,
    read_json,
    write_json,
)
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.acks import DataFile, write_data_file
from barriered.statestore.delta_tables import INFLIGHT_PARTITIONS, commit_files, open_table
from barriered.statestore.dv_files import VECTORS_READ_KEY, vector_rows
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.regroup import Regroup
from barriered.statestore.restore_point import (
    TableFile,
    resolve,
)
from barriered.statestore.state_commit import commit_copies
from barriered.statestore.state_files import CHECKPOINT_ID, KEY_GROUP
from barriered.statestore.state_schema import table_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Savepoint:
    """A written savepoint.

    Attributes
    ----------
    path : str
        The savepoint folder (pass it to ``restoreFrom``).
    checkpoint_id : int
        The checkpoint it holds.
    origin : str
        The snapshot path it was copied from.
    state_files, state_bytes, inflight_rows : int
        What it holds.
    """

    path: str
    checkpoint_id: int
    origin: str
    state_files: int
    state_bytes: int
    inflight_rows: int


def _copy(files: list[TableFile], source: str, target: str) -> list[DataFile]:
    now = wall_time.now_ms()
    out = []
    for f in files:
        copy_file(join(source, f.path), join(target, f.path))
        out.append(DataFile(f.path, f.size, f.rows, dict(f.partition_values), now, f.stats))
    return out


def _deleted(f: TableFile, table: str) -> np.ndarray:
    """The rows of ``f`` its version does not hold: its deletion vector (inline or in a
    file of ``table``), written again by the savepoint's commit."""
    if f.dv is None:
        return np.empty(0, np.int64)
    return vector_rows(f.dv, table, f"data file {f.path!r} of the checkpoint")


def _copy_state(
    files: list[TableFile], source: str, target: str
) -> list[tuple[DataFile, np.ndarray]]:
    """Copy the state files holding rows of the version, each with the rows it does not
    hold; convert a file of the earlier layout (its key group in the path)."""
    out = []
    for f in files:
        if f.live_rows <= 0:
            continue
        group = f.partition_values.get(KEY_GROUP)
        if group is None:
            (copied,) = _copy([f], source, target)
            out.append((copied, _deleted(f, source)))
            continue
        fs, path = filesystem(join(source, f.path))
        with fs.open_input_file(path) as handle:
            rows = pq.read_table(handle)
        groups = pa.array(np.full(rows.num_rows, int(group), np.int32))
        index = rows.schema.get_field_index(CHECKPOINT_ID)
        rows = rows.add_column(index if index >= 0 else rows.num_columns, KEY_GROUP, groups)
        operator: dict[str, str | None] = {"operator": str(f.partition_values.get("operator"))}
        written = write_data_file(target, operator, f"key-group-{group}", rows)
        bounds = {KEY_GROUP: int(group)}
        stats = {"numRecords": rows.num_rows, "minValues": bounds, "maxValues": bounds}
        converted = DataFile(
            written.path,
            written.size,
            written.rows,
            operator,
            written.modification_time,
            json.dumps(stats),
        )
        out.append((converted, _deleted(f, source)))
    return out


class Rewrite(Protocol):
    """One operator's state replaced in a savepoint (a transform,
    :mod:`barriered.state_processor`): its new registration and its new files."""

    @property
    def operator(self) -> str:
        """The operator whose state is replaced."""
        ...

    @property
    def registration(self) -> dict[str, Any]:
        """Its new registration."""
        ...

    def write(self, out: SnapshotLayout, checkpoint_id: int) -> list[DataFile]:
        """Write the operator's new state files into ``out``'s ``state`` table."""
        ...


def export(
    origin: SnapshotLayout,
    checkpoint_id: int | None,
    target: str,
    rewrite: Rewrite | None = None,
    regroup: Regroup | None = None,
) -> Savepoint:
    """Copy a completed checkpoint of ``origin`` to the savepoint folder ``target``.

    Parameters
    ----------
    origin : SnapshotLayout
        The snapshot path.
    checkpoint_id : int or None
        The checkpoint (None: the latest completed one).
    target : str
        A folder that does not exist yet (or is empty).
    rewrite : Rewrite, optional
        Replace one operator's registration and state files (everything else is
        copied as it is).
    regroup : Regroup, optional
        Write every key group again for another ``maxParallelism`` (the keyed state, the
        provider's stores, the configuration and the registrations); not with
        ``rewrite``.

    Raises
    ------
    RestoreError
        When the checkpoint is not completed or its files are missing or corrupt.
    SnapshotStoreError
        When ``target`` is not empty or cannot be written.
    """
    point = resolve(origin, "latest" if checkpoint_id is None else str(checkpoint_id), None)
    source_table = open_table(origin.state_table, point.state_version, origin.storage_options)
    assert source_table is not None  # resolve() found the checkpoint in it
    state_schema = pa.schema(source_table.schema().to_arrow())
    registrations = origin.registrations()
    if rewrite is not None and regroup is not None:
        raise ValueError("a savepoint is transformed or regrouped, not both at once")
    if regroup is not None:
        registrations = {n: regroup.registration(r) for n, r in registrations.items()}
    if rewrite is not None:
        registrations[rewrite.operator] = rewrite.registration
        state_schema = table_schema(registrations.values())
    point.check_files()
    out = SnapshotLayout.at(target, origin.storage_options)
    if exists(out.root) and (list_names(out.root) or list_names(out.root, folders=True)):
        raise SnapshotStoreError(
            f"savepoint folder {out.root!r} is not empty; nothing was written. Choose a new "
            "folder: savepoints are never overwritten"
        )
    cid = point.checkpoint_id
    if regroup is None:
        copy_file(origin.config_file, out.config_file)
    else:
        write_json(out.config_file, regroup.config(read_json(origin.config_file, default={})))
    for name, registration in registrations.items():
        write_json(out.operator_file(name), registration)
    copy_tree(origin.source_dir, out.source_dir)
    metadata = dict(point.metadata)
    metadata.pop("barriered.checkpoint_id", None)
    metadata.pop(VECTORS_READ_KEY, None)  # the origin's files its partitions read
    inflight = _copy(point.inflight_files(), origin.inflight_table, out.inflight_table)
    inflight_version = None
    if inflight:
        fs, root = filesystem(join(out.inflight_table, inflight[0].path))
        with fs.open_input_file(root) as f:
            schema = pq.read_schema(f).append(pa.field("checkpoint_id", pa.int64()))
        inflight_version = commit_files(
            out.inflight_table, schema, INFLIGHT_PARTITIONS, cid, inflight,
            storage_options=out.storage_options,
        ).version  # fmt: skip
    metadata["barriered.inflight_version"] = inflight_version
    if regroup is None:
        stores = operators.copy_stores(origin, point.metadata, out, cid)
    else:
        stores = regroup.stores(origin, point.metadata, out, cid)
    if stores is not None:
        metadata[operators.VERSIONS_KEY] = stores
    kept = [
        f
        for f in point.state_files()
        if rewrite is None or f.partition_values.get("operator") != rewrite.operator
    ]
    if regroup is None:
        copies = _copy_state(kept, origin.state_table, out.state_table)
    else:
        copies = regroup.state(point, out)
    if rewrite is not None:
        copies.extend((f, np.empty(0, np.int64)) for f in rewrite.write(out, cid))
    state = [f for f, _ in copies]
    state_version = commit_copies(out, cid, state_schema, copies, metadata).version
    row = checkpoints_table.row_of(checkpoints_table.read_rows(origin), cid) or {
        "checkpoint_id": cid,
        "kind": point.kind,
    }
    row.update(
        status="completed",
        state_table_version=state_version,
        inflight_table_version=inflight_version,
    )
    checkpoints_table.append(out, row)
    saved = Savepoint(
        path=out.root,
        checkpoint_id=cid,
        origin=origin.root,
        state_files=len(state),
        state_bytes=sum(f.size for f in state),
        inflight_rows=sum(f.rows for f in inflight),
    )
    write_json(
        out.savepoint_file,
        {
            "checkpoint_id": cid,
            "kind": point.kind,
            "mode": point.mode,
            "origin": origin.root,
            "created_ms": wall_time.now_ms(),
            "state_files": saved.state_files,
            "state_bytes": saved.state_bytes,
            **({} if rewrite is None else {"transformed": rewrite.operator}),
            **({} if regroup is None else regroup.marker(origin)),
        },
    )
    log.info(
        "savepoint of checkpoint %d written to %s (%d state files, %d bytes)",
        cid,
        out.root,
        saved.state_files,
        saved.state_bytes,
    )
    return saved
