"""The keyed operator's engine without Spark: the vectorized merge, the per-key form on
it, snapshots of the Arrow state and the lazy restore of a key group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from barriered.examples import RunningTotals
from barriered.statestore.acks import read_acks
from barriered.statestore.contract import Contract
from barriered.statestore.keyed import KeyedOperator, OperatorSpec, RestoredFiles, from_blob
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.vectorized import PerKey, merge

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
    ("user_id", "total"),
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
    records: list[tuple[str, int]], markers: list[tuple[int, dict[str, Any]]] = ()
) -> pd.DataFrame:  # type: ignore[assignment]
    rows = [(u, a, 0, i, None, None, 1) for i, (u, a) in enumerate(records)]
    rows += [(None, None, None, cid, cid, json.dumps(meta), 1) for cid, meta in markers]
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


def test_a_marker_writes_the_state_table_as_one_parquet_file_and_a_restore_loads_it(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    meta = {"path": layout.root, "base": None, "epoch": 0}
    live = Live()
    operator = KeyedOperator(SPEC, RunningTotals())
    out = list(operator((1,), iter([batch([("a", 2), ("b", 3), ("a", 4)], [(1, meta)])]), live))
    assert pd.concat(out).to_dict("records") == [
        {"user_id": "a", "total": 6},
        {"user_id": "b", "total": 3},
    ]
    assert live.get is not None and from_blob(live.get[0]).to_pylist() == [
        {"user_id": "a", "total": 6, "count": 2},
        {"user_id": "b", "total": 3, "count": 1},
    ]
    ack = read_acks(layout, 1)["state/totals/1"]
    assert ack.changed and ack.rows == 2 and len(ack.files) == 1
    path = Path(layout.state_table, ack.files[0].path)
    assert ack.files[0].path.startswith("operator=totals/key_group=1/ckpt-1-")
    assert pq.read_table(path).to_pylist() == [
        {"user_id": "a", "total": 6, "count": 2, "checkpoint_id": 1},
        {"user_id": "b", "total": 3, "count": 1, "checkpoint_id": 1},
    ]
    # Unchanged since the base checkpoint 1: acknowledged without a file.
    list(operator((1,), iter([batch([], [(2, {**meta, "base": 1})])]), live))
    assert read_acks(layout, 2)["state/totals/1"].files == ()
    # A restored run: the key group has no live state and loads its file on first call.
    restored = KeyedOperator(SPEC, PerKeyTotals(), RestoredFiles(1, {1: (str(path),)}))
    fresh = Live()
    out = list(restored((1,), iter([batch([("b", 10)])]), fresh))
    assert pd.concat(out).to_dict("records") == [{"user_id": "b", "total": 13}]
    assert fresh.get is not None
    assert sorted(from_blob(fresh.get[0]).to_pylist(), key=lambda r: r["user_id"]) == [
        {"user_id": "a", "total": 6, "count": 2},
        {"user_id": "b", "total": 13, "count": 2},
    ]
    # A key group without a snapshot file starts empty.
    other = Live()
    list(restored((2,), iter([batch([("z", 1)])]), other))
    assert other.get is not None and from_blob(other.get[0]).to_pylist() == [
        {"user_id": "z", "total": 1, "count": 1}
    ]
