"""The typed ``state`` table: key columns and state fields as their declared Spark types.

Every keyed operator registers its key columns and state fields with their Spark types
(``_coordinator/operators/<operator>.json``: ``key_type`` and ``state_type``, Spark's JSON
form of a ``StructType``, readable without a Spark session). The ``state`` table's
schema is ``operator, key_group``, then every operator's key columns and state fields
(in registration order; several operators share a column only when it has the same
type), then ``checkpoint_id``. A row of one operator leaves the other operators' columns
null.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from barriered.errors import ConfigError

#: The Delta table description that marks a ``state`` table as typed.
TYPED_DESCRIPTION = "barriered keyed state (typed columns)"
#: Columns of every state table, before and after the operators' own.
HEAD = pa.schema([("operator", pa.string()), ("key_group", pa.int32())])
TAIL = pa.schema([("checkpoint_id", pa.int64())])
_RESERVED = {"operator", "key_group", "checkpoint_id"}

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def arrow_type(spark_type: Any) -> pa.DataType:
    """The Arrow type of a Spark type in its JSON form (as ``StructType.jsonValue()``),
    the mapping PySpark's Arrow conversion uses; no Spark session needed.

    Raises
    ------
    ConfigError
        For a type the state table cannot hold (intervals, variants, ...).
    """
    if isinstance(spark_type, str):
        if spark_type in _PRIMITIVES:
            return _PRIMITIVES[spark_type]
        decimal = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", spark_type)
        if decimal:
            return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
        if re.fullmatch(r"(var)?char\(\d+\)", spark_type):
            return pa.string()
    elif spark_type.get("type") == "struct":
        return pa.struct([_arrow_field(f) for f in spark_type["fields"]])
    elif spark_type.get("type") == "array":
        return pa.list_(arrow_type(spark_type["elementType"]))
    elif spark_type.get("type") == "map":
        return pa.map_(arrow_type(spark_type["keyType"]), arrow_type(spark_type["valueType"]))
    raise ConfigError(
        f"keyed state cannot hold the Spark type {spark_type!r} (it holds numbers, strings, "
        "booleans, binary, date, timestamp, timestamp_ntz, decimal, and arrays, maps and "
        "structs of them)"
    )


def _arrow_field(spark_field: Mapping[str, Any]) -> pa.Field:
    """The Arrow field of a Spark ``StructField`` in its JSON form.

    Raises
    ------
    ConfigError
        Naming the field (and the struct fields it is in) and its type.
    """
    name = str(spark_field["name"])
    try:
        kind = arrow_type(spark_field["type"])
    except ConfigError as exc:
        raise ConfigError(f"field {name!r}: {exc}") from None
    return pa.field(name, kind, spark_field.get("nullable", True))


def struct_schema(spark_struct: Mapping[str, Any]) -> pa.Schema:
    """Arrow schema of a Spark ``StructType`` in its JSON form.

    Raises
    ------
    ConfigError
        For a field of a type the state table cannot hold, naming the field.
    """
    return pa.schema([_arrow_field(f) for f in spark_struct["fields"]])


def columns_schema(registration: Mapping[str, Any]) -> pa.Schema:
    """Arrow schema of one operator's columns: key columns, then state fields."""
    return pa.schema(
        [*struct_schema(registration["key_type"]), *struct_schema(registration["state_type"])]
    )


def file_schema(registration: Mapping[str, Any]) -> pa.Schema:
    """Schema of the data files of one operator: its columns, ``key_group`` and
    ``checkpoint_id`` (``operator``, the partition column, is in the path)."""
    return pa.schema([*columns_schema(registration), HEAD.field("key_group"), *TAIL])


def table_schema(registrations: Iterable[Mapping[str, Any]]) -> pa.Schema:
    """The ``state`` table's schema for these operators.

    Raises
    ------
    ConfigError
        When two operators declare one column with different types, or a column is
        named like a column of the table itself.
    """
    fields: dict[str, tuple[pa.Field, str]] = {}
    for reg in registrations:
        for f in columns_schema(reg):
            if f.name in _RESERVED:
                raise ConfigError(
                    f"operator {reg['operator']!r}: a key column or state field may not be "
                    f"named {f.name!r} (a column of the state table); rename it"
                )
            seen = fields.get(f.name)
            if seen is not None and seen[0].type != f.type:
                raise ConfigError(
                    f"operators {seen[1]!r} and {reg['operator']!r} both have a column "
                    f"{f.name!r}, as {seen[0].type} and {f.type}: they share the state table "
                    "of one snapshot path, so rename one of them"
                )
            fields.setdefault(f.name, (f, str(reg["operator"])))
    return pa.schema([*HEAD, *(f for f, _ in fields.values()), *TAIL])
