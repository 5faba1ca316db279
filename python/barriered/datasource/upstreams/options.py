"""The parsers of the upstreams' richer option values (channel factors, a schema, an
option family) and the case-insensitive view of the options; the options themselves are
declared in :mod:`barriered.config.upstream_options`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import pyarrow as pa

from barriered import ddl
from barriered.config.upstream_options import SCHEMA
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
