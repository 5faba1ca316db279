"""The typed ``state`` table: its schema."""

from __future__ import annotations

import pyarrow as pa
import pytest

from barriered.errors import ConfigError
from barriered.statestore.state_schema import columns_schema, table_schema
from snapshots import registration


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
