"""The typed ``state`` table: its schema, the refusal of the JSON layout, the conversion."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from barriered import cli
from barriered.errors import ConfigError, StateLayoutError
from barriered.statestore.keyed import OperatorSpec
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from barriered.statestore.restored_state import restored_files
from barriered.statestore.savepoints import export
from barriered.statestore.state_schema import check_typed, columns_schema, table_schema
from file_tree import tree
from snapshots import json_layout_path, registration, snapshot_path

TOTALS = {f"user-{i}": i * 10 for i in range(9)}
SPEC = OperatorSpec(
    "op", ("user_id",), "user_id string", "total long", "user_id string, total long", 4,
    '{"type": "struct", "fields": []}', '{"type": "struct", "fields": []}',
)  # fmt: skip


def test_the_table_has_each_operators_columns_as_their_types() -> None:
    first = registration("a")
    second = {
        **registration("b"),
        "key_type": {
            "type": "struct",
            "fields": [{"name": "account", "type": "long", "nullable": False, "metadata": {}}],
        },
        "state_type": {
            "type": "struct",
            "fields": [
                {"name": "total", "type": "long", "nullable": True, "metadata": {}},
                {"name": "last", "type": "timestamp", "nullable": True, "metadata": {}},
                {"name": "price", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
                {
                    "name": "tags",
                    "type": {"type": "array", "elementType": "string", "containsNull": True},
                    "nullable": True,
                    "metadata": {},
                },
            ],
        },
    }
    assert columns_schema(second) == pa.schema(
        [
            pa.field("account", pa.int64(), nullable=False),
            ("total", pa.int64()),
            ("last", pa.timestamp("us", tz="UTC")),
            ("price", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.string())),
        ]
    )
    schema = table_schema([first, second])
    assert schema.names == [
        "operator", "key_group", "user_id", "total", "account", "last", "price", "tags",
        "checkpoint_id",
    ]  # fmt: skip
    clash = {**second, "state_type": {"type": "struct", "fields": [
        {"name": "total", "type": "string", "nullable": True, "metadata": {}}]}}  # fmt: skip
    with pytest.raises(ConfigError, match="operators 'a' and 'b' both have a column 'total'"):
        table_schema([first, clash])
    reserved = {**first, "state_type": {"type": "struct", "fields": [
        {"name": "key_group", "type": "long", "nullable": True, "metadata": {}}]}}  # fmt: skip
    with pytest.raises(ConfigError, match="may not be named 'key_group'"):
        table_schema([reserved])


def test_a_typed_path_passes_and_the_json_layout_is_refused_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_typed(snapshot_path(tmp_path / "typed", [[3, 4]]))
    layout = json_layout_path(tmp_path / "old", TOTALS)
    before = tree(tmp_path)
    with pytest.raises(StateLayoutError) as refused:
        check_typed(layout)
    message = str(refused.value)
    assert layout.state_table in message and "JSON strings" in message
    assert f"barriered convert-state {layout.root} -o NEW_PATH" in message
    restore = {"root": layout.root, "checkpoint_id": 1, "state_version": 0}
    with pytest.raises(StateLayoutError, match=r"\(restoring checkpoint 1 of .*convert-state"):
        restored_files(restore, SPEC)  # what keyed().process() does on restoreFrom
    with pytest.raises(StateLayoutError, match="convert-state"):
        export(layout, None, str(tmp_path / "savepoint"))  # a savepoint would misread it
    assert cli.main(["savepoint", layout.root, "-o", str(tmp_path / "sp")]) == 1
    assert "barriered convert-state" in capsys.readouterr().err
    assert tree(tmp_path) == before


def test_convert_state_writes_a_typed_savepoint_and_leaves_the_path_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = json_layout_path(tmp_path / "old", TOTALS)
    before = tree(layout.root)
    out = tmp_path / "typed"
    assert cli.main(["convert-state", layout.root, "-o", str(out)]) == 0
    assert "state of checkpoint 1 converted to typed columns" in capsys.readouterr().out
    assert tree(layout.root) == before
    converted = SnapshotLayout.at(str(out))
    check_typed(converted)
    point = resolve(converted, "latest")
    assert point.checkpoint_id == 1 and point.barrier == (5, 5)
    point.check_files()
    table = DeltaTable(converted.state_table, version=point.state_version).to_pyarrow_table()
    assert table.schema.field("total").type == pa.int64()
    assert table.schema.field("seen").type == pa.timestamp("us", tz="UTC")
    rows = table.to_pylist()
    assert {r["user_id"]: r["total"] for r in rows} == TOTALS
    seen = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert {r["seen"] for r in rows} == {seen} and {r["checkpoint_id"] for r in rows} == {1}
    assert sorted({r["key_group"] for r in rows}) == [0, 1, 2, 3]
    # Typed now: converting again is refused and writes nothing.
    again = tree(tmp_path)
    with pytest.raises(ConfigError, match="already typed: nothing to convert"):
        export(converted, None, str(tmp_path / "twice"), convert=True)
    assert tree(tmp_path) == again
