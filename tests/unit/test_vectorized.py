"""The keyed operator's engine without Spark: the vectorized merge, the per-key form on
it, the file a cut writes and the lazy restore of a partition's keys."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from barriered.errors import KeyedStateError
from barriered.examples import RunningTotals
from barriered.statestore.acks import read_acks
from barriered.statestore.contract import Contract
from barriered.statestore.key_groups import key_group_for_key
from barriered.statestore.keyed import KeyedOperator, LiveSettings, OperatorSpec, Restored
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.live_manifest import RestoredFile
from barriered.statestore.state_files import FileNotes
from barriered.statestore.vectorized import PerKey, merge
from file_tree import tree

SCHEMA = pa.schema([("user_id", pa.string()), ("total", pa.int64()), ("count", pa.int64())])
KEY_TYPE = {"type": "struct", "fields": [
    {"name": "user_id", "type": "string", "nullable": True, "metadata": {}}]}  # fmt: skip
STATE_TYPE = {"type": "struct", "fields": [
    {"name": "total", "type": "long", "nullable": True, "metadata": {}},
    {"name": "count", "type": "long", "nullable": True, "metadata": {}}]}  # fmt: skip
COLUMNS = ("user_id", "amount", "_channel", "_seq", "_barrier", "_barrier_meta", "_key_group")
SPEC = OperatorSpec(
    "totals", ("user_id",), "user_id string", "total long, count long",
    "user_id string, total long", 4, json.dumps(KEY_TYPE), json.dumps(STATE_TYPE), COLUMNS,
    ("user_id", "total"), partitions=1,
)  # fmt: skip


class PerKeyTotals:
    """The per-key form of RunningTotals; a negative amount clears the key."""

    state_schema = "total long, count long"
    output_schema = "user_id string, total long"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> pd.DataFrame:
        if (rows["amount"] < 0).any():
            state.clear()
            return pd.DataFrame({"user_id": [key[0]], "total": [0]})
        current = state.get() or {"total": 0, "count": 0}
        total = int(current["total"]) + int(rows["amount"].sum())
        state.update({"total": total, "count": int(current["count"]) + len(rows)})
        return pd.DataFrame({"user_id": [key[0]], "total": [total]})


class Live:
    """What applyInPandasWithState hands the function: a GroupState."""

    def __init__(self) -> None:
        self.exists = False
        self.get: tuple[Any, ...] | None = None

    def update(self, value: tuple[Any, ...]) -> None:
        self.exists, self.get = True, value


def contract(method: str) -> Contract:
    return Contract("Totals", "totals", method, ("user_id",), SCHEMA, ("user_id", "total"))


def state(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA
    )


def batch(
    records: list[tuple[str, int]],
    markers: list[tuple[int, dict[str, Any]]] = (),  # type: ignore[assignment]
    group: int = 1,
) -> pd.DataFrame:
    """Rows of key group ``group`` (of partition 0), and a marker row for it per
    checkpoint."""
    rows: list[tuple[Any, ...]] = [
        (u, a, 0, i, None, None, group) for i, (u, a) in enumerate(records)
    ]
    rows += [(None, None, -1, group, cid, json.dumps(meta), group) for cid, meta in markers]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_process_batch_sees_and_replaces_only_the_keys_of_its_rows() -> None:
    seen: list[list[str]] = []

    class Spy(RunningTotals):
        def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
            seen.append(sorted(state["user_id"]))
            return super().process_batch(rows, state)

    before = state([("a", 5, 1), ("b", 7, 1), ("c", 1, 1)])
    rows = pd.DataFrame({"user_id": ["b", "d", "b"], "amount": [1, 2, 3]})
    output, after = merge(before, rows, Spy(), contract("process_batch"))
    assert seen == [["b"]]  # only the state of the keys present
    assert output is not None and output.to_dict("records") == [
        {"user_id": "b", "total": 11},
        {"user_id": "d", "total": 2},
    ]
    assert after.schema == SCHEMA
    assert sorted(after.to_pylist(), key=lambda r: r["user_id"]) == [
        {"user_id": "a", "total": 5, "count": 1},
        {"user_id": "b", "total": 11, "count": 3},
        {"user_id": "c", "total": 1, "count": 1},
        {"user_id": "d", "total": 2, "count": 1},
    ]


def test_the_per_key_form_runs_on_the_same_merge_and_can_clear_a_key() -> None:
    processor = PerKey(PerKeyTotals(), contract("process"))
    before = state([("a", 5, 1), ("b", 7, 1)])
    rows = pd.DataFrame({"user_id": ["b", "a", "e"], "amount": [-1, 4, 6]})
    output, after = merge(before, rows, processor, contract("process"))
    assert output is not None and output.to_dict("records") == [
        {"user_id": "b", "total": 0},
        {"user_id": "a", "total": 9},
        {"user_id": "e", "total": 6},
    ]
    assert sorted(after.to_pylist(), key=lambda r: r["user_id"]) == [
        {"user_id": "a", "total": 9, "count": 2},
        {"user_id": "e", "total": 6, "count": 1},
    ]


def settings(tmp_path: Path) -> LiveSettings:
    return LiveSettings(32 << 20, 8, 1 << 30, str(tmp_path / "cache"))


def operator_at(tmp_path: Path, processor: Any, spec: OperatorSpec = SPEC) -> KeyedOperator:
    root = SnapshotLayout.at(str(tmp_path / "snap")).root
    return KeyedOperator(spec, processor, root, settings(tmp_path))


def test_a_marker_writes_the_changed_keys_as_one_file_and_a_restore_reads_it(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    meta = {"path": layout.root, "base": None, "epoch": 0}
    live = Live()
    operator = operator_at(tmp_path, RunningTotals())
    out = list(operator((0,), iter([batch([("a", 2), ("b", 3), ("a", 4)], [(1, meta)])]), live))
    assert pd.concat(out).to_dict("records") == [
        {"user_id": "a", "total": 6},
        {"user_id": "b", "total": 3},
    ]
    ack = read_acks(layout, 1)["state/totals/1"]
    assert ack.changed and ack.rows == 2 and len(ack.files) == 1
    path = Path(layout.state_table, ack.files[0].path)
    assert ack.files[0].path.startswith("operator=totals/p0-c1-")
    assert sorted(pq.read_table(path).to_pylist(), key=lambda r: r["user_id"]) == [
        {"user_id": "a", "total": 6, "count": 2, "key_group": 1, "checkpoint_id": 1},
        {"user_id": "b", "total": 3, "count": 1, "key_group": 1, "checkpoint_id": 1},
    ]
    # The key column, unique in the file, has no dictionary; the state columns keep one.
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {c.path_in_schema: c.encodings for c in map(chunks.column, range(4))}
    assert "RLE_DICTIONARY" not in encodings["user_id"]
    assert "RLE_DICTIONARY" in encodings["total"] and "RLE_DICTIONARY" in encodings["count"]
    # Nothing changed since the base checkpoint 1: acknowledged without a file.
    list(operator((0,), iter([batch([], [(2, {**meta, "base": 1})])]), live))
    assert read_acks(layout, 2)["state/totals/1"].files == ()
    # A restored run reads the keys of its rows from the restored file on its first call
    # (key group 2 has no row there and starts empty).
    restored = KeyedOperator(
        SPEC,
        PerKeyTotals(),
        layout.root,
        settings(tmp_path / "another-machine"),
        Restored(1, (RestoredFile(str(path), 1, 1),)),
    )
    rows = pd.concat([batch([("b", 10)]), batch([("z", 1)], group=2)], ignore_index=True)
    out = list(restored((0,), iter([rows]), Live()))
    assert pd.concat(out).to_dict("records") == [
        {"user_id": "b", "total": 13},
        {"user_id": "z", "total": 1},
    ]


def test_a_cut_writes_one_file_for_the_call_with_its_key_groups_listed_in_the_footer(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    meta = {"path": layout.root, "base": None, "epoch": 0}
    operator, live = operator_at(tmp_path, RunningTotals()), Live()
    first = [batch([("a", 1)], [(1, meta)], group=1), batch([("c", 5)], [(1, meta)], group=3)]
    list(operator((0,), iter(first), live))
    acks = read_acks(layout, 1)
    assert {p: a.rows for p, a in acks.items()} == {"state/totals/1": 1, "state/totals/3": 1}
    # one acknowledgement file for the call's key groups: one write and one fsync
    assert [f.name for f in Path(layout.acks_dir(1)).iterdir()] == ["state~totals~1+1.e0.json"]
    assert acks["state/totals/1"].files == acks["state/totals/3"].files  # one file
    parquet = pq.ParquetFile(Path(layout.state_table, acks["state/totals/1"].files[0].path))
    notes = FileNotes.read(parquet.metadata.metadata)
    assert notes.groups == (1, 3) and notes.chunks == ((0, 1),)  # one chunk, one row group
    rows = parquet.read().sort_by("key_group")
    assert rows.select(["user_id", "key_group"]).to_pylist() == [
        {"user_id": "a", "key_group": 1},
        {"user_id": "c", "key_group": 3},
    ]
    # Only key group 3 changes before checkpoint 2: key group 1 acknowledges without a file.
    base = {**meta, "base": 1}
    second = [batch([], [(2, base)], group=1), batch([("c", 1)], [(2, base)], group=3)]
    list(operator((0,), iter(second), live))
    acks = read_acks(layout, 2)
    assert acks["state/totals/1"].files == () and not acks["state/totals/1"].changed
    assert acks["state/totals/3"].changed and acks["state/totals/3"].rows == 1


def test_a_key_the_processor_adds_outside_its_rows_gets_its_own_key_group(
    tmp_path: Path,
) -> None:
    class AddsZ(RunningTotals):
        def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
            output, new = super().process_batch(rows, state)
            extra = pd.DataFrame({"user_id": ["z"], "total": [0], "count": [0]})
            return output, pd.concat([new, extra], ignore_index=True)

    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    meta = {"path": layout.root, "base": None, "epoch": 0}
    list(operator_at(tmp_path, AddsZ())((0,), iter([batch([("a", 1)], [(1, meta)])]), Live()))
    ack = read_acks(layout, 1)["state/totals/1"]
    rows = pq.read_table(Path(layout.state_table, ack.files[0].path)).to_pylist()
    groups = {r["user_id"]: r["key_group"] for r in rows}
    assert groups == {"a": 1, "z": key_group_for_key(["z"], ["string"], 4)}


def test_live_state_of_other_partitions_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    meta = {"path": layout.root, "base": None, "epoch": 0}
    live = Live()
    list(operator_at(tmp_path, RunningTotals())((0,), iter([batch([("a", 1)], [(1, meta)])]), live))
    before, kept = tree(tmp_path), live.get
    two = operator_at(tmp_path, RunningTotals(), replace(SPEC, partitions=2))
    with pytest.raises(KeyedStateError) as err:  # partition 1 of 2 groups by 0
        list(two((0,), iter([batch([("a", 5)], [(2, {**meta, "base": 1})])]), live))
    assert str(err.value) == (
        "keyed operator 'totals': the live state in Spark's checkpoint of the call for "
        "partition 1 of 2 was written for partition 0 of 1; nothing was written. Restore "
        'the latest checkpoint into a new checkpoint location (.option("restoreFrom", '
        '"latest"))'
    )
    assert tree(tmp_path) == before and live.get == kept
