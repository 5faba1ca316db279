"""The output's columns: which Spark types the sink stores, and whether a table fits them.

The sink writes what Delta stores: booleans, integers, floats, decimals, strings,
binary, dates, timestamps (``timestamp``, stored in UTC, and ``timestamp_ntz``) and
arrays, maps and structs of them. Any other type (intervals, ``variant``, ``void``, a
user-defined type, ...) is refused when the query's first batch starts, naming the
column, before anything is written. An existing output table must have exactly the
output's columns and types (and partition columns): the sink never merges schemas.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from barriered.errors import ConfigError, SinkError

#: Spark types Delta stores as they are.
ATOMIC = (
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    BinaryType,
    DateType,
    TimestampType,
    TimestampNTZType,
)
#: The time zone of the output's ``timestamp`` columns (Delta stores them in UTC).
UTC = "UTC"


def _unsupported(name: str, data_type: DataType) -> list[str]:
    """``column: type`` of every part of ``data_type`` Delta cannot store."""
    if isinstance(data_type, ATOMIC):
        return []
    if isinstance(data_type, ArrayType):
        return _unsupported(f"{name}[]", data_type.elementType)
    if isinstance(data_type, MapType):
        return _unsupported(f"{name} key", data_type.keyType) + _unsupported(
            f"{name} value", data_type.valueType
        )
    if isinstance(data_type, StructType):
        return [u for f in data_type.fields for u in _unsupported(f"{name}.{f.name}", f.dataType)]
    return [f"{name}: {data_type.simpleString()}"]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the output's data files (timestamps in UTC).

    Raises
    ------
    ConfigError
        Naming every column (or nested field) of a type Delta cannot store.
    """
    bad = [u for f in schema.fields for u in _unsupported(f.name, f.dataType)]
    if bad:
        raise ConfigError(
            f"the barriered-delta sink cannot store the output column(s) {bad}: Delta "
            "stores booleans, integers, floats, decimals, strings, binary, dates, "
            "timestamps and arrays, maps and structs of them. Cast or drop those columns "
            "(e.g. an interval as its seconds in a long) before writeStream"
        )
    return to_arrow_schema(schema, timezone=UTC)


def _plain(node: Any) -> Any:
    """A Delta schema's JSON without what a write does not change (nullability, metadata)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if k not in ("nullable", "metadata")}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _columns(schema: DeltaSchema) -> dict[str, Any]:
    return {f["name"]: _plain(f["type"]) for f in json.loads(schema.to_json())["fields"]}


def differences(table: DeltaTable, schema: pa.Schema, partition_by: tuple[str, ...]) -> list[str]:
    """How the table's columns and partitioning differ from the output's (empty: none)."""
    have = _columns(table.schema())
    want = _columns(DeltaSchema.from_arrow(schema))
    found = [f"{c} (only in the table)" for c in have if c not in want]
    found += [f"{c} (only in the output)" for c in want if c not in have]
    found += [
        f"{c} (table: {json.dumps(have[c])}, output: {json.dumps(want[c])})"
        for c in want
        if c in have and have[c] != want[c]
    ]
    partitions = list(table.metadata().partition_columns)
    if partitions != list(partition_by):
        found.append(
            f"partition columns (table: {partitions}, option partitionBy: {list(partition_by)})"
        )
    return found


def check_table(
    path: str, table: DeltaTable, schema: pa.Schema, partition_by: tuple[str, ...]
) -> None:
    """Refuse to write the output into a table with other columns or partitioning.

    Raises
    ------
    SinkError
        Naming the table and every differing column.
    """
    found = differences(table, schema, partition_by)
    if found:
        raise SinkError(
            f"barriered-delta sink: the output table {path!r} does not have the "
            f"query's output columns: {'; '.join(found)}. The sink never changes a table's "
            "schema. Nothing was written. Write to a new table (option path), or make the "
            "query's output match the table"
        )
