"""The ``_rescales`` table: one row per rescale of a managed query, as Flink shows its
rescales (``barriered.managed(...).rescale(n)``, :mod:`barriered.managed`).

A row records when the rescale began and ended, the shuffle partitions before and after,
the savepoint it took (a checkpoint of kind ``savepoint`` of this snapshot path) and the
checkpoint the new run restored (the savepoint, or a checkpoint that completed after it
before the old run stopped), the checkpoint locations of both runs, and the pause: the
time from the end of the old run's last micro-batch to the end of the new run's first
one, when no record was processed. A refused or failed rescale is recorded too
(``status`` ``failed`` and its ``reason``), when it got as far as the snapshot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from barriered.statestore.delta_tables import append_rows, open_table, read_table
from barriered.statestore.layout import SnapshotLayout

SCHEMA = pa.schema(
    [
        ("rescale_id", pa.int64()),
        ("status", pa.string()),  # completed | failed
        ("reason", pa.string()),
        ("started_ms", pa.int64()),
        ("ended_ms", pa.int64()),
        ("from_partitions", pa.int32()),
        ("to_partitions", pa.int32()),
        ("max_parallelism", pa.int32()),
        ("savepoint_id", pa.int64()),
        ("restored_checkpoint_id", pa.int64()),
        ("from_checkpoint_location", pa.string()),
        ("to_checkpoint_location", pa.string()),
        ("query_id", pa.string()),
        ("from_run_id", pa.string()),
        ("to_run_id", pa.string()),
        ("pause_ms", pa.int64()),
    ]
)


def read_rows(layout: SnapshotLayout) -> list[dict[str, Any]]:
    """Every rescale of the snapshot path, oldest first (empty without any)."""
    table = open_table(layout.rescales_table, storage_options=layout.storage_options)
    if table is None:
        return []
    rows: list[dict[str, Any]] = read_table(table).to_pylist()
    return sorted(rows, key=lambda r: r["rescale_id"])


def append(layout: SnapshotLayout, row: Mapping[str, Any]) -> dict[str, Any]:
    """Append one rescale (numbered after the last one); return the row written."""
    rows = read_rows(layout)
    full = {name: row.get(name) for name in SCHEMA.names}
    full["rescale_id"] = max((int(r["rescale_id"]) for r in rows), default=0) + 1
    append_rows(layout.rescales_table, [full], SCHEMA, layout.storage_options)
    return full
