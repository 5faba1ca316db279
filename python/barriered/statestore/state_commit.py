"""The ``state`` table's commit of a checkpoint: the keyed operators' new files and the
rows they replace, with the checkpoint's metadata (its restore point).

Each partition of a keyed operator acknowledges a cut with the files it wrote that no
completed checkpoint holds yet (:mod:`barriered.statestore.live_state`). Their footers
say what the ``state`` table must no longer hold once they are in it:

* ``barriered.hidden``: rows of the file itself (deleted keys' markers);
* ``barriered.deletes``: rows of older files, by path: the previous state of each key
  the file changes;
* ``barriered.replaces``: key groups whose every older row the file replaces (it holds
  their whole state: the first cut after a restore, a compaction). Older rows are those
  of the table's current files and of the commit's files written at an earlier cut;
* ``barriered.absorbs``: older files merged into the file (a compaction of the newest
  files), whose rows of the partition's key groups ``barriered.deletes`` lists: no live
  state reads them any more, so once no row of them is held they leave the table.

:func:`state_changes` turns them into the new files and the deleted rows per file, and
:func:`commit_state_table` writes them as one Delta commit
(:func:`~barriered.statestore.state_log.commit_state`), creating the table (partitioned by
``operator``, deletion vectors enabled) or adding a new operator's columns first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from barriered.files.fileio import filesystem, join
from barriered.statestore.acks import DataFile
from barriered.statestore.deletion_vectors import union
from barriered.statestore.delta_tables import (
    STATE_PARTITIONS,
    add_columns,
    committed_version,
    open_table,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_files import KEY_GROUP, FileNotes
from barriered.statestore.state_log import (
    STATE_CONFIGURATION,
    LiveFile,
    NewFile,
    StateCommit,
    StateFiles,
    commit_state,
)
from barriered.statestore.state_schema import TYPED_DESCRIPTION

log = logging.getLogger(__name__)


def _key_groups(uri: str, file: LiveFile | DataFile) -> np.ndarray:
    """The key group of every row of a committed state file."""
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        parquet = pq.ParquetFile(f)
        if KEY_GROUP in parquet.schema_arrow.names:
            column = parquet.read(columns=[KEY_GROUP]).column(KEY_GROUP)
            return np.asarray(column.to_numpy(zero_copy_only=False), np.int64)
        rows = parquet.metadata.num_rows
    group = file.partition_values.get(KEY_GROUP)  # an earlier layout: one per file
    return np.full(rows, -1 if group is None else int(group), np.int64)


def _replaced_rows(table_uri: str, file: LiveFile | DataFile, groups: set[int]) -> np.ndarray:
    """The rows of ``file`` in key groups ``groups`` (all of them without reading it
    when its key group bounds lie inside ``groups``)."""
    stats = json.loads(file.stats) if file.stats else {}
    lo = stats.get("minValues", {}).get(KEY_GROUP)
    hi = stats.get("maxValues", {}).get(KEY_GROUP)
    if lo is not None and hi is not None and file.rows >= 0:
        if all(g in groups for g in range(int(lo), int(hi) + 1)):
            return np.arange(file.rows, dtype=np.int64)
        if not any(int(lo) <= g <= int(hi) for g in groups):
            return np.empty(0, np.int64)
    owned = _key_groups(join(table_uri, file.path), file)
    return np.flatnonzero(np.isin(owned, list(groups))).astype(np.int64)


def state_changes(
    table_uri: str,
    current: Mapping[str, LiveFile],
    files: Iterable[DataFile],
    operators: Sequence[str],
) -> tuple[list[NewFile], dict[str, np.ndarray], set[str]]:
    """The new files of a checkpoint's keyed state and the rows it deletes, per path.

    Parameters
    ----------
    table_uri : str
        The ``state`` table.
    current : mapping
        Its live files before the commit (path -> :class:`LiveFile`).
    files : iterable of DataFile
        The files the checkpoint's acknowledgements list (a file listed by several key
        groups once).
    operators : sequence of str
        The keyed operators whose files these are (``replaces`` targets their files).

    Returns
    -------
    tuple
        The files to add, the rows to delete by path, and the files that may be removed
        once no row of them is held: only files whose rows a ``replaces`` deleted, which
        no live state reads any more (a partition drops its older files when it writes
        its whole state).
    """
    unique = {f.path: f for f in files}
    new: list[tuple[DataFile, FileNotes]] = []
    for f in unique.values():
        fs, path = filesystem(join(table_uri, f.path))
        with fs.open_input_file(path) as handle:
            notes = FileNotes.read(pq.ParquetFile(handle).metadata.metadata)
        new.append((f, notes))
    deleted: dict[str, list[np.ndarray]] = {}
    removable: set[str] = set()
    for f, notes in new:
        for path, rows in notes.deletes.items():
            deleted.setdefault(path, []).append(rows)
        removable.update(notes.absorbs)  # merged into f: no live state reads them
        if not f.rows:  # a partition's whole state, empty: only its replaces matter
            removable.add(f.path)
        if not notes.replaces:
            continue
        groups = set(notes.replaces)
        operator = f.partition_values.get("operator")
        for path, old in current.items():
            if path not in unique and old.partition_values.get("operator") == operator:
                rows = _replaced_rows(table_uri, old, groups)
                if len(rows):
                    deleted.setdefault(path, []).append(rows)
                    removable.add(path)
        for other, other_notes in new:
            earlier = (other.cut or 0) < (f.cut or 0)
            if earlier and other.partition_values.get("operator") == operator:
                owned = set(other_notes.groups) & groups
                if owned:
                    rows = _replaced_rows(table_uri, other, owned)
                    deleted.setdefault(other.path, []).append(rows)
                    removable.add(other.path)
    adds = [_new_file(f, notes.hidden) for f, notes in new]
    log.debug(
        "keyed state of %s: %d new file(s), rows deleted in %d file(s)",
        list(operators),
        len(adds),
        len(deleted),
    )
    return adds, {path: union(*rows) for path, rows in deleted.items()}, removable


#: The app transaction of the ``state`` table's checkpoint commits.
STATE_APP_ID = "barriered.state"
_OPEN: dict[str, StateFiles] = {}


def state_files(layout: SnapshotLayout, schema: pa.Schema) -> StateFiles:
    """The ``state`` table's live files (created with ``schema`` when it has no table
    yet; the columns of ``schema`` it lacks added), kept current in this process."""
    uri = layout.state_table
    table = open_table(uri, storage_options=layout.storage_options)
    if table is None:
        create_table_with_add_actions(
            uri,
            DeltaSchema.from_arrow(schema),
            [],
            mode="ignore",
            partition_by=STATE_PARTITIONS,
            description=TYPED_DESCRIPTION,
            configuration=STATE_CONFIGURATION,
            storage_options=dict(layout.storage_options),
        )
    else:
        add_columns(table, schema)
    files = _OPEN.get(uri)
    if files is None:
        files = _OPEN[uri] = StateFiles(uri)
    return files.refresh()


def commit_state_table(
    layout: SnapshotLayout,
    checkpoint_id: int | None,
    schema: pa.Schema,
    files: Sequence[DataFile],
    metadata: Mapping[str, Any],
    epoch: int | None = None,
) -> StateCommit:
    """Commit a checkpoint's state files (their notes applied as deletion vectors) and
    its ``metadata`` to the ``state`` table in one commit, once: a checkpoint the
    table's app transaction already holds is not committed again.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    checkpoint_id : int or None
        The checkpoint (None: a housekeeping commit).
    schema : pyarrow.Schema
        The table's schema for its registered operators.
    files : sequence of DataFile
        The keyed operators' files the checkpoint's acknowledgements list.
    metadata : mapping
        The commit metadata (``barriered.*``: barrier positions, mode, sinks ...).
    epoch : int, optional
        The committing run's epoch (a commit of the same id by another run is an error,
        :func:`~barriered.statestore.delta_tables.committed_version`).
    """
    table_files = state_files(layout, schema)
    operators = sorted({str(f.partition_values.get("operator")) for f in files})
    adds, deleted, removable = state_changes(
        layout.state_table, table_files.files, files, operators
    )

    def is_committed() -> int | None:
        table = open_table(layout.state_table, storage_options=layout.storage_options)
        done = None if table is None else table.transaction_version(STATE_APP_ID)
        if table is None or done is None or checkpoint_id is None or done < checkpoint_id:
            return None
        return committed_version(table, checkpoint_id, epoch)

    return commit_state(
        table_files,
        checkpoint_id,
        adds,
        deleted,
        {**metadata, "barriered.epoch": epoch},
        STATE_APP_ID,
        is_committed,
        removable,
    )


def commit_copies(
    layout: SnapshotLayout,
    checkpoint_id: int,
    schema: pa.Schema,
    files: Sequence[tuple[DataFile, np.ndarray]],
    metadata: Mapping[str, Any],
) -> StateCommit:
    """Commit state files copied from another table's version as they were there: each
    with the rows its deletion vector deleted (a savepoint of a checkpoint).

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path (or savepoint) the copies are in.
    checkpoint_id : int
        The checkpoint they hold.
    schema : pyarrow.Schema
        The table's schema.
    files : sequence of (DataFile, numpy.ndarray)
        Each copy and the rows of it the checkpoint does not hold.
    metadata : mapping
        The commit metadata.
    """
    table_files = state_files(layout, schema)
    adds = [_new_file(f, hidden) for f, hidden in files]
    return commit_state(table_files, checkpoint_id, adds, {}, metadata, STATE_APP_ID)


def _new_file(f: DataFile, hidden: np.ndarray) -> NewFile:
    """The add of data file ``f`` whose rows ``hidden`` no version holds."""
    return NewFile(
        f.path,
        f.size,
        f.rows,
        dict(f.partition_values),
        f.modification_time,
        f.stats_json(),
        hidden,
    )
