"""The keyed operator's live state without Spark: partitions that change keys batch after
batch, spill, cut, commit (some checkpoints aborted), retry a batch, restore at another
partition count; after every step each key's state equals a plain dict's, and every
committed version of the ``state`` table reads (delta-rs) as exactly the state at its cut.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from barriered.statestore import dv_files, merge_plan, state_files
from barriered.statestore.acks import DataFile
from barriered.statestore.key_groups import partition_key_groups
from barriered.statestore.live_manifest import RestoredFile, new_manifest
from barriered.statestore.live_state import LiveConfig, LiveState
from barriered.statestore.state_cache import StateCache
from barriered.statestore.state_commit import state_changes
from barriered.statestore.state_files import file_info, read_notes
from barriered.statestore.state_log import STATE_CONFIGURATION, StateFiles, commit_state

P = 8  # key groups
SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64()), ("name", pa.string())])


def key_group(key: int) -> int:
    return key % P


@dataclass
class Query:
    """A keyed operator's partitions over one state table, as Spark would run them."""

    root: Path
    partitions: int
    write_buffer: int = 1 << 20
    max_runs: int = 4
    values: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    restored: tuple[list[RestoredFile], bool] = ([], True)  # the files, claimed
    merges: int = 0  # cuts that merged some older table files, not all

    def __post_init__(self) -> None:
        self.cache = StateCache(str(self.root / "cache"), 1 << 30)
        self.config = LiveConfig(
            operator="op",
            key_columns=("k",),
            schema=SCHEMA,
            max_parallelism=P,
            table_uri=str(self.root / "snap" / "state"),
            private_uri=str(self.root / "snap" / "_live" / "op"),
            write_buffer=self.write_buffer,
            max_runs=self.max_runs,
        )

    def live(self, partition: int) -> LiveState:
        value = self.values.get(partition)
        if value is None:
            manifest = new_manifest(partition, self.partitions, P, *self.restored)
            return LiveState(
                self.config, self.cache, self.config.buffer_schema.empty_table(), manifest
            )
        return LiveState.from_value(self.config, self.cache, *value)

    def partition_of(self, key: int) -> int:
        return next(
            p
            for p in range(self.partitions)
            if key_group(key) in partition_key_groups(p, self.partitions, P)
        )

    def batch(self, changes: dict[int, dict[str, Any] | None]) -> None:
        """One micro-batch: per partition, look the keys up, then set or delete them."""
        by_partition: dict[int, dict[int, dict[str, Any] | None]] = {}
        for key, value in changes.items():
            by_partition.setdefault(self.partition_of(key), {})[key] = value
        for partition, mine in by_partition.items():
            live = self.live(partition)
            keys = pa.table({"k": pa.array(sorted(mine), pa.int64())})
            groups = np.array([key_group(k) for k in sorted(mine)], np.int32)
            found = live.lookup(keys, groups)
            rows = [mine[k] or {"total": None, "name": None} for k in sorted(mine)]
            new = pa.table(
                {
                    "k": keys["k"],
                    "total": [r["total"] for r in rows],
                    "name": [r["name"] for r in rows],
                },
                schema=SCHEMA,
            )
            keep = np.array([mine[k] is not None for k in sorted(mine)])
            live.apply(keys, groups, found, new, keep)
            live.spill_if_full()
            self.values[partition] = live.value()

    def state(self, keys: list[int]) -> dict[int, dict[str, Any]]:
        """What the live state holds for ``keys``."""
        out = {}
        for partition in range(self.partitions):
            mine = sorted(k for k in keys if self.partition_of(k) == partition)
            if not mine:
                continue
            live = self.live(partition)
            groups = np.array([key_group(k) for k in mine], np.int32)
            found = live.lookup(pa.table({"k": pa.array(mine, pa.int64())}), groups)
            for i, row in zip(found.index, found.state.to_pylist(), strict=True):
                out[mine[int(i)]] = {"total": row["total"], "name": row["name"]}
        return out

    def cut(self, checkpoint_id: int, base: int | None) -> list[DataFile]:
        files: list[DataFile] = []
        for partition in range(self.partitions):
            live = self.live(partition)
            flushed = live.flush(checkpoint_id, base)
            self.values[partition] = live.value()
            if flushed.written is not None:
                uri = f"{self.config.table_uri}/{flushed.written.rel}"
                self.merges += bool(read_notes(uri).absorbs)
            files += [
                DataFile(
                    p.rel,
                    p.size,
                    p.rows,
                    {"operator": "op"},
                    p.modification_time,
                    p.stats,
                    p.first_cut,
                )
                for p in flushed.files
            ]
        return files


def new_table(uri: str) -> StateFiles:
    schema = pa.schema(
        [
            ("operator", pa.string()),
            *SCHEMA,
            ("key_group", pa.int32()),
            ("checkpoint_id", pa.int64()),
        ]
    )
    create_table_with_add_actions(
        uri,
        DeltaSchema.from_arrow(schema),
        [],
        partition_by=["operator"],
        configuration=STATE_CONFIGURATION,
    )
    return StateFiles(uri)


def commit(files: StateFiles, checkpoint_id: int, acked: list[DataFile]) -> int:
    adds, deleted, removable = state_changes(files.uri, files.refresh().files, acked, ["op"])
    return commit_state(
        files, checkpoint_id, adds, deleted, {}, "barriered.state", removable=removable
    ).version


def table_state(uri: str, version: int) -> dict[int, dict[str, Any]]:
    table = pa.table(DeltaTable(uri, version=version).scan().read_all())
    rows = table.to_pylist()
    keys = [r["k"] for r in rows]
    assert len(keys) == len(set(keys)), "a key twice in one version"
    assert all(r["key_group"] == key_group(r["k"]) for r in rows)
    return {r["k"]: {"total": r["total"], "name": r["name"]} for r in rows}


def restored_files(uri: str, version: int) -> tuple[list[RestoredFile], bool]:
    """The files of ``version`` and whether a restore into the same path claims them
    (the latest version holds just them, alike)."""
    files = StateFiles(uri, version).files
    same = StateFiles(uri).files == files
    out = []
    for f in files.values():
        stats = json.loads(f.stats or "{}")
        out.append(
            RestoredFile(
                f"{uri}/{f.path}",
                int(stats["minValues"]["key_group"]),
                int(stats["maxValues"]["key_group"]),
                dv=None if f.dv is None else f.dv.absolute(uri).to_json(),  # as restored
                rel=f.path if same else None,
            )
        )
    return out, same


def test_a_batch_reads_and_writes_only_the_keys_it_touches(tmp_path: Path) -> None:
    query = Query(tmp_path, partitions=2)
    files = new_table(query.config.table_uri)
    query.batch({k: {"total": k, "name": f"n{k}"} for k in range(1000)})
    query.batch({5: {"total": 50, "name": "x"}, 6: None})
    v1 = commit(files, 1, query.cut(1, None))
    expected = {k: {"total": k, "name": f"n{k}"} for k in range(1000) if k != 6}
    expected[5] = {"total": 50, "name": "x"}
    assert table_state(files.uri, v1) == expected
    assert query.state(list(range(1000))) == expected
    query.batch({7: {"total": 70, "name": "y"}, 8: None, 5000: {"total": 1, "name": "new"}})
    # the cut writes the three changed keys, one file per partition, and deletes their
    # previous rows with deletion vectors
    acked = query.cut(2, 1)
    written = [f for f in acked if f.cut == 2]
    assert sorted(f.rows for f in written) == [1, 2]  # 8 is a deleted key's marker row
    v2 = commit(files, 2, acked)
    expected[7] = {"total": 70, "name": "y"}
    del expected[8]
    expected[5000] = {"total": 1, "name": "new"}
    assert table_state(files.uri, v2) == expected
    assert table_state(files.uri, v1)[8] == {"total": 8, "name": "n8"}
    # one row deleted in each partition's first file (7's, 8's previous rows), and the
    # marker of 8 hidden in partition 0's new file
    dvs = [f.dv for f in files.files.values() if f.dv is not None]
    assert [dv.cardinality for dv in dvs] == [1, 1, 1]


def test_a_cut_past_max_runs_merges_the_newest_files_and_leaves_a_large_one(
    tmp_path: Path,
) -> None:
    query = Query(tmp_path, partitions=1, max_runs=4)
    files = new_table(query.config.table_uri)
    expected = {k: {"total": k, "name": "base"} for k in range(400)}
    query.batch(dict(expected))
    base_file = commit(files, 1, query.cut(1, None))
    for cid in range(2, 6):  # four small cuts: the fourth finds 4 table files
        change = {cid: {"total": -cid, "name": "small"}, 100 + cid: None}
        query.batch(change)
        expected[cid] = {"total": -cid, "name": "small"}
        del expected[100 + cid]
        version = commit(files, cid, query.cut(cid, cid - 1))
        assert table_state(files.uri, version) == expected
    # the fourth cut merged the three small files into its own, not the large one
    assert query.merges == 1
    live = query.live(0)
    assert [int(file_info(r.uri).starts[-1]) for r in live.manifest.runs] == [8, 400]
    paths = files.refresh().files
    assert len(paths) == 2 and files.version == base_file + 4
    # markers of keys deleted in the large file stay (hidden) in the merged one
    assert query.state(list(range(400))) == expected


@pytest.mark.parametrize("seed", range(8))
def test_random_changes_cuts_aborts_retries_and_restores(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    if seed % 3 == 0:  # every deletion vector in a file (seeds 0, 3, 6), else by size
        monkeypatch.setattr(dv_files, "INLINE_MAX", 0)
        if seed != 3:  # and every read from there (no per-process cache)
            monkeypatch.setattr(dv_files, "CACHE_BYTES", 0)
        dv_files.clear_cache()
    if seed % 2:  # files of many small chunks: lookups and merges cross chunk bounds
        for module in (state_files, merge_plan):
            monkeypatch.setattr(module, "CHUNK_ROWS", rng.choice([5, 20]))
    # chunks of several row groups: a restore with a cold cache reads only the row groups
    # a lookup's hashes fall in (seeds 2, 3, 6, 7)
    cold = seed % 4 >= 2
    if cold:
        monkeypatch.setattr(state_files, "ROW_GROUP_ROWS", rng.choice([1, 2, 3]))
    # merges of the newest files only, over older ones the changes have not caught up with
    monkeypatch.setattr(merge_plan, "MERGE_RATIO", rng.choice([0.25, 1, 4]))
    query = Query(
        tmp_path,
        partitions=rng.choice([1, 2, 3]),
        write_buffer=rng.choice([1 << 20, 3000]),
        max_runs=rng.choice([2, 4, 6]),
    )
    files = new_table(query.config.table_uri)
    model: dict[int, dict[str, Any]] = {}
    committed: dict[int, tuple[int, dict[int, dict[str, Any]]]] = {}
    base = previous_base = None
    universe = list(range(300))
    for checkpoint_id in range(1, 21):
        for _ in range(rng.randint(1, 3)):
            before = dict(query.values)
            changes: dict[int, dict[str, Any] | None] = {}
            for key in rng.sample(universe, rng.randint(1, 60)):
                if rng.random() < 0.25:
                    changes[key] = None
                else:
                    changes[key] = {"total": rng.randint(0, 9), "name": f"v{rng.randint(0, 3)}"}
            if rng.random() < 0.2:  # a failed attempt of the batch, then its retry
                query.batch(changes)
                query.values = dict(before)
            query.batch(changes)
            for key, value in changes.items():
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            assert query.state(universe) == model
        # a cut planned before the previous checkpoint completed knows an older base:
        # it reports that checkpoint's files again
        planned_base = previous_base if rng.random() < 0.3 else base
        acked = query.cut(checkpoint_id, planned_base)
        if rng.random() < 0.25:
            continue  # aborted: nothing committed, base stays
        version = commit(files, checkpoint_id, acked)
        committed[checkpoint_id] = (version, dict(model))
        previous_base, base = base, checkpoint_id
        assert table_state(files.uri, version) == model
        assert query.state(universe) == model
    for cid, (version, expected) in committed.items():
        assert table_state(files.uri, version) == expected, f"checkpoint {cid}"
    chunks = [len(file_info(f"{files.uri}/{f}").chunks) for f in files.refresh().files]
    assert max(chunks) > 1 if seed % 2 else max(chunks) == 1
    if not committed:
        return
    if cold:
        sizes = [file_info(f"{files.uri}/{f}").starts for f in files.refresh().files]
        assert max(len(s) for s in sizes) > 2  # files of several row groups
    # restore the newest and an older checkpoint into other partition counts
    for cid in (max(committed), min(committed)):
        version, expected = committed[cid]
        restored = Query(
            tmp_path / f"r{cid}",
            partitions=rng.choice([1, 2, 4]),
            max_runs=3,
            restored=restored_files(files.uri, version),
        )
        restored.config = query.config.__class__(**{**query.config.__dict__, "max_runs": 3})
        if cold:  # another machine: none of the files cached
            restored.cache = StateCache(str(tmp_path / f"cold{cid}"), 1 << 30)
            few = rng.sample(universe, 3)
            assert restored.state(few) == {k: expected[k] for k in few if k in expected}
        else:
            restored.cache = query.cache
        assert restored.state(universe) == expected
        restored.batch({1: {"total": 100, "name": "after"}, 2: None})
        expected = {**expected, 1: {"total": 100, "name": "after"}}
        expected.pop(2, None)
        assert restored.state(universe) == expected
        # its first cut writes the whole state and replaces every older row, or, with
        # the restored files its own, what changed
        v = commit(files, 100 + cid, restored.cut(100 + cid, cid))
        assert table_state(files.uri, v) == expected
        assert restored.state(universe) == expected


def test_a_cold_lookup_of_a_few_keys_reads_only_their_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore on a machine without the files cached: a batch of a few keys reads the
    row groups their hashes fall in, not the chunk, and hashes only the rows that may
    hold its keys, until as many row groups as the chunk has were read so (a batch of
    more keys than half the chunk's row groups too); then the chunk is cached whole.
    Every answer equals the warm machine's."""
    monkeypatch.setattr(state_files, "ROW_GROUP_ROWS", 16)
    query = Query(tmp_path, partitions=1)
    files = new_table(query.config.table_uri)
    expected = {k: {"total": k, "name": f"n{k}"} for k in range(4000)}
    query.batch(dict(expected))
    version = commit(files, 1, query.cut(1, None))
    (uri,) = [f"{files.uri}/{f}" for f in files.refresh().files]
    info = file_info(uri)
    assert info.hashes is not None and len(info.hashes) == len(info.starts) - 1 == 250
    assert all(b - a > 1 for a, b in ((c.first, c.end) for c in info.chunks))
    read: list[list[int]] = []
    built: list[int] = []
    load_rows = state_files.load_rows

    def counted(uri: str, info: Any, groups: Any, columns: Any, keys: Any = None) -> pa.Table:
        read.append(list(groups))
        unit = load_rows(uri, info, groups, columns, keys)
        built.append(unit.num_rows)
        return unit

    monkeypatch.setattr(state_files, "load_rows", counted)
    restored = Query(tmp_path / "r", partitions=1, restored=restored_files(files.uri, version))
    restored.config = query.config
    restored.cache = StateCache(str(tmp_path / "cold"), 1 << 30)
    few = [7, 1234, 3999]
    assert restored.state(few) == {k: expected[k] for k in few}
    assert [len(g) for g in read] == [3]  # of the chunk's 250: one of 16 rows per key
    assert built == [3]  # of the 48 rows read, only the keys' own are hashed and kept
    assert not any(restored.cache.has(uri, c.part) for c in info.chunks)
    read.clear()
    many = list(range(0, 4000, 20))  # 200 keys in more than half the chunk's row groups
    assert restored.state(many) == {k: expected[k] for k in many}
    assert len(read) == 1 and 125 < len(read[0]) <= 200 and built[-1] == len(many)
    assert not any(restored.cache.has(uri, c.part) for c in info.chunks)
    assert restored.state(list(range(4000))) == expected  # read once over: cached whole
    assert all(restored.cache.has(uri, c.part) for c in info.chunks)


def test_a_lookup_prefilters_only_on_exactly_compared_key_types() -> None:
    """Rows that may hold the keys: every key column's value among the keys' (nulls
    match nulls; a superset for several columns); no prefilter on a float column
    (-0.0 and NaN hash alike but compare otherwise)."""
    rows = pa.table({"a": pa.array([1, 2, None, 1]), "b": pa.array(["x", "y", "z", "y"])})
    keys = pa.table({"a": pa.array([1, None]), "b": pa.array(["x", "z"])})
    mask = state_files.candidates(rows, keys, ["a", "b"])
    assert mask is not None and mask.tolist() == [True, False, True, False]
    assert state_files.candidates(rows, keys, ["a"]).tolist() == [True, False, True, True]
    floats = pa.table({"a": pa.array([0.0, -0.0])})
    assert state_files.candidates(floats, floats.slice(0, 1), ["a"]) is None
