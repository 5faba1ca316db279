"""Snapshot paths built with the package's own Delta writers, as the coordinator commits
them (no Spark), and a record of every file under a path to prove a refusal wrote nothing."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from barriered.config import BarrieredConf
from barriered.statestore import checkpoints_table
from barriered.statestore.acks import write_data_file
from barriered.statestore.delta_tables import (
    INFLIGHT_PARTITIONS,
    STATE_PARTITIONS,
    as_json,
    commit_files,
)
from barriered.statestore.fileio import write_json
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import (
    TYPED_DESCRIPTION,
    file_schema,
    table_schema,
)

#: The column types a keyed operator registers: ``user_id string`` -> ``total long``.
KEY_TYPE = {
    "type": "struct",
    "fields": [{"name": "user_id", "type": "string", "nullable": True, "metadata": {}}],
}
STATE_TYPE = {
    "type": "struct",
    "fields": [{"name": "total", "type": "long", "nullable": True, "metadata": {}}],
}


def registration(operator: str = "op", max_parallelism: int = 8) -> dict[str, object]:
    """A keyed operator's registration (``_coordinator/operators/<operator>.json``)."""
    return {
        "operator": operator,
        "key_columns": ["user_id"],
        "key_schema": "user_id string",
        "state_schema": "total long",
        "output_schema": "user_id string, total long",
        "max_parallelism": max_parallelism,
        "key_type": KEY_TYPE,
        "state_type": STATE_TYPE,
    }


#: The data files and the ``state`` table of that operator.
STATE_FILE_SCHEMA = file_schema(registration())
STATE_SCHEMA = table_schema([registration()])


def state_rows(users: list[str], totals: list[int], checkpoint_id: int) -> pa.Table:
    """A key group's snapshot file content: ``user_id, total, checkpoint_id``."""
    return pa.table(
        {"user_id": users, "total": totals, "checkpoint_id": [checkpoint_id] * len(users)},
        schema=STATE_FILE_SCHEMA,
    )


def commit_state(
    layout: SnapshotLayout,
    checkpoint_id: int,
    files: list[object],
    replace: list[dict[str, str]],
    metadata: dict[str, object],
) -> int:
    """Commit state files of a checkpoint as the coordinator does (typed table)."""
    return commit_files(
        layout.state_table, STATE_SCHEMA, STATE_PARTITIONS, checkpoint_id, files,  # type: ignore[arg-type]
        replace, metadata=metadata, description=TYPED_DESCRIPTION,
    ).version  # fmt: skip


INFLIGHT_FILE = pa.schema(
    [("user_id", pa.string()), ("_channel", pa.int32()), ("_seq", pa.int64())]
)


def checkpoint(
    layout: SnapshotLayout,
    cid: int,
    barrier: list[int],
    inflight: dict[int, tuple[int, int]] | None = None,
    stores: dict[str, dict[str, object]] | None = None,
) -> int:
    """Commit checkpoint ``cid`` as the coordinator does: in-flight files, then state
    (with ``stores``: the Spark operator stores its ``state`` commit records)."""
    inflight = inflight or {}
    inflight_version = None
    if inflight:
        files = []
        for channel, (a, b) in inflight.items():
            table = pa.table(
                {"user_id": [f"u{s}" for s in range(a, b)], "_channel": [channel] * (b - a),
                 "_seq": list(range(a, b))},
                schema=INFLIGHT_FILE,
            )  # fmt: skip
            files.append(
                write_data_file(
                    layout.inflight_table, {"checkpoint_id": str(cid)}, f"ch{channel}", table
                )
            )
        inflight_version = commit_files(
            layout.inflight_table, INFLIGHT_FILE.append(pa.field("checkpoint_id", pa.int64())),
            INFLIGHT_PARTITIONS, cid, files,
        ).version  # fmt: skip
    state = state_rows(["u1"], [cid], cid)
    f = write_data_file(layout.state_table, {"operator": "op", "key_group": "3"}, "t", state)
    return commit_state(
        layout,
        cid,
        [f],
        [{"operator": "op", "key_group": "3"}],
        metadata={
            "barriered.kind": "checkpoint",
            "barriered.mode": "unaligned" if inflight else "aligned",
            "barriered.barrier": as_json({str(c): b for c, b in enumerate(barrier)}),
            "barriered.inflight": as_json({str(c): list(r) for c, r in inflight.items()}),
            "barriered.inflight_version": inflight_version,
            **({"barriered.operators": as_json(stores)} if stores else {}),
        },
    )


def snapshot_path(root: Path, barriers: list[list[int]]) -> SnapshotLayout:
    """A snapshot path of a 2-channel ``rate`` query with one completed checkpoint per
    entry of ``barriers`` (ids 1, 2, ...), committed and listed in ``_checkpoints``."""
    layout = SnapshotLayout.at(str(root))
    conf = BarrieredConf(snapshot_path=layout.root, max_parallelism=8)
    write_json(
        layout.config_file,
        {"conf": conf.to_dict(), "channels": 2, "upstream": {"upstream": "rate"}},
    )
    write_json(layout.operator_file("op"), registration())
    for cid, barrier in enumerate(barriers, start=1):
        version = checkpoint(layout, cid, barrier)
        row = {
            "checkpoint_id": cid,
            "kind": "checkpoint",
            "mode": "aligned",
            "status": "completed",
            "state_table_version": version,
            "barrier_positions": as_json({str(c): b for c, b in enumerate(barrier)}),
        }
        checkpoints_table.append(layout, row)
    return layout
