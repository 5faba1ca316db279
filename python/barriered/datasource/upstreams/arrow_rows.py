"""Rows read from files, made to fit the stream's fixed schema (shared by upstreams).

Files of one stream may hold columns in another order or of another (castable) type, ISO
timestamps as strings, nanoseconds where Spark keeps microseconds, or miss a column: the
upstreams read them and :func:`conform` them to the schema fixed at the stream's start.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: What Arrow raises for a value or type it cannot convert.
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
_OFFSET_RE = r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"


def _strings_to_timestamps(values: pa.ChunkedArray, target: pa.TimestampType) -> pa.ChunkedArray:
    """Parse ISO-8601 strings into ``target``; strings without offset are taken as UTC."""
    try:
        return values.cast(target)
    except ARROW_ERRORS:
        pass
    aware = pa.timestamp(target.unit, tz="UTC")
    naive = pa.timestamp(target.unit)
    has_offset = pc.match_substring_regex(values, _OFFSET_RE)
    nothing = pa.scalar(None, pa.string())
    with_offset = pc.if_else(has_offset, values, nothing).cast(aware)
    without_offset = pc.if_else(has_offset, nothing, values).cast(naive).cast(aware)
    return pc.coalesce(with_offset, without_offset).cast(target)


def cast_column(values: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Cast one column to ``target`` (strings to timestamps accept any ISO-8601 form)."""
    if values.type.equals(target):
        return values
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
        if values.type.equals(target):
            return values
    if pa.types.is_timestamp(target) and (
        pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    ):
        return _strings_to_timestamps(values, target)
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(values.type):
        # Spark keeps microseconds: truncating nanoseconds is expected, not an error.
        return values.cast(target, safe=False)
    return values.cast(target)


def conform(table: pa.Table, schema: pa.Schema, num_rows: int | None = None) -> pa.Table:
    """Return ``table`` with exactly ``schema``: columns by name, cast, nulls if absent.

    Raises the Arrow error of the first column that cannot be cast (callers name the file).
    """
    rows = table.num_rows if num_rows is None else num_rows
    names = set(table.column_names)
    columns: list[pa.ChunkedArray | pa.Array] = []
    for field in schema:
        if field.name in names:
            try:
                columns.append(cast_column(table.column(field.name), field.type))
            except ARROW_ERRORS as exc:
                raise type(exc)(f"column {field.name!r}: {exc}") from exc
        else:
            columns.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Make an inferred schema usable as a fixed one.

    Null-typed columns (all values null in the first file) become strings, dictionary
    columns become their value type, timestamps are in microseconds (Spark's unit), every
    column is nullable, metadata is dropped.
    """
    fields = []
    for field in schema:
        data_type = field.type
        if pa.types.is_dictionary(data_type):
            data_type = data_type.value_type
        if pa.types.is_null(data_type):
            data_type = pa.string()
        if pa.types.is_timestamp(data_type) and data_type.unit != "us":
            data_type = pa.timestamp("us", tz=data_type.tz)
        fields.append(pa.field(field.name, data_type, nullable=True))
    return pa.schema(fields)


def read_parquet_rows(
    parquet: pq.ParquetFile, lo: int, hi: int, columns: Sequence[str]
) -> pa.Table:
    """Read rows ``[lo, hi)`` of a Parquet file, touching only the row groups needed."""
    meta = parquet.metadata
    groups: list[int] = []
    first = 0
    offset = 0
    for index in range(meta.num_row_groups):
        count = meta.row_group(index).num_rows
        if offset + count > lo and offset < hi:
            if not groups:
                first = offset
            groups.append(index)
        offset += count
    present = [c for c in columns if c in parquet.schema_arrow.names]
    if not groups:
        return parquet.schema_arrow.empty_table().select(present)
    table = parquet.read_row_groups(groups, columns=present, use_threads=False)
    return table.slice(lo - first, hi - lo)
