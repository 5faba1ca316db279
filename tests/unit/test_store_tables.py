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

from barriered.files.fileio import write_json
from barriered.statestore import maintenance, operators, retention
from barriered.statestore.acks import Ack, DataFile, write_ack
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
        "watermark_ms": 1000 * cid,
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
    stored = {"version": None, "key_schema": KEY_JSON, "value_schema": VALUE_JSON}
    assert versions == {NAME: {**stored, "watermark_ms": 1000}}
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
    assert operators.cut_watermark_ms(meta) == 1000  # checkpoint 1's cut batch watermark
    assert operators.cut_watermark_ms({}) is None
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


def _parquet(layout: SnapshotLayout) -> set[str]:
    """The store table's data files (not its Delta checkpoints)."""
    table = Path(layout.operator_table(NAME))
    return {str(p) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_retention_keeps_only_what_retained_checkpoints_read(tmp_path: Path) -> None:
    """Every checkpoint rewrites one key group of each of 2 partitions; with 3 checkpoints
    retained, the store table's files stay bounded, every retained checkpoint's version
    reads its exact state, and maintenance cuts the table's log at the oldest one."""
    layout = SnapshotLayout.at(str(tmp_path))
    retained: list[retention.Retained] = []
    expected: dict[int, dict[str, int]] = {}
    state: dict[str, int] = {}
    counts = []
    for cid in range(1, 21):
        acks = []
        for part in range(2):
            group = (cid + part) % 4 + 4 * part  # partition 0: groups 0-3, 1: groups 4-7
            rows = {f"k{group}": cid}
            state.update(rows)
            acks.append(_ack(cid, part, 2, [_file(layout, group, part, rows)], [group], cid == 1))
        stores = operators.commit(layout, cid, acks)
        expected[cid] = dict(state)
        retained = [
            *retained[-2:],
            retention.Retained(cid, cid, None, retention.store_versions(stores)),
        ]
        retention.apply(layout, retained)
        counts.append(len(_parquet(layout)))
        for r in retained:
            assert _state(layout, r.stores[NAME] or 0) == expected[r.checkpoint_id]
    assert max(counts[8:]) <= 12 and counts[-1] == counts[-2]  # 8 current + replaced ones
    assert len(_parquet(layout)) < 40  # 40 files were written
    stones = json.loads(Path(layout.tombstones_file).read_text())
    assert all(int(v) > retained[0].stores[NAME] for v, *_ in stones[f"operators/{NAME}"])
    maintenance.run(layout, retained, 10, 0, finished_below=21)
    log = sorted(p.name for p in Path(layout.operator_table(NAME), "_delta_log").glob("*.json"))
    assert int(log[0].split(".")[0]) == retained[0].stores[NAME]
    for r in retained:
        assert _state(layout, r.stores[NAME] or 0) == expected[r.checkpoint_id]


def test_a_store_no_retained_checkpoint_holds_keeps_its_current_files(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    operators.commit(layout, 1, [_ack(1, 0, 1, [_file(layout, 2, 0, {"a": 1})], [2], True)])
    v2 = operators.commit(layout, 2, [_ack(2, 0, 1, [_file(layout, 2, 0, {"a": 2})], [2], False)])
    assert len(_parquet(layout)) == 2
    # the query no longer runs this operator: checkpoint 3 holds no store
    retention.apply(layout, [retention.Retained(3, 3, None, {})])
    assert len(_parquet(layout)) == 1
    assert _state(layout, v2[NAME]["version"]) == {"a": 2}


def test_an_aborted_checkpoints_store_files_are_deleted_with_its_acks(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    kept = _file(layout, 2, 0, {"a": 1})
    operators.commit(layout, 1, [_ack(1, 0, 1, [kept], [2], True)])
    ack = _ack(2, 0, 1, [_file(layout, 2, 0, {"a": 2})], [2], False)
    write_ack(layout, ack)
    assert len(_parquet(layout)) == 2
    retention.discard(layout, 2, delete_data=True)
    assert _parquet(layout) == {str(Path(layout.operator_table(NAME)) / kept.path)}


def test_the_store_table_gets_a_delta_checkpoint_every_ten_versions(tmp_path: Path) -> None:
    """Every checkpoint commits to the store table; a Delta checkpoint every ten versions
    keeps loading it (three times per commit) from re-reading the whole log, and every
    version still reads the state it was committed with."""
    layout = SnapshotLayout.at(str(tmp_path))
    log = Path(layout.operator_table(NAME)) / "_delta_log"
    versions = {}
    for cid in range(1, 13):
        files = [_file(layout, 0, 0, {"a": cid})]
        done = operators.commit(layout, cid, [_ack(cid, 0, 1, files, [0], cid == 1)])
        versions[cid] = done[NAME]["version"]
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        f"{10:020d}.checkpoint.parquet"
    ]
    assert len(list(log.glob("*.json"))) == 12  # nothing deleted
    assert all(_state(layout, v) == {"a": cid} for cid, v in versions.items())
