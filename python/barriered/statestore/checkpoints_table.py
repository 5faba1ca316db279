"""The ``_checkpoints`` table: one row per finished checkpoint, as Flink's history.

Each finished checkpoint appends one row (one small Parquet file and one commit); the
table is compacted now and then into one file holding the newest ``retention.historySize``
rows and those of the retained checkpoints (:func:`compact`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.transaction import CommitProperties

from barriered.config.source_options import RESTORE_FROM
from barriered.control.stats import STATS_COLUMNS
from barriered.errors import SnapshotStoreError
from barriered.statestore.delta_tables import (
    Commit,
    append_rows,
    current_files,
    open_table,
    read_table,
)
from barriered.statestore.layout import SnapshotLayout

_ARROW_TYPES = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string()}

#: Columns of ``_checkpoints``: the coordinator's statistics plus where the data lives.
EXTRA_COLUMNS = {
    "barrier_batch_id": "bigint",  # the batch in which the source fixed B_n(c)
    "inflight_table_version": "bigint",
    "snapshot_path": "string",
    # the barriered-delta sink's commit of the checkpoint's output (None without a sink)
    "sink_table_version": "bigint",
    "sink_rows": "bigint",
    "sink_bytes": "bigint",
}

SCHEMA = pa.schema(
    [(name, _ARROW_TYPES[t]) for name, t in {**STATS_COLUMNS, **EXTRA_COLUMNS}.items()]
)
#: The same columns as a Spark DDL string.
SCHEMA_DDL = ", ".join(f"{n} {t}" for n, t in {**STATS_COLUMNS, **EXTRA_COLUMNS}.items())


def append(layout: SnapshotLayout, row: Mapping[str, Any]) -> None:
    """Append one finished checkpoint's row."""
    full = {name: row.get(name) for name in SCHEMA.names}
    full["snapshot_path"] = layout.root
    append_rows(layout.checkpoints_table, [full], SCHEMA, layout.storage_options)


def read_rows(layout: SnapshotLayout) -> list[dict[str, Any]]:
    """Return every row, ordered by checkpoint id (empty when there is no table yet).

    Raises
    ------
    SnapshotStoreError
        When the table is damaged: the message names the file and what to do.
    """
    try:
        table = open_table(layout.checkpoints_table, storage_options=layout.storage_options)
        if table is None:
            return []
        rows: list[dict[str, Any]] = read_table(table).to_pylist()
    except SnapshotStoreError as exc:
        raise SnapshotStoreError(
            f"the checkpoint history of {layout.root!r} cannot be read: {exc}. Put an intact "
            "copy of that file back (from a backup); until then nothing can be restored into "
            "this snapshot path, but its checkpoints can be restored onto a new snapshot path "
            f"with .option({RESTORE_FROM.name!r}, {layout.root!r})"
        ) from exc
    return sorted(rows, key=lambda r: (r["checkpoint_id"], r.get("end_timestamp_ms") or 0))


def row_of(rows: Sequence[Mapping[str, Any]], checkpoint_id: int) -> dict[str, Any] | None:
    """The row of ``checkpoint_id`` among ``rows`` (:func:`read_rows`), the newest when a
    checkpoint has several (a restored run recorded it again), or None."""
    found = [r for r in rows if int(r["checkpoint_id"]) == checkpoint_id]
    return dict(found[-1]) if found else None


def completed(layout: SnapshotLayout) -> list[dict[str, Any]]:
    """Return the rows of completed checkpoints, oldest first."""
    return [r for r in read_rows(layout) if r["status"] == "completed"]


def compact(layout: SnapshotLayout, history_size: int, keep: Collection[int]) -> Commit | None:
    """Rewrite the table as one file with the newest ``history_size`` rows and the rows
    of the checkpoints ``keep`` (the retained ones).

    Returns
    -------
    Commit or None
        The overwrite (its version and the files it removed, to be deleted by retention),
        or None when the table is already one file within the size.
    """
    table = open_table(layout.checkpoints_table, storage_options=layout.storage_options)
    if table is None:
        return None
    before = [f["path"] for f in current_files(table)]
    rows = sorted(
        table.to_pyarrow_table().to_pylist(),
        key=lambda r: (r["checkpoint_id"], r.get("end_timestamp_ms") or 0),
    )
    newest = {r["checkpoint_id"] for r in rows[-history_size:]}
    kept = [r for r in rows if r["checkpoint_id"] in newest or r["checkpoint_id"] in keep]
    if len(before) <= 1 and len(kept) == len(rows):
        return None
    write_deltalake(
        layout.checkpoints_table,
        pa.Table.from_pylist(kept, schema=pa.schema(table.schema().to_arrow())),
        mode="overwrite",
        storage_options=dict(layout.storage_options),
        commit_properties=CommitProperties(
            custom_metadata={
                "barriered.retention": f"compacted: {len(kept)} of {len(rows)} row(s) kept"
            }
        ),
    )
    table.update_incremental()
    return Commit(table.version(), tuple(before))
