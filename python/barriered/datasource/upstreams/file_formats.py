"""Reading the data files of the ``files`` upstream: JSON lines, CSV and Parquet.

The format is inferred from the first file's extension and the schema from its contents
(then fixed for the life of the stream); JSON-lines and CSV files are read whole and
conformed to that schema, timestamps parsed from any ISO-8601 form. Files are opened
through :mod:`~barriered.datasource.upstreams.input_folder`, on any store.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from barriered.config.upstream_options import FORMAT, SCHEMA
from barriered.datasource.upstreams.arrow_rows import ARROW_ERRORS, conform, normalize_schema
from barriered.datasource.upstreams.input_folder import open_random, read_bytes
from barriered.errors import ConfigError

FORMATS = FORMAT.choices
EXTENSIONS = {
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".parquet": "parquet",
}

#: What reading a malformed data file can raise (JSON errors are ValueErrors).
READ_ERRORS = (OSError, ValueError, TypeError, UnicodeDecodeError, *ARROW_ERRORS)


def infer_format(first_file: str) -> str:
    """The format of ``first_file`` by its extension."""
    lower = first_file.lower()
    for ext, fmt in EXTENSIONS.items():
        if lower.endswith(ext):
            return fmt
    raise ConfigError(
        f"option {FORMAT.name!r} is not set and cannot be inferred from the first file "
        f"{first_file!r} (known extensions: {', '.join(EXTENSIONS)}); set option {FORMAT.name!r} "
        f"to one of {', '.join(FORMATS)}"
    )


def infer_schema(file_path: str, size: int, fmt: str) -> pa.Schema:
    """The schema of ``file_path`` (a local path or a URI, ``size`` bytes long;
    normalized, see :func:`normalize_schema`)."""
    if size == 0:
        raise ConfigError(
            f"cannot infer the schema from the first file {file_path!r}: it is empty; "
            f"set option {SCHEMA.name!r} (e.g. 'id long, name string')"
        )
    try:
        if fmt == "parquet":
            with open_random(file_path) as f:
                schema = pq.read_schema(f)
        elif fmt == "json":
            schema = pjson.read_json(pa.BufferReader(read_bytes(file_path))).schema
        else:
            schema = pcsv.read_csv(pa.BufferReader(read_bytes(file_path))).schema
    except READ_ERRORS as exc:
        raise ConfigError(
            f"cannot infer the schema from the first file {file_path!r} as {fmt} ({exc}); "
            f"check option {FORMAT.name!r} or set option {SCHEMA.name!r}"
        ) from exc
    if len(schema) == 0:
        raise ConfigError(
            f"the first file {file_path!r} has no columns; set option {SCHEMA.name!r} "
            "(e.g. 'id long, name string')"
        )
    return normalize_schema(schema)


def _parse_schema(schema: pa.Schema) -> pa.Schema:
    """The schema given to the JSON/CSV readers: timestamps are parsed by us, as strings."""
    return pa.schema(
        [pa.field(f.name, pa.string()) if pa.types.is_timestamp(f.type) else f for f in schema]
    )


def read_text(data: pa.Buffer, fmt: str, schema: pa.Schema) -> pa.Table:
    """Read the bytes of a whole JSON-lines or CSV file, conformed to ``schema``."""
    parse_schema = _parse_schema(schema)
    if fmt == "csv":
        convert = pcsv.ConvertOptions(
            column_types={f.name: f.type for f in parse_schema},
            include_columns=parse_schema.names,
            include_missing_columns=True,
        )
        return conform(pcsv.read_csv(pa.BufferReader(data), convert_options=convert), schema)
    try:
        options = pjson.ParseOptions(
            explicit_schema=parse_schema, unexpected_field_behavior="ignore"
        )
        table = pjson.read_json(pa.BufferReader(data), parse_options=options)
    except ARROW_ERRORS:
        # Values of another JSON type than the schema's (e.g. numbers in a string
        # column, as Spark accepts): parse in Python, then convert column by column.
        table = _read_json_leniently(data, parse_schema)
    return conform(table, schema)


def _read_json_leniently(data: pa.Buffer, parse_schema: pa.Schema) -> pa.Table:
    """Read JSON lines with :mod:`json`; non-string values of string columns are kept as
    their JSON text (``7`` becomes ``"7"``)."""
    with io.TextIOWrapper(io.BytesIO(data.to_pybytes()), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    columns = []
    for fld in parse_schema:
        values = [r.get(fld.name) if isinstance(r, dict) else None for r in records]
        if pa.types.is_string(fld.type):
            values = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
        columns.append(pa.array(values, type=fld.type))
    return pa.Table.from_arrays(columns, schema=parse_schema)
