"""The columns the "barriered" source adds to every record, and the marker rows.

Every data row carries ``_channel`` and ``_seq`` (its position); ``_barrier`` and
``_barrier_meta`` are null. A *marker row* has ``_barrier = n`` (the checkpoint id),
``_channel = -1``, ``_seq = `` the key group it is addressed to, null user columns and a
JSON ``_barrier_meta`` (kind, mode, base checkpoint, snapshot path). The cut batch of a
checkpoint carries one marker row per key group, so every keyed operator instance sees
the barrier in-band, after the batch's data.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

CHANNEL = "_channel"
SEQ = "_seq"
BARRIER = "_barrier"
BARRIER_META = "_barrier_meta"
KEY_GROUP = "_key_group"
#: What the keyed operator groups by: one value per Spark partition, for the partition
#: that owns the key group (barriered.api.group_column).
SLOT = "_slot"

META_FIELDS = [
    pa.field(CHANNEL, pa.int32()),
    pa.field(SEQ, pa.int64()),
    pa.field(BARRIER, pa.int64()),
    pa.field(BARRIER_META, pa.string()),
]
META_COLUMNS = tuple(f.name for f in META_FIELDS)

#: Field metadata keys on ``_barrier`` that tell barriered.keyed() where snapshots go.
META_SNAPSHOT_PATH = "barriered.snapshotPath"
META_MAX_PARALLELISM = "barriered.maxParallelism"
#: With ``restoreFrom``: the checkpoint the keyed operators load their state from (JSON).
META_RESTORE = "barriered.restore"
#: The loaded stream's id (one per ``load()``), which its source's progress report also
#: carries: a keyed operator declared on the stream is registered by that stream's run.
META_SOURCE_ID = "barriered.sourceId"


def output_schema(user: pa.Schema) -> pa.Schema:
    """Return the source schema: the user columns (all nullable) plus the meta columns."""
    fields = [f.with_nullable(True) for f in user]
    clash = [f.name for f in fields if f.name in (*META_COLUMNS, KEY_GROUP, SLOT)]
    if clash:
        from barriered.errors import ConfigError

        raise ConfigError(
            f"upstream column(s) {clash} clash with the columns the barriered source adds "
            f"({', '.join(META_COLUMNS)}, {KEY_GROUP}, {SLOT}); rename them upstream"
        )
    return pa.schema([*fields, *META_FIELDS])


def data_batch(user_rows: pa.Table, channel: int, positions: pa.Array) -> pa.Table:
    """Append the meta columns to records of ``channel`` at ``positions``."""
    n = user_rows.num_rows
    return (
        user_rows.append_column(META_FIELDS[0], pa.array([channel] * n, pa.int32()))
        .append_column(META_FIELDS[1], positions)
        .append_column(META_FIELDS[2], pa.nulls(n, pa.int64()))
        .append_column(META_FIELDS[3], pa.nulls(n, pa.string()))
    )


def marker_batch(
    user: pa.Schema, checkpoint_id: int, key_groups: int, meta: dict[str, Any]
) -> pa.Table:
    """Return one marker row per key group for checkpoint ``checkpoint_id``."""
    cols: dict[str, pa.Array] = {f.name: pa.nulls(key_groups, f.type) for f in user}
    cols[CHANNEL] = pa.array([-1] * key_groups, pa.int32())
    cols[SEQ] = pa.array(range(key_groups), pa.int64())
    cols[BARRIER] = pa.array([checkpoint_id] * key_groups, pa.int64())
    cols[BARRIER_META] = pa.array([json.dumps(meta, sort_keys=True)] * key_groups, pa.string())
    return pa.table(cols, schema=output_schema(user))
