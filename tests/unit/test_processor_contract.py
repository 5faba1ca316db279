"""A keyed processor's contract, without Spark: a wrong return, a missing output column or
a key held twice in the new state is a ProcessorError naming the processor, the method
and the contract (nothing of the batch is kept: no acknowledgement, no snapshot file);
state fields of every type Delta stores round-trip through both forms, the live state
and a snapshot; a state field of another type is refused where the processor is
declared, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from barriered.errors import ConfigError, ProcessorError
from barriered.statestore.acks import read_acks
from barriered.statestore.contract import Contract
from barriered.statestore.keyed import KeyedOperator, LiveSettings, OperatorSpec, Restored
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.live_manifest import RestoredFile
from barriered.statestore.state_schema import columns_schema, struct_schema
from file_tree import tree
from typed_processors import (
    EVERY_TYPE,
    VALUES,
    DropsTotal,
    KeepsEveryType,
    KeepsEveryTypeBatch,
    KeepsKeysTwice,
    PerKeyForgetsCount,
    PerKeyReturnsDict,
    ReturnsNone,
    TextTotals,
)

COLUMNS = ("user_id", "amount", "_channel", "_seq", "_barrier", "_barrier_meta", "_key_group")


class Live:
    """What applyInPandasWithState hands the function: a GroupState."""

    def __init__(self) -> None:
        self.exists = False
        self.get: tuple[Any, ...] | None = None

    def update(self, value: tuple[Any, ...]) -> None:
        self.exists, self.get = True, value


def _spark_json(ddl: list[tuple[str, Any]]) -> str:
    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in ddl]
    return json.dumps({"type": "struct", "fields": fields})


def spec(
    state: list[tuple[str, Any]], output: tuple[str, ...] = ("user_id", "total")
) -> OperatorSpec:
    return OperatorSpec(
        operator="totals",
        key_columns=("user_id",),
        key_schema="user_id string",
        state_schema="(see state_type)",
        output_schema="(see output_columns)",
        max_parallelism=4,
        key_type=_spark_json([("user_id", "string")]),
        state_type=_spark_json(state),
        input_columns=COLUMNS,
        output_columns=output,
        partitions=1,  # one partition (group 0) of key groups 0-3
    )


def settings(tmp_path: Path) -> LiveSettings:
    return LiveSettings(32 << 20, 8, 1 << 30, str(tmp_path / "cache"))


TOTALS = spec([("total", "long"), ("count", "long")])


def batch(records: list[tuple[str, int]], marker: dict[str, Any] | None = None) -> pd.DataFrame:
    rows: list[tuple[Any, ...]] = [(u, a, 0, i, None, None, 1) for i, (u, a) in enumerate(records)]
    if marker is not None:
        rows.append((None, None, None, 1, 1, json.dumps(marker), 1))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def run_once(
    processor: Any,
    tmp_path: Path,
    records: list[tuple[str, int]],
    operator_spec: OperatorSpec = TOTALS,
) -> tuple[list[pd.DataFrame], Live]:
    """One call of the operator with ``records`` and a marker of checkpoint 1."""
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    marker = {"path": layout.root, "base": None, "epoch": 0}
    live = Live()
    operator = KeyedOperator(operator_spec, processor, layout.root, settings(tmp_path))
    out = list(operator((0,), iter([batch(records, marker)]), live))
    return out, live


def refused(processor: Any, tmp_path: Path, operator_spec: OperatorSpec = TOTALS) -> str:
    """Run ``processor`` on one batch with a marker; return the ProcessorError's message
    after checking that nothing was written (no acknowledgement, no snapshot file)."""
    (tmp_path / "snap").mkdir(parents=True)
    before = tree(tmp_path)
    with pytest.raises(ProcessorError) as error:
        run_once(processor, tmp_path, [("a", 1), ("b", 2)], operator_spec)
    assert tree(tmp_path) == before
    return str(error.value)


CONTRACT = "The contract: process_batch(rows, state) returns a tuple (output, new_state)"
PER_KEY_CONTRACT = "The contract: process(key, rows, state) returns None or a DataFrame"


def test_process_batch_returning_none_is_refused_naming_the_processor(tmp_path: Path) -> None:
    message = refused(ReturnsNone(), tmp_path)
    assert message.startswith(
        "processor ReturnsNone (operator 'totals'): process_batch() returned None, not a "
        "tuple (output, new_state)."
    )
    assert CONTRACT in message


def test_an_output_missing_a_column_is_refused_not_committed_null(tmp_path: Path) -> None:
    message = refused(DropsTotal(), tmp_path)
    assert message.startswith(
        "processor DropsTotal (operator 'totals'): process_batch() returned output that "
        "lacks output column(s) ['total'] and has column(s) ['totl'] that output_schema "
        "does not declare (output_schema: ['user_id', 'total'])."
    )
    assert CONTRACT in message


def test_a_key_held_twice_in_the_new_state_is_refused_naming_the_key(tmp_path: Path) -> None:
    # The state of 'a' given to the processor, and its new state: 'a' twice.
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    operator = KeyedOperator(TOTALS, KeepsKeysTwice(), layout.root, settings(tmp_path))
    live = Live()
    list(operator((0,), iter([batch([("a", 1)])]), live))
    assert live.get is not None
    blob = live.get
    marker = {"path": layout.root, "base": None, "epoch": 0}
    layout_dir = tmp_path / "snap"
    layout_dir.mkdir()
    before = tree(tmp_path)
    with pytest.raises(ProcessorError) as error:
        list(operator((0,), iter([batch([("a", 2)], marker)]), live))
    assert str(error.value).startswith(
        "processor KeepsKeysTwice (operator 'totals'): process_batch() returned a new_state "
        "that holds the key {'user_id': 'a'} 2 times (each key's state is one row)."
    )
    assert live.get == blob and tree(tmp_path) == before  # the live state is unchanged


def test_a_state_value_of_another_type_is_refused_naming_the_field(tmp_path: Path) -> None:
    message = refused(TextTotals(), tmp_path)
    assert message.startswith(
        "processor TextTotals (operator 'totals'): process_batch() returned a new_state "
        "whose column 'total' does not hold int64 values as declared"
    )


def test_per_key_process_breaking_the_contract_is_refused(tmp_path: Path) -> None:
    message = refused(PerKeyReturnsDict(), tmp_path / "dict")
    assert message.startswith(
        "processor PerKeyReturnsDict (operator 'totals'): process() returned a dict as "
        "output, not a DataFrame or None."
    )
    assert PER_KEY_CONTRACT in message
    message = refused(PerKeyForgetsCount(), tmp_path / "count")
    assert message.startswith(
        "processor PerKeyForgetsCount (operator 'totals'): process() called state.update() "
        "without the state field(s) ['count']."
    )


def _spark_type(ddl: str) -> Any:
    """The JSON form of the few DDL types of EVERY_TYPE that are not JSON names."""
    nested = {
        "int": "integer",
        "array<bigint>": {"type": "array", "elementType": "long", "containsNull": True},
        "map<string,bigint>": {
            "type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True
        },
        "struct<n:bigint,tags:array<string>>": {"type": "struct", "fields": [
            {"name": "n", "type": "long", "nullable": True, "metadata": {}},
            {"name": "tags", "nullable": True, "metadata": {},
             "type": {"type": "array", "elementType": "string", "containsNull": True}},
        ]},
    }  # fmt: skip
    return nested.get(ddl, ddl)


ALL_TYPES = spec([(n, _spark_type(t)) for n, t, _ in EVERY_TYPE], output=("user_id", "seen"))


@pytest.mark.parametrize("processor", [KeepsEveryType(), KeepsEveryTypeBatch()])
def test_state_of_every_type_delta_stores_round_trips_live_and_through_a_snapshot(
    processor: Any, tmp_path: Path
) -> None:
    schema = columns_schema(ALL_TYPES.to_dict())
    expected = pa.Table.from_pylist([{"user_id": "a", **VALUES}], schema=schema).to_pylist()
    out, live = run_once(processor, tmp_path, [("a", 1)], ALL_TYPES)
    assert pd.concat(out).to_dict("records") == [{"user_id": "a", "seen": False}]
    # The snapshot file the cut wrote: the state, typed, with its key group and checkpoint.
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    ack = read_acks(layout, 1)["state/totals/1"]
    path = str(Path(layout.state_table, ack.files[0].path))
    written = pq.read_table(path).to_pylist()
    assert written == [{**expected[0], "key_group": 1, "checkpoint_id": 1}]
    # The live state read back by the next batch (from the file, through the cache).
    operator = KeyedOperator(ALL_TYPES, processor, layout.root, settings(tmp_path))
    out = list(operator((0,), iter([batch([("a", 1)])]), live))
    assert pd.concat(out).to_dict("records") == [{"user_id": "a", "seen": True}]
    # The snapshot file, read by a restored run (on a machine without the cache).
    restored = KeyedOperator(
        ALL_TYPES,
        processor,
        layout.root,
        settings(tmp_path / "other-machine"),
        Restored(1, (RestoredFile(path, 1, 1),)),
    )
    out = list(restored((0,), iter([batch([("a", 1)])]), Live()))
    assert pd.concat(out).to_dict("records") == [{"user_id": "a", "seen": True}]


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("interval day to second", "field 'wait': keyed state cannot hold"),
        (
            {"type": "array", "elementType": "variant", "containsNull": True},
            "field 'wait': keyed state cannot hold the Spark type 'variant'",
        ),
    ],
)
def test_a_state_field_of_a_type_the_state_cannot_hold_is_named(kind: Any, named: str) -> None:
    fields = [{"name": "wait", "type": kind, "nullable": True, "metadata": {}}]
    with pytest.raises(ConfigError) as error:
        struct_schema({"type": "struct", "fields": fields})
    assert str(error.value).startswith(named)
    assert pa.schema([]) == struct_schema({"type": "struct", "fields": []})


def test_a_composite_key_held_twice_is_named_with_every_key_column() -> None:
    schema = pa.schema([("region", pa.string()), ("day", pa.int32()), ("total", pa.int64())])
    contract = Contract("Sales", "sales", "process_batch", ("region", "day"), schema)
    new = pd.DataFrame({"region": ["eu", "eu", "us"], "day": [1, 2, 1], "total": [1, 2, 3]})
    assert contract.new_state(new).num_rows == 3  # ("eu", 1) and ("eu", 2) differ
    with pytest.raises(ProcessorError) as error:
        contract.new_state(pd.concat([new, new.iloc[[1]]], ignore_index=True))
    assert "holds the key {'region': 'eu', 'day': 2} 2 times" in str(error.value)
