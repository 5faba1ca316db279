"""The Spark operators' store tables: participants, the per-checkpoint commit (full,
incremental, emptied key groups, fewer partitions), restore manifests and savepoint copies."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from barriered.statestore import operators
from barriered.statestore.acks import Ack, DataFile
from barriered.statestore.fileio import write_json
from barriered.statestore.layout import SnapshotLayout

NAME = "0-default"
KEY = pa.struct([("user_id", pa.string())])
VALUE = pa.struct([("count", pa.int64())])
SCHEMA = pa.schema([("hash", pa.int32()), ("key", KEY), ("value", VALUE)])
KEY_JSON = '{"type":"struct","fields":[{"name":"user_id","type":"string"}]}'
VALUE_JSON = '{"type":"struct","fields":[{"name":"count","type":"long"}]}'


def _file(layout: SnapshotLayout, group: int, part: int, rows: dict[str, int]) -> DataFile:
    rel = f"key_group={group}/store_partition={part}/{uuid.uuid4().hex}.parquet"
    path = Path(layout.operator_table(NAME)) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "hash": pa.array([group] * len(rows), pa.int32()),
            "key": pa.array([{"user_id": k} for k in rows], KEY),
            "value": pa.array([{"count": v} for v in rows.values()], VALUE),
        },
        schema=SCHEMA,
    )
    pq.write_table(table, path)
    pv: dict[str, str | None] = {"key_group": str(group), "store_partition": str(part)}
    return DataFile(rel, path.stat().st_size, len(rows), pv, 0)


def _ack(
    cid: int, part: int, parts: int, files: list[DataFile], changed: list[int], full: bool
) -> Ack:
    extra: dict[str, Any] = {
        "operator": NAME,
        "store_partition": part,
        "partitions": parts,
        "full": full,
        "changed_groups": changed,
        "key_schema": KEY_JSON,
        "value_schema": VALUE_JSON,
    }
    return Ack(cid, f"operator/{NAME}/{part}", bool(changed), tuple(files), extra=extra)


def _state(layout: SnapshotLayout, version: int) -> dict[str, int]:
    rows = DeltaTable(layout.operator_table(NAME), version=version).to_pyarrow_table()
    keys = [k["user_id"] for k in rows["key"].to_pylist()]
    assert len(keys) == len(set(keys))
    return dict(zip(keys, [v["count"] for v in rows["value"].to_pylist()], strict=True))


def test_participants_are_the_registered_stores_of_this_run(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    write_json(
        f"{layout.stores_dir}/0-default.json", {"operator": NAME, "partitions": 2, "epoch": 3}
    )
    write_json(
        f"{layout.stores_dir}/1-default.json",
        {"operator": "1-default", "partitions": 4, "epoch": 2},
    )
    assert operators.participants(layout, 3) == [f"operator/{NAME}/0", f"operator/{NAME}/1"]
    assert len(operators.participants(layout, 2)) == 4


def test_commits_replace_changed_key_groups_of_their_partition(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    full = [
        _ack(1, 0, 2, [_file(layout, 0, 0, {"a": 1, "b": 2})], [0], True),
        _ack(1, 1, 2, [_file(layout, 0, 1, {"c": 3}), _file(layout, 5, 1, {"d": 4})], [0, 5], True),
    ]
    first = operators.commit(layout, 1, full)
    assert first[NAME]["key_schema"] == KEY_JSON
    v1 = first[NAME]["version"]
    assert _state(layout, v1) == {"a": 1, "b": 2, "c": 3, "d": 4}

    # partition 0 rewrites key group 0; partition 1's key group 5 became empty
    incremental = [
        _ack(2, 0, 2, [_file(layout, 0, 0, {"a": 7})], [0], False),
        _ack(2, 1, 2, [], [5], False),
    ]
    v2 = operators.commit(layout, 2, incremental)[NAME]["version"]
    assert _state(layout, v2) == {"a": 7, "c": 3}
    assert _state(layout, v1) == {"a": 1, "b": 2, "c": 3, "d": 4}  # time travel intact

    # an unchanged checkpoint still gets a version (the restore point), with the same rows
    v3 = operators.commit(layout, 3, [_ack(3, 0, 2, [], [], False), _ack(3, 1, 2, [], [], False)])
    assert v3[NAME]["version"] == v2 + 1 and _state(layout, v2 + 1) == {"a": 7, "c": 3}

    # restored at one partition: its full write replaces everything, partition 1's files go
    v4 = operators.commit(
        layout, 4, [_ack(4, 0, 1, [_file(layout, 0, 0, {"a": 7, "c": 3})], [0], True)]
    )
    files = DeltaTable(layout.operator_table(NAME), version=v4[NAME]["version"]).file_uris()
    assert all("store_partition=0" in f for f in files)
    assert _state(layout, v4[NAME]["version"]) == {"a": 7, "c": 3}


def test_an_empty_store_has_no_table_until_it_holds_rows(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    versions = operators.commit(layout, 1, [_ack(1, 0, 1, [], [], True)])
    assert versions == {NAME: {"version": None, "key_schema": KEY_JSON, "value_schema": VALUE_JSON}}
    assert not Path(layout.operator_table(NAME)).exists()


def test_restore_manifest_names_the_files_at_the_checkpoint(tmp_path: Path) -> None:
    origin = SnapshotLayout.at(str(tmp_path / "snap"))
    v1 = operators.commit(origin, 1, [_ack(1, 0, 1, [_file(origin, 2, 0, {"a": 1})], [2], True)])
    operators.commit(origin, 2, [_ack(2, 0, 1, [_file(origin, 2, 0, {"a": 2})], [2], False)])
    meta = {operators.VERSIONS_KEY: json.dumps(v1)}
    target = SnapshotLayout.at(str(tmp_path / "new"))
    path = operators.write_restore_manifest(origin, 1, meta, target, 5)
    assert path is not None and path.endswith("1.e5.json")
    manifest = json.loads(Path(path).read_text())
    files = manifest["stores"][NAME]["files"]
    assert len(files) == 1
    assert pq.read_table(files[0])["value"].to_pylist() == [{"count": 1}]
    assert manifest["stores"][NAME]["key_schema"] == KEY_JSON
    assert operators.write_restore_manifest(origin, 1, {}, target, 5) is None


def test_savepoint_copy_holds_the_checkpoint_state(tmp_path: Path) -> None:
    origin = SnapshotLayout.at(str(tmp_path / "snap"))
    v1 = operators.commit(origin, 1, [_ack(1, 0, 1, [_file(origin, 2, 0, {"a": 1})], [2], True)])
    operators.commit(origin, 2, [_ack(2, 0, 1, [_file(origin, 2, 0, {"a": 2})], [2], False)])
    out = SnapshotLayout.at(str(tmp_path / "savepoint"))
    copied = operators.copy_stores(origin, {operators.VERSIONS_KEY: json.dumps(v1)}, out, 1)
    assert copied is not None
    version = json.loads(copied)[NAME]["version"]
    assert _state(out, version) == {"a": 1}
