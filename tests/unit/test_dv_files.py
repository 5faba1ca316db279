"""Deletion vector files: a commit's large vectors go to one file (Delta storage type
``u``), small ones stay inline; every version reads exactly (delta-rs) with either form;
a missing or damaged file is refused naming it; a restored partition's manifest stays
small; retention deletes a file no retained version references and keeps the others."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from barriered.errors import RestoreError, SnapshotStoreError
from barriered.statestore import checkpoint_commit, dv_files, maintenance, restored_state, retention
from barriered.statestore.acks import Ack
from barriered.statestore.deletion_vectors import DeletionVector
from barriered.statestore.dv_files import (
    INLINE_MAX,
    VECTORS_READ,
    VECTORS_READ_KEY,
    is_vector_file,
    vector_rows,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.live_manifest import RestoredFile, new_manifest
from barriered.statestore.restore_point import TableFile, _check_vectors
from barriered.statestore.state_log import (
    STATE_CONFIGURATION,
    NewFile,
    StateFiles,
    commit_state,
)
from s3_server import S3Server

SCHEMA = pa.schema([("operator", pa.string()), ("k", pa.int64()), ("v", pa.int64())])
APP = "barriered.state"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    dv_files.clear_cache()  # every read below goes to the files


def new_table(uri: str) -> StateFiles:
    create_table_with_add_actions(
        uri, DeltaSchema.from_arrow(SCHEMA), [], partition_by=["operator"],
        configuration=STATE_CONFIGURATION,
    )  # fmt: skip
    return StateFiles(uri)


def data_file(uri: str, name: str, keys: np.ndarray, value: int) -> NewFile:
    rel = f"operator=op/{name}.parquet"
    Path(uri, "operator=op").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": keys, "v": np.full(len(keys), value)}), f"{uri}/{rel}")
    stats = json.dumps({"numRecords": len(keys)})
    size = Path(uri, rel).stat().st_size
    return NewFile(rel, size, len(keys), {"operator": "op"}, 0, stats, np.empty(0, np.int64))


def rows(uri: str, version: int | None = None) -> dict[int, int]:
    table = pa.table(DeltaTable(uri, version=version).scan().read_all())
    keys = table["k"].to_pylist()
    assert len(keys) == len(set(keys)), "a key twice in one version"
    return dict(zip(keys, table["v"].to_pylist(), strict=True))


def vector_files(uri: str) -> set[str]:
    return {n for n in os.listdir(uri) if is_vector_file(n)}


def three_versions(uri: str) -> tuple[StateFiles, list[int], list[dict[int, int]], NewFile]:
    """A (20,000 keys) and b (10 keys) at version 1; version 2 deletes 5,000 rows of a
    (a vector of ~10 kB: a file) and 2 of b (inline); version 3 deletes 3,000 more of a."""
    files = new_table(uri)
    rng = np.random.default_rng(3)
    a = data_file(uri, "a", np.arange(20_000), 1)
    b = data_file(uri, "b", np.arange(100_000, 100_010), 1)
    versions = [commit_state(files, 1, [a, b], {}, {}, APP).version]
    expected = [dict.fromkeys(range(20_000), 1) | dict.fromkeys(range(100_000, 100_010), 1)]
    first = np.sort(rng.choice(20_000, 5_000, replace=False))
    c2 = commit_state(files, 2, [], {a.path: first, b.path: np.array([3, 4])}, {}, APP)
    versions.append(c2.version)
    gone = {*first.tolist(), 100_003, 100_004}
    expected.append({k: v for k, v in expected[0].items() if k not in gone})
    rest = np.setdiff1d(np.arange(20_000), first)
    second = np.sort(rng.choice(rest, 3_000, replace=False))
    versions.append(commit_state(files, 3, [], {a.path: second}, {}, APP).version)
    gone = set(second.tolist())
    expected.append({k: v for k, v in expected[1].items() if k not in gone})
    return files, versions, expected, a


def test_a_large_vector_goes_to_a_file_a_small_one_stays_inline(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    _, versions, expected, a = three_versions(uri)
    v2 = StateFiles(uri, versions[1]).files
    dv_a, dv_b = v2[a.path].dv, v2["operator=op/b.parquet"].dv
    assert dv_a is not None and dv_a.storage_type == "u" and dv_a.size_in_bytes > INLINE_MAX
    assert dv_b is not None and dv_b.storage_type == "i"
    assert len(dv_a.path_or_inline_dv) == 20 and dv_a.offset == 1
    assert dv_a.relative_file() in vector_files(uri)
    log_entry = Path(uri, "_delta_log", f"{versions[1]:020d}.json").stat().st_size
    assert log_entry < 3_000  # the 10 kB vector is not in it
    for version, want in zip(versions, expected, strict=True):
        assert rows(uri, version) == want  # delta-rs applies both forms
    # the third commit replaced a's vector: its first file is referenced no more
    assert len(vector_files(uri)) == 2


def test_every_version_reads_after_a_delta_checkpoint_and_the_commit_reports_dropped_files(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(30_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    c2 = commit_state(files, 2, [], {a.path: np.arange(0, 30_000, 3)}, {}, APP)
    first = files.files[a.path].dv
    assert first is not None and first.storage_type == "u" and c2.vectors_dropped == ()
    DeltaTable(uri).create_checkpoint()  # delta-rs keeps the descriptor in its checkpoint
    c3 = commit_state(files, 3, [], {a.path: np.arange(1, 30_000, 3)}, {}, APP)
    assert c3.vectors_dropped == (first.relative_file(),)
    replayed = StateFiles(uri, c2.version).files[a.path].dv
    assert replayed == first
    assert vector_rows(replayed, uri).tolist() == list(range(0, 30_000, 3))
    assert sorted(rows(uri, c2.version)) == [k for k in range(30_000) if k % 3]
    assert sorted(rows(uri)) == list(range(2, 30_000, 3))
    # every row deleted: a removable file leaves, and its vector file with it
    c4 = commit_state(files, 4, [], {a.path: np.arange(30_000)}, {}, APP, removable={a.path})
    assert c4.removed == (a.path,)
    assert c4.vectors_dropped == (StateFiles(uri, c3.version).files[a.path].dv.relative_file(),)


def test_an_old_inline_table_still_reads_and_takes_files_from_now_on(tmp_path: Path) -> None:
    """A version written before (every vector inline) reads as it did; the next commit
    that grows one of its vectors past the threshold writes a file."""
    uri = str(tmp_path / "state")
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(10_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    old = files.files[a.path]
    inline = DeletionVector.inline(np.arange(0, 10_000, 2))  # as the earlier version wrote
    entry = [{"commitInfo": {"timestamp": 1}}, {"remove": old.remove_json(1)}]
    entry.append({"add": {**old.add_json(), "deletionVector": inline.to_json()}})
    Path(uri, "_delta_log", f"{2:020d}.json").write_text(
        "".join(json.dumps(e) + "\n" for e in entry)
    )
    assert sorted(rows(uri, 2)) == list(range(1, 10_000, 2))
    c3 = commit_state(files, 3, [], {a.path: np.array([1, 3])}, {}, APP)
    assert files.files[a.path].dv.storage_type == "u" and c3.vectors_dropped == ()
    assert sorted(rows(uri, 2)) == list(range(1, 10_000, 2))
    assert sorted(rows(uri)) == list(range(5, 10_000, 2))


def test_a_missing_or_damaged_vector_file_is_refused_naming_table_file_and_version(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "state")
    files, versions, _, a = three_versions(uri)
    dv = files.files[a.path].dv
    assert dv is not None
    path = Path(dv.file_path(uri))
    blob = path.read_bytes()
    path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # a flipped bit of the checksum
    dv_files.clear_cache()  # the committer's own copy: a reader elsewhere reads the file
    with pytest.raises(SnapshotStoreError, match="checksum") as damaged:
        vector_rows(dv, uri, f"data file {a.path!r} at version {versions[2]}")
    assert str(path) in str(damaged.value) and uri in str(damaged.value)
    assert f"version {versions[2]}" in str(damaged.value)
    path.unlink()
    before = sorted(os.listdir(Path(uri, "_delta_log")))
    with pytest.raises(SnapshotStoreError, match="cannot be read") as missing:
        commit_state(files, 4, [], {a.path: np.array([0, 1, 2])}, {}, APP)
    message = str(missing.value)
    assert str(path) in message and uri in message and f"version {versions[2]}" in message
    assert sorted(os.listdir(Path(uri, "_delta_log"))) == before  # nothing written
    point = SimpleNamespace(describe=lambda: "checkpoint 3 of p", state_version=versions[2])
    table_files = [
        TableFile(f.path, f.size, f.rows, f.partition_values, f.stats, f.dv)
        for f in files.files.values()
    ]
    with pytest.raises(RestoreError, match=r"deletion vector file .* is missing") as refused:
        _check_vectors(uri, table_files, point)  # type: ignore[arg-type]
    assert f"version {versions[2]}" in str(refused.value) and a.path in str(refused.value)


def test_a_commit_that_loses_its_version_race_leaves_no_vector_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "state")
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(20_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    real = dv_files.VectorFile.write
    written: list[str] = []

    def race(self: dv_files.VectorFile, table_uri: str) -> str | None:
        name = real(self, table_uri)
        if not written:  # another writer takes the version right after the first file
            Path(uri, "_delta_log", f"{2:020d}.json").write_text(
                json.dumps({"commitInfo": {"timestamp": 1, "operation": "X"}}) + "\n"
            )
        written.append(str(name))
        return name

    pytest.MonkeyPatch().setattr(dv_files.VectorFile, "write", race)
    try:
        done = commit_state(files, 2, [], {a.path: np.arange(0, 20_000, 2)}, {}, APP)
    finally:
        pytest.MonkeyPatch().undo()
        dv_files.VectorFile.write = real  # type: ignore[method-assign]
    assert done.version == 3 and len(written) == 2
    assert vector_files(uri) == {written[1]}  # the loser's file was deleted
    assert sorted(rows(uri)) == list(range(1, 20_000, 2))


def test_a_restored_manifest_stays_small_and_reads_the_vectors(tmp_path: Path) -> None:
    """A restore carries each file's vector as a descriptor of its file (absolute path):
    a few hundred bytes per run, however many rows it deletes; the partition reports the
    files its runs read at each cut, and the checkpoint's commit lists this table's."""
    uri = str(tmp_path / "state")
    files = new_table(uri)
    adds = [data_file(uri, f"f{i}", np.arange(i * 200_000, (i + 1) * 200_000), 1) for i in range(4)]
    commit_state(files, 1, adds, {}, {}, APP)
    deleted = {a.path: np.arange(0, 200_000, 2) for a in adds}  # 100k rows per file
    version = commit_state(files, 2, [], deleted, {}, APP).version
    live = StateFiles(uri, version).files.values()
    restored = [
        RestoredFile(
            f"{uri}/{f.path}",
            0,
            127,
            None,
            restored_state._run_vector(f, uri),
        )
        for f in live
    ]
    manifest = new_manifest(0, 1, 128, restored)
    assert len(manifest.to_json()) < 2_000
    dv_files.clear_cache()
    for run in manifest.runs:
        assert run.dv is not None and run.dv["storageType"] == "p"
        got = vector_rows(DeletionVector.from_json(run.dv), "")  # no table needed
        assert got.tolist() == list(range(0, 200_000, 2))
    read = manifest.vector_files()
    (name,) = {f.dv.relative_file() for f in live if f.dv is not None}
    assert read == [f"{uri}/{name}"]
    layout = SimpleNamespace(state_table=uri)
    acks = [
        Ack(2, "state/op/0", False, extra={VECTORS_READ: read}),
        Ack(2, "state/op/1", False, extra={VECTORS_READ: ["/elsewhere/state/x.bin"]}),
        Ack(2, "state/op/2", False),
    ]
    listed = checkpoint_commit._vectors_read(layout, acks)  # type: ignore[arg-type]
    assert listed is not None and json.loads(listed) == [name]
    assert checkpoint_commit._vectors_read(layout, acks[2:]) is None  # type: ignore[arg-type]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_retention_deletes_an_unreferenced_vector_file_and_keeps_a_referenced_one(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    uri = layout.state_table
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(20_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    commits = []
    for cid, start in ((2, 0), (3, 1), (4, 2)):
        commit = commit_state(files, cid, [], {a.path: np.arange(start, 20_000, 4)}, {}, APP)
        retention.record_removed(layout, retention.STATE, commit.version, commit.vectors_dropped)
        commits.append(commit)
    names = [StateFiles(uri, c.version).files[a.path].dv.relative_file() for c in commits]
    assert vector_files(uri) == set(names)
    # checkpoints 3 and 4 retained: the file of 2 is read by no retained version
    kept = [
        retention.Retained(3, commits[1].version, None),
        retention.Retained(4, commits[2].version, None),
    ]
    assert retention.apply(layout, kept) == 1
    assert vector_files(uri) == set(names[1:])
    assert sorted(rows(uri, commits[1].version)) == [k for k in range(20_000) if k % 4 > 1]
    # an orphan (a crash between the file and its log entry) goes with maintenance,
    # once older than the newest checkpoint's trigger; the referenced ones stay
    orphan = Path(uri, "deletion_vector_00000000-0000-0000-0000-000000000001.bin")
    orphan.write_bytes(b"\x01")
    for p in Path(uri).iterdir():
        if p.is_file():
            _age(p, 60)
    deleted = maintenance._unread_state_files(layout, kept, int(time.time() * 1000))
    assert deleted == 1 and not orphan.exists()
    assert vector_files(uri) == set(names[1:])
    assert sorted(rows(uri)) == [k for k in range(20_000) if k % 4 == 3]


def test_retention_keeps_a_vector_file_a_retained_checkpoint_lists_as_read(
    tmp_path: Path,
) -> None:
    """A claimed restore's run reads its file with the restored version's vector after
    the table replaced it: the checkpoints list the file, and retention keeps it until
    no retained checkpoint does."""
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    uri = layout.state_table
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(20_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    v2 = commit_state(files, 2, [], {a.path: np.arange(0, 20_000, 4)}, {}, APP).version
    restored = files.files[a.path].dv
    assert restored is not None
    name = restored.relative_file()
    pins = {VECTORS_READ_KEY: json.dumps([name])}
    c3 = commit_state(files, 3, [], {a.path: np.arange(1, 20_000, 4)}, pins, APP)
    assert c3.vectors_dropped == (name,)
    retention.record_removed(layout, retention.STATE, c3.version, c3.vectors_dropped)
    assert retention.pinned_vectors(layout, [retention.Retained(3, c3.version, None)]) == {name}
    assert retention.apply(layout, [retention.Retained(3, c3.version, None)]) == 0
    assert name in vector_files(uri)
    for p in Path(uri).iterdir():
        if p.is_file():
            _age(p, 60)
    now = int(time.time() * 1000)
    kept = [retention.Retained(3, c3.version, None)]
    assert maintenance._unread_state_files(layout, kept, now) == 0  # nor the orphan scan
    # the run was absorbed: checkpoint 4 lists nothing, and once 3 leaves the window
    c4 = commit_state(files, 4, [], {a.path: np.arange(2, 20_000, 4)}, {}, APP)
    retention.record_removed(layout, retention.STATE, c4.version, c4.vectors_dropped)
    assert retention.apply(layout, [retention.Retained(4, c4.version, None)]) == 2
    assert vector_files(uri) == {files.files[a.path].dv.relative_file()}
    assert v2 < c3.version and sorted(rows(uri)) == list(range(3, 20_000, 4))


def test_cache_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(dv_files, "CACHE_BYTES", 64 * 1024)
    for i in range(10):
        dv = DeletionVector.inline(np.arange(i, 4_000 + i))
        assert vector_rows(dv).tolist() == list(range(i, 4_000 + i))
    assert dv_files._CACHED[0] <= 64 * 1024


@pytest.mark.s3
def test_on_s3_a_vector_file_is_one_put_and_reads_back(s3_server: S3Server) -> None:
    """On S3 the commit's vector file is one object before its log entry; delta-rs and
    a ranged read get the same rows; a restore's listing check finds it."""
    from barriered.files import storage

    uri = s3_server.uri("dvfiles", "state")
    storage.register(uri, s3_server.storage_options)
    options = storage.delta_options(uri)
    create_table_with_add_actions(
        uri, DeltaSchema.from_arrow(SCHEMA), [], partition_by=["operator"],
        configuration=STATE_CONFIGURATION, storage_options=options,
    )  # fmt: skip
    files = StateFiles(uri)
    rel = "operator=op/a.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"k": np.arange(20_000), "v": np.ones(20_000, np.int64)}), sink)
    fs, root = storage.settings_for(uri).filesystem(uri)
    with fs.open_output_stream(f"{root}/{rel}") as out:
        out.write(sink.getvalue())
    size = sink.getvalue().size
    stats = json.dumps({"numRecords": 20_000})
    new = NewFile(rel, size, 20_000, {"operator": "op"}, 0, stats, np.empty(0, np.int64))
    commit_state(files, 1, [new], {}, {}, APP)
    commit_state(files, 2, [], {rel: np.arange(0, 20_000, 2)}, {}, APP)
    dv = files.files[rel].dv
    assert dv is not None and dv.storage_type == "u"
    table = pa.table(DeltaTable(uri, storage_options=options).scan().read_all())
    assert sorted(table["k"].to_pylist()) == list(range(1, 20_000, 2))
    dv_files.clear_cache()
    assert vector_rows(dv, uri).tolist() == list(range(0, 20_000, 2))
    point = SimpleNamespace(describe=lambda: "checkpoint 2", state_version=files.version)
    listed = [
        TableFile(f.path, f.size, f.rows, f.partition_values, f.stats, f.dv)
        for f in files.files.values()
    ]
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    sizes = {i.path: i.size for i in infos if i.size is not None}
    _check_vectors(uri, listed, point, sizes)  # type: ignore[arg-type]
    fs.delete_file(f"{root}/{dv.relative_file()}")
    with pytest.raises(RestoreError, match="is missing"):
        _check_vectors(uri, listed, point, {})  # type: ignore[arg-type]


def test_vector_files_stay_bounded_over_many_commits(tmp_path: Path) -> None:
    """30 commits each growing a large vector, one checkpoint retained: the vector
    files on disk stay those the retained version and the current one reference."""
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    uri = layout.state_table
    files = new_table(uri)
    a = data_file(uri, "a", np.arange(60_000), 1)
    commit_state(files, 1, [a], {}, {}, APP)
    for cid in range(2, 32):
        gone = {a.path: np.arange(cid, 60_000, 31)}
        commit = commit_state(files, cid, [], gone, {}, APP)
        retention.record_removed(layout, retention.STATE, commit.version, commit.vectors_dropped)
        retention.apply(layout, [retention.Retained(cid, commit.version, None)])
        assert len(vector_files(uri)) == 1  # the current (retained) version's only
    assert sorted(rows(uri)) == [0, *(k for k in range(60_000) if k % 31 == 1)]
