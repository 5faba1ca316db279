"""The state table's log written here: checkpoints add files and deletion vectors, every
version reads (delta-rs) as exactly what was committed, the replay follows Delta
checkpoints, and a commit that finds its version taken tries the next one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from barriered.errors import SnapshotStoreError
from barriered.statestore.dv_files import vector_rows
from barriered.statestore.state_log import (
    STATE_CONFIGURATION,
    NewFile,
    StateFiles,
    commit_state,
)
from s3_server import S3Server

SCHEMA = pa.schema([("operator", pa.string()), ("k", pa.int64()), ("v", pa.int64())])


def new_table(uri: str) -> StateFiles:
    create_table_with_add_actions(
        uri,
        DeltaSchema.from_arrow(SCHEMA),
        [],
        partition_by=["operator"],
        configuration=STATE_CONFIGURATION,
    )
    return StateFiles(uri)


def data_file(uri: str, name: str, keys: list[int], value: int, hidden: list[int] = ()) -> NewFile:
    rel = f"operator=op/{name}.parquet"
    Path(uri, "operator=op").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": keys, "v": [value] * len(keys)}), f"{uri}/{rel}")
    return NewFile(
        rel,
        Path(uri, rel).stat().st_size,
        len(keys),
        {"operator": "op"},
        0,
        json.dumps({"numRecords": len(keys)}),
        np.array(sorted(hidden), np.int64),
    )


def rows(uri: str, version: int | None = None) -> dict[int, int]:
    table = pa.table(DeltaTable(uri, version=version).scan().read_all())
    keys = table["k"].to_pylist()
    assert len(keys) == len(set(keys)), "a key twice in one version"
    return dict(zip(keys, table["v"].to_pylist(), strict=True))


def test_versions_read_as_exactly_what_each_checkpoint_committed(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    first = data_file(uri, "a", list(range(10)), 1)
    c1 = commit_state(files, 1, [first], {}, {"barriered.kind": "checkpoint"}, "barriered.state")
    # checkpoint 2: keys 3 and 4 change, key 7 is deleted (a hidden marker row in b)
    second = data_file(uri, "b", [3, 4, 7], 2, hidden=[2])
    c2 = commit_state(files, 2, [second], {first.path: np.array([3, 4, 7])}, {}, "barriered.state")
    assert (c2.removed, c2.masked) == ((), (first.path,))
    expected = {k: 1 for k in range(10) if k not in (3, 4, 7)} | {3: 2, 4: 2}
    assert rows(uri, c1.version) == {k: 1 for k in range(10)}
    assert rows(uri, c2.version) == expected
    # checkpoint 3: every key of a changes: a keeps a deletion vector of all its rows (a
    # live state may still read it), unless it is removable: then it is removed whole
    third = data_file(uri, "c", [k for k in range(10) if k not in (3, 4, 7)], 3)
    gone = {first.path: np.array([0, 1, 2, 5, 6, 8, 9])}
    c3 = commit_state(files, 3, [third], gone, {}, "barriered.state", removable={first.path})
    assert c3.removed == (first.path,)
    assert set(files.files) == {second.path, third.path}
    assert rows(uri) == {k: 3 for k in expected} | {3: 2, 4: 2}
    history = {h["version"]: h for h in DeltaTable(uri).history()}
    assert history[c1.version]["barriered.kind"] == "checkpoint"
    assert history[c3.version]["barriered.checkpoint_id"] == 3
    assert DeltaTable(uri).transaction_version("barriered.state") == 3


def test_replay_follows_a_delta_checkpoint_and_time_travel(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    a = data_file(uri, "a", [1, 2, 3], 1)
    commit_state(files, 1, [a], {}, {}, "barriered.state")
    b = data_file(uri, "b", [2], 2)
    v2 = commit_state(files, 2, [b], {a.path: np.array([1])}, {}, "barriered.state").version
    DeltaTable(uri).create_checkpoint()
    c = data_file(uri, "c", [3], 3)
    commit_state(files, 3, [c], {a.path: np.array([2])}, {}, "barriered.state")
    d = data_file(uri, "d", [1, 2, 3], 4)
    every = {a.path: np.array([0]), b.path: np.array([0]), c.path: np.array([0])}
    assert commit_state(files, 4, [d], every, {}, "barriered.state").removed == ()
    assert all(f.live_rows == 0 for p, f in files.files.items() if p != d.path)
    fresh = StateFiles(uri)
    assert fresh.files == files.files
    assert fresh.files[a.path].dv is not None
    assert vector_rows(fresh.files[a.path].dv, uri).tolist() == [0, 1, 2]
    old = StateFiles(uri, v2)
    assert sorted(old.files) == sorted([a.path, b.path])
    assert old.files[a.path].live_rows == 2
    assert rows(uri, v2) == {1: 1, 2: 2, 3: 1}
    assert rows(uri) == {1: 4, 2: 4, 3: 4}


def test_a_taken_version_is_retried_and_a_committed_checkpoint_skipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    a = data_file(uri, "a", [1], 1)
    # another writer takes version 1 first (a metadata-only commit)
    (tmp_path / "state" / "_delta_log" / f"{1:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1, "operation": "X"}}) + "\n"
    )
    assert commit_state(files, 1, [a], {}, {}, "barriered.state").version == 2
    again = commit_state(files, 1, [a], {}, {}, "barriered.state", is_committed=lambda: 2)
    assert again.version == 2 and files.version == 2


def test_a_gap_in_the_log_is_refused_naming_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    for i in range(3):
        commit_state(files, i + 1, [data_file(uri, f"f{i}", [i], i)], {}, {}, "barriered.state")
    (tmp_path / "state" / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(SnapshotStoreError, match="has no commit 0"):
        StateFiles(uri)


@pytest.mark.s3
def test_on_s3_a_log_entry_is_created_only_if_absent(s3_server: S3Server) -> None:
    """Two writers of one version on S3: the conditional PUT lets exactly one win, and a
    checkpoint committed there reads back through delta-rs with its deletion vector."""
    from barriered.files import storage
    from barriered.files.fileio import create_if_absent, read_bytes

    storage.register(s3_server.uri(), s3_server.storage_options)
    target = s3_server.uri("log", "00000000000000000007.json")
    assert create_if_absent(target, b"first\n") is True
    assert create_if_absent(target, b"second\n") is False
    assert read_bytes(target) == b"first\n"

    uri = s3_server.uri("dvs", "state")
    options = storage.delta_options(uri)
    create_table_with_add_actions(
        uri,
        DeltaSchema.from_arrow(SCHEMA),
        [],
        partition_by=["operator"],
        configuration=STATE_CONFIGURATION,
        storage_options=options,
    )
    files = StateFiles(uri)
    rel = "operator=op/a.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"k": [1, 2, 3], "v": [1, 1, 1]}), sink)
    fs, root = storage.settings_for(uri).filesystem(uri)
    with fs.open_output_stream(f"{root}/{rel}") as out:
        out.write(sink.getvalue())
    new = NewFile(
        rel, sink.getvalue().size, 3, {"operator": "op"}, 0, '{"numRecords":3}', np.array([1])
    )
    commit_state(files, 1, [new], {}, {}, "barriered.state")
    table = pa.table(DeltaTable(uri, storage_options=options).scan().read_all())
    assert sorted(table["k"].to_pylist()) == [1, 3]
