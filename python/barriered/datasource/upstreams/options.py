"""Small, shared parsers for upstream options; errors name the option."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa

from barriered.errors import ConfigError


def int_option(
    options: Mapping[str, str], name: str, default: int, minimum: int | None = None
) -> int:
    """Return option ``name`` as an int (``default`` when absent), checking ``minimum``."""
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def parse_channel_factors(raw: str, name: str, channels: int) -> dict[int, float]:
    """Parse ``"0:4,3:0.5"`` into ``{0: 4.0, 3: 0.5}``; channels must be in range."""
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
        if not 0 <= ch < channels or factor <= 0:
            raise ConfigError(
                f"option {name!r}: channel must be in [0, {channels}) and factor > 0, got {part!r}"
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


def schema_option(options: Mapping[str, str], name: str = "schema") -> pa.Schema | None:
    """Parse option ``name`` (``"id long, name string"``) into an Arrow schema.

    Types are ``string``, ``long`` (``bigint``), ``int`` (``integer``), ``double``,
    ``boolean`` and ``timestamp`` (microseconds, UTC). Returns None when the option is
    absent or empty.
    """
    raw = options.get(name)
    if raw is None or not str(raw).strip():
        return None
    fields: list[pa.Field] = []
    seen: set[str] = set()
    for part in str(raw).split(","):
        words = part.split()
        if len(words) != 2:
            raise ConfigError(
                f"option {name!r} must look like 'column type, column type' (e.g. "
                f"'id long, name string'), got {part.strip()!r} in {raw!r}"
            )
        column, type_name = words
        data_type = SCHEMA_TYPES.get(type_name.lower())
        if data_type is None:
            raise ConfigError(
                f"option {name!r}: column {column!r} has unknown type {type_name!r}; use "
                f"one of {', '.join(sorted(SCHEMA_TYPES))}"
            )
        if column in seen:
            raise ConfigError(f"option {name!r}: column {column!r} appears twice in {raw!r}")
        seen.add(column)
        fields.append(pa.field(column, data_type))
    return pa.schema(fields)


def choice_option(options: Mapping[str, str], name: str, choices: Sequence[str]) -> str | None:
    """Return option ``name`` lower-cased if it is one of ``choices``; None when absent."""
    raw = options.get(name)
    if raw is None or not str(raw).strip():
        return None
    value = str(raw).strip().lower()
    if value not in choices:
        raise ConfigError(f"option {name!r} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def prefixed_options(options: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Return the options whose name starts with ``prefix`` (any case), prefix removed.

    ``prefixed_options({"storageOptions.AWS_REGION": "eu-west-1"}, "storageOptions.")``
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
