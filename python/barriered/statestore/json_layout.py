"""Conversion of state written in the JSON layout (before typed state) to typed files.

Snapshot paths written before typed state hold, per key group, one Parquet file with the
columns ``key`` and ``value`` (JSON objects of the key columns and the state fields) and
register their operators with DDL strings only. ``barriered convert-state PATH -o NEW``
(:func:`barriered.statestore.savepoints.export` with ``convert=True``) writes a savepoint
of one of its checkpoints whose files have the operators' columns as their declared
types; a query restores from it with ``restoreFrom=NEW``. The original path is only
read. The DDL is parsed here, without Spark, for the types a key or a state field of
that layout could hold as JSON (numbers, strings, booleans, dates, timestamps,
decimals); a nested type is refused with a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from barriered.errors import StateLayoutError
from barriered.statestore.fileio import filesystem
from barriered.statestore.state_schema import columns_schema

#: DDL type names (any case) -> Spark's JSON type names.
_DDL_TYPES = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "long": "long",
    "bigint": "long",
    "int": "integer",
    "integer": "integer",
    "short": "short",
    "smallint": "short",
    "byte": "byte",
    "tinyint": "byte",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}


def ddl_struct(ddl: str, operator: str) -> dict[str, Any]:
    """Spark's JSON form of the ``StructType`` a flat DDL string declares.

    Raises
    ------
    StateLayoutError
        For a nested or unknown type (naming the operator and the field).
    """
    fields: list[dict[str, Any]] = []
    for part in re.split(r",(?![^(]*\))", ddl):
        found = re.fullmatch(r"\s*`?(\w+)`?\s*:?\s+([\w(), ]+?)\s*(?:not null)?\s*", part, re.I)
        kind = found.group(2).lower().replace(" ", "") if found else ""
        if found and re.fullmatch(r"decimal\(\d+,\d+\)", kind):
            spark, name = kind, found.group(1)
        elif found and kind in _DDL_TYPES:
            spark, name = _DDL_TYPES[kind], found.group(1)
        else:
            raise StateLayoutError(
                f"operator {operator!r}: cannot convert the field {part.strip()!r} of "
                f"'{ddl}' without Spark (only flat types are converted); nothing was written"
            )
        fields.append({"name": name, "type": spark, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def typed_registration(registered: Mapping[str, Any]) -> dict[str, Any]:
    """An operator registration of the JSON layout with its column types added."""
    operator = str(registered["operator"])
    out = dict(registered)
    out["key_type"] = ddl_struct(str(registered["key_schema"]), operator)
    out["state_type"] = ddl_struct(str(registered["state_schema"]), operator)
    return out


def _column(values: list[Any], field: pa.Field) -> pa.Array:
    kind = field.type
    if pa.types.is_timestamp(kind):
        parsed = pd.to_datetime(pd.Series(values, dtype=object), utc=kind.tz is not None)
        return pa.array(parsed, kind)
    if pa.types.is_date(kind):
        return pa.array(pd.to_datetime(pd.Series(values, dtype=object)).dt.date, kind)
    if pa.types.is_decimal(kind):
        return pa.array([None if v is None else str(v) for v in values]).cast(kind)
    return pa.array(values, kind)


def convert_file(path: str, registration: Mapping[str, Any]) -> pa.Table:
    """Read one key group's file of the JSON layout as a typed table (with its
    ``checkpoint_id`` column)."""
    fs, local = filesystem(path)
    with fs.open_input_file(local) as f:
        raw = pq.read_table(f, columns=["key", "value", "checkpoint_id"])
    schema = columns_schema(registration)
    keys = [json.loads(k) for k in raw["key"].to_pylist()]
    values = [json.loads(v) for v in raw["value"].to_pylist()]
    names = set(registration["key_columns"])
    arrays = [
        _column(
            [
                (k if field.name in names else v).get(field.name)
                for k, v in zip(keys, values, strict=True)
            ],
            field,
        )
        for field in schema
    ]
    table = pa.Table.from_arrays(arrays, schema=schema)
    return table.append_column("checkpoint_id", raw["checkpoint_id"].cast(pa.int64()))
