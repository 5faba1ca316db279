"""Snapshot paths built with the package's own Delta writers, as the coordinator commits
them (no Spark), and a record of every file under a path to prove a refusal wrote nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from barriered.config import BarrieredConf
from barriered.control.record import ControlRecord
from barriered.files.fileio import filesystem, make_parent, write_json
from barriered.statestore import checkpoints_table, retention
from barriered.statestore.acks import DataFile, write_data_file
from barriered.statestore.delta_tables import INFLIGHT_PARTITIONS, as_json, commit_files
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_commit import commit_state_table
from barriered.statestore.state_files import FileNotes
from barriered.statestore.state_schema import file_schema, table_schema

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


def state_rows(
    users: list[str], totals: list[int], checkpoint_id: int, key_group: int = 3
) -> pa.Table:
    """State file rows: ``user_id, total, key_group, checkpoint_id``."""
    n = len(users)
    return pa.table(
        {"user_id": users, "total": totals, "key_group": [key_group] * n,
         "checkpoint_id": [checkpoint_id] * n},
        schema=STATE_FILE_SCHEMA,
    )  # fmt: skip


def state_file(
    layout: SnapshotLayout,
    rows: pa.Table,
    checkpoint_id: int,
    replaces: Iterable[int] = (),
    operator: str = "op",
) -> DataFile:
    """A keyed partition's file of a cut (:mod:`barriered.statestore.live_state`):
    ``rows`` (:func:`state_rows`), one row group per key group, that replace every older
    row of the key groups ``replaces``."""
    rows = rows.sort_by("key_group")
    groups = sorted(set(rows["key_group"].to_pylist()))
    notes = FileNotes(np.empty(0, np.int64), {}, tuple(replaces), tuple(groups))
    rel = f"operator={operator}/p0-c{checkpoint_id}-{uuid.uuid4().hex}.parquet"
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, rows.schema.with_metadata(notes.metadata())) as writer:
        for group in groups:
            writer.write_table(rows.filter(pa.compute.equal(rows["key_group"], group)))
    fs, path = filesystem(f"{layout.state_table}/{rel}")
    make_parent(fs, path)
    with fs.open_output_stream(path) as out:
        out.write(sink.getvalue())
    stats = {"numRecords": rows.num_rows, "minValues": {"key_group": min(groups, default=0)},
             "maxValues": {"key_group": max(groups, default=0)}}  # fmt: skip
    return DataFile(rel, sink.getvalue().size, rows.num_rows, {"operator": operator}, 0,
                    json.dumps(stats), checkpoint_id)  # fmt: skip


def commit_state(
    layout: SnapshotLayout,
    checkpoint_id: int,
    files: list[DataFile],
    metadata: Mapping[str, object],
) -> int:
    """Commit state files of a checkpoint as the coordinator does; returns the version
    (the files it removed are recorded for retention)."""
    commit = commit_state_table(layout, checkpoint_id, STATE_SCHEMA, files, metadata)
    retention.record_removed(layout, retention.STATE, commit.version, commit.removed)
    return commit.version


#: The earlier layout of the ``state`` table: partitioned by key group too, one file per
#: key group without a ``key_group`` column (restored, never written by this version).
EARLIER_PARTITIONS = ["operator", "key_group"]


def earlier_state(
    layout: SnapshotLayout,
    checkpoint_id: int,
    groups: Mapping[int, Mapping[str, int]],
    metadata: Mapping[str, object],
) -> int:
    """Commit a checkpoint of the earlier layout: one file per key group of ``groups``
    (key group -> {user: total}), each replacing its key group's previous file."""
    from barriered.statestore.state_schema import TYPED_DESCRIPTION

    files = []
    for group, totals in groups.items():
        table = pa.table({"user_id": list(totals), "total": list(totals.values()),
                          "checkpoint_id": [checkpoint_id] * len(totals)},
                         schema=pa.schema([STATE_FILE_SCHEMA.field("user_id"),
                                           STATE_FILE_SCHEMA.field("total"),
                                           STATE_FILE_SCHEMA.field("checkpoint_id")]))  # fmt: skip
        partition = {"operator": "op", "key_group": str(group)}
        files.append(write_data_file(layout.state_table, partition, f"c{checkpoint_id}", table))
    return commit_files(
        layout.state_table, STATE_SCHEMA, EARLIER_PARTITIONS, checkpoint_id, files,
        [{"operator": "op", "key_group": str(g)} for g in groups], metadata=dict(metadata),
        description=TYPED_DESCRIPTION,
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
    f = state_file(layout, state, cid, replaces=[3])
    return commit_state(
        layout,
        cid,
        [f],
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


def to_earlier_layout(source: SnapshotLayout, target: Path) -> SnapshotLayout:
    """``source``'s latest completed checkpoint as a snapshot path of the earlier layout
    (an aligned checkpoint of one keyed operator): its configuration, registrations and
    upstream manifest copied, its state written as one file per key group in a table
    partitioned by ``operator`` and ``key_group``, its commit metadata and its
    ``_checkpoints`` row the same."""
    import shutil

    from deltalake import DeltaTable

    from barriered.statestore.delta_tables import scan
    from barriered.statestore.integrity import committed_checkpoints
    from barriered.statestore.state_schema import TYPED_DESCRIPTION, columns_schema

    out = SnapshotLayout.at(str(target))
    row = checkpoints_table.completed(source)[-1]
    version, metadata = committed_checkpoints(source)[int(row["checkpoint_id"])]
    Path(out.root).mkdir(parents=True)
    shutil.copytree(Path(source.root, "_coordinator"), Path(out.root, "_coordinator"))
    shutil.copytree(Path(source.root, "_source"), Path(out.root, "_source"))
    for tree_name in ("leases", "restore"):
        shutil.rmtree(Path(out.root, "_coordinator", tree_name), ignore_errors=True)
    registrations = source.registrations()
    state = scan(DeltaTable(source.state_table, version=version))
    files = []
    for name, registration in registrations.items():
        write_json(out.operator_file(name), {**registration, "key_groups_per_call": 1})
        mine = state.filter(pa.compute.equal(state["operator"], name))
        columns = [*columns_schema(registration).names, "checkpoint_id"]
        for group in sorted(set(mine["key_group"].to_pylist())):
            rows = mine.filter(pa.compute.equal(mine["key_group"], group)).select(columns)
            partition = {"operator": name, "key_group": str(group)}
            files.append(write_data_file(out.state_table, partition, "ckpt", rows))
    keep = {k: v for k, v in metadata.items() if k.startswith("barriered.") and v is not None}
    keep.pop("barriered.checkpoint_id", None)
    new_version = commit_files(
        out.state_table, table_schema(registrations.values()), EARLIER_PARTITIONS,
        int(row["checkpoint_id"]), files, metadata=keep, description=TYPED_DESCRIPTION,
    ).version  # fmt: skip
    checkpoints_table.append(out, {**row, "state_table_version": new_version})
    return out


def to_earlier_control(layout: SnapshotLayout) -> None:
    """Replace ``layout``'s control record by the trigger log and schedule the version
    before it wrote instead: the same facts in two files, the schedule naming its run."""
    record = ControlRecord.read(layout)
    raw = record.to_dict()
    triggers, schedule = layout.legacy_control_files
    carried = ("requests", "cancelled", "last_completed", "release", "heartbeat")
    write_json(
        triggers,
        {
            **{k: raw[k] for k in carried},
            "fatal": None,
            "completed_positions": raw["completed_positions"],
        },
    )
    if record.schedule is not None:
        write_json(schedule, {**record.schedule.to_dict(), "epoch": record.epoch})
    Path(layout.control_file).unlink()
