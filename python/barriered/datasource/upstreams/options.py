"""The parsers of the upstreams' richer option values (channel factors, a schema, an
option family, the files upstream's folders, the delta upstream's starting version and
channel column) and the case-insensitive view of the options; the options themselves are
declared in :mod:`barriered.config.upstream_options`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyarrow.fs import FileType

from barriered import ddl
from barriered.config import upstream_options as opt
from barriered.config.upstream_options import SCHEMA
from barriered.datasource.upstreams import input_folder as folder_io
from barriered.datasource.upstreams.input_folder import ignored
from barriered.errors import ConfigError


def parse_channel_factors(raw: str, name: str, channels: int) -> dict[int, float]:
    """Parse ``"0:4,3:0.5"`` into ``{0: 4.0, 3: 0.5}``.

    ``name`` is the option's, for the message.

    Raises
    ------
    ConfigError
        Naming the option and the part: a part not of the form ``CHANNEL:FACTOR``, a
        channel out of ``[0, channels)`` or given twice, a factor that is not a finite
        number above 0 (``nan``, ``inf``, ``1e400``).
    """
    out: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            ch_s, factor_s = part.split(":")
            ch, factor = int(ch_s), float(factor_s)
        except ValueError:
            raise ConfigError(
                f"option {name!r} must look like 'CHANNEL:FACTOR[,CHANNEL:FACTOR]', "
                f"e.g. '0:4', got {raw!r}"
            ) from None
        if not 0 <= ch < channels or not math.isfinite(factor) or factor <= 0:
            raise ConfigError(
                f"option {name!r}: channel must be in [0, {channels}) and factor a finite "
                f"number > 0, got {part!r}"
            )
        if ch in out:
            raise ConfigError(
                f"option {name!r}: channel {ch} is given twice ({raw!r}); give each "
                "channel one factor"
            )
        out[ch] = factor
    return out


#: Column types accepted by :func:`schema_option` (Spark SQL names and common aliases).
SCHEMA_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def schema_option(options: Mapping[str, str]) -> pa.Schema | None:
    """Parse option :data:`SCHEMA` (``"id long, name string"``) into an Arrow schema.

    Types are ``string``, ``long`` (``bigint``), ``int`` (``integer``), ``double``,
    ``boolean`` and ``timestamp`` (microseconds, UTC). Returns None when the option is
    absent or empty.
    """
    raw = SCHEMA.read_str(options)
    if raw is None:
        return None
    name = SCHEMA.name
    fields: list[pa.Field] = []
    for column, type_name in ddl.columns(raw, f"option {name!r}"):
        data_type = SCHEMA_TYPES.get(type_name)
        if data_type is None:
            raise ConfigError(
                f"option {name!r}: column {column!r} has unknown type {type_name!r}; use "
                f"one of {', '.join(sorted(SCHEMA_TYPES))}"
            )
        fields.append(pa.field(column, data_type))
    return pa.schema(fields)


def prefixed_options(options: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Return the options whose name starts with ``prefix`` (any case), prefix removed.

    ``prefixed_options({"storageOptions.AWS_REGION": "eu-west-1"}, STORAGE_OPTIONS.name)``
    is ``{"AWS_REGION": "eu-west-1"}``.
    """
    low = prefix.lower()
    return {
        str(key)[len(prefix) :]: str(value)
        for key, value in options.items()
        if str(key).lower().startswith(low) and len(str(key)) > len(prefix)
    }


class Options(Mapping[str, str]):
    """A read-only, case-insensitive view of options (PySpark lower-cases their names);
    iteration yields the names as given."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._data = {str(k).lower(): str(v) for k, v in options.items()}
        self._names = {str(k).lower(): str(k) for k in options}

    def __getitem__(self, name: str) -> str:
        return self._data[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names.values())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._data


def input_path(options: Mapping[str, str]) -> str:
    """The input folder option ``path`` names, normalized; checked to be a directory.

    Raises
    ------
    ConfigError
        No ``path``, or it does not exist or is not a directory.
    """
    raw_path = opt.PATH.read_str(Options(options))
    if raw_path is None:
        raise ConfigError(
            f"{opt.PATH.where} is required by upstream 'files': set it to the "
            "directory the files are written to"
        )
    path = folder_io.normalize(raw_path)
    found = folder_io.kind(path)
    if found == FileType.NotFound:
        raise ConfigError(f"{opt.PATH.where}: directory {path!r} does not exist; create it")
    if found != FileType.Directory:
        raise ConfigError(f"{opt.PATH.where}: {path!r} is not a directory")
    return path


def archive_option(options: Mapping[str, str], path: str) -> str | None:
    """The ``files`` upstream's ``archiveTo`` folder (None: released files stay), checked
    to lie outside the input folder ``path``.

    Raises
    ------
    ConfigError
        Inside ``path`` (not hidden), or an existing file.
    """
    raw = opt.ARCHIVE_TO.read_str(options)
    if raw is None:
        return None
    archive = folder_io.normalize(raw)
    inside = folder_io.relative_to(archive, path)
    if inside == "." or (inside is not None and not ignored(inside.split("/", 1)[0])):
        raise ConfigError(
            f"{opt.ARCHIVE_TO.where} ({archive!r}) lies inside option {opt.PATH.name!r} "
            f"({path!r}), so "
            "archived files would be discovered again; use a folder outside "
            f"{opt.PATH.name!r} (or a hidden one, e.g. '_archive')"
        )
    if folder_io.kind(archive) == FileType.File:
        raise ConfigError(f"{opt.ARCHIVE_TO.where}: {archive!r} is not a folder")
    return archive  # created by the first release that moves a file


def starting_version(options: Mapping[str, str]) -> int | str | None:
    """``startingVersion``: ``"latest"``, a version, or None when not given."""
    text = (opt.STARTING_VERSION.given(options) or "").lower()
    if text in ("", "latest") or text.isdigit():
        return int(text) if text.isdigit() else text or None
    raise ConfigError(
        f"{opt.STARTING_VERSION.where}: invalid value {text!r}; expected 'latest' or a table "
        "version (an integer, at least 0)"
    )


def delta_channel_column(name: str, partition_columns: list[str], path: str) -> str:
    """The ``delta`` upstream's ``channelBy`` partition column of the table at ``path``
    (its name in any case).

    Raises
    ------
    ConfigError
        No partition column of that name.
    """
    if name in partition_columns:
        return name
    matches = [c for c in partition_columns if c.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    hint = (
        f"one of its partition columns {partition_columns}"
        if partition_columns
        else "'file' (the table is not partitioned)"
    )
    raise ConfigError(
        f"{opt.DELTA_CHANNEL_BY.where} must be 'file' or a partition column of Delta "
        f"table {path!r}, "
        f"got {name!r}; use {hint}"
    )
