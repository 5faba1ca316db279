"""Which key group, and which Spark partition, a key lives in (``barriered inspect --key``).

A keyed stream is split into ``maxParallelism`` *key groups*; a key belongs to key group
``pmod(hash(key cols), maxParallelism)``, where ``hash`` is Spark's own SQL ``hash``
(Murmur3_x86_32, seed 42). :func:`barriered.keyed` computes it in the JVM, where it
stays: this module computes the same numbers in Python only to *tell* a user where a key
lives, from the key column types recorded for the operator on the snapshot path. With
``N`` shuffle partitions, partition ``p`` owns the contiguous key groups
``g * N div maxParallelism == p`` (:func:`partition_of`, Flink's key group ranges); the
keyed operator groups by one ``int`` per partition whose Spark hash lands in ``p``
(:func:`group_values`), so one Python call handles a partition's key groups.

Hashing, in Spark's terms (``org.apache.spark.sql.catalyst.expressions.Murmur3Hash``):

* the columns are hashed left to right, each column's hash is the seed of the next one;
  the first seed is 42;
* ``tinyint``, ``smallint``, ``int``, ``date`` (days since the epoch) and ``boolean``
  (1/0) use ``hashInt``; ``bigint`` uses ``hashLong``; ``float`` and ``double`` hash
  their IEEE bits (``-0.0`` as ``0.0``, NaN canonical) with ``hashInt``/``hashLong``;
* ``timestamp`` and ``timestamp_ntz`` (microseconds since the epoch) use ``hashLong``;
* ``string`` (UTF-8 bytes) and ``binary`` use ``hashUnsafeBytes``, Spark's legacy
  variant of Murmur3 that mixes each of the last ``len % 4`` bytes on its own as a
  sign-extended int, instead of the standard Murmur3 tail;
* a ``struct`` hashes its fields in order, each field's hash the seed of the next, as if
  they were columns: :func:`store_key_types` flattens a state store's key into those
  leaf fields (a window's ``start`` and ``end``).

Other key types (decimals, collated strings, arrays, maps) are refused with a
:class:`~barriered.errors.KeyGroupError` naming the column.
"""

from __future__ import annotations

import binascii
import datetime
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from barriered import ddl
from barriered.errors import KeyGroupError

__all__ = [
    "SPARK_HASH_SEED",
    "SUPPORTED_TYPES",
    "epoch_micros",
    "group_values",
    "hash_partition",
    "key_group_for_key",
    "key_types",
    "parse_key",
    "partition_key_groups",
    "partition_of",
    "shuffle_partition",
    "spark_hash",
    "store_key_types",
]

#: Seed of Spark's ``hash`` (``Murmur3Hash(children, seed = 42)``).
SPARK_HASH_SEED = 42
#: The Spark key column types (``DataType.simpleString()``) whose hash is computed here.
SUPPORTED_TYPES = (
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "boolean",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
)
#: Spark's JSON type names (``StructType.json()``) as ``simpleString`` names.
_JSON_TYPES = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint"}

_MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_INT_RANGES = {
    "tinyint": (-(1 << 7), (1 << 7) - 1),
    "smallint": (-(1 << 15), (1 << 15) - 1),
    "int": (-(1 << 31), (1 << 31) - 1),
    "bigint": (-(1 << 63), (1 << 63) - 1),
}

# -- Murmur3_x86_32 as in org.apache.spark.unsafe.hash.Murmur3_x86_32 (32-bit arithmetic) --


def _to_signed(x: int) -> int:
    x &= _MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK32
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1


def _hash_int(value: int, seed: int) -> int:
    """``hashInt`` of a 32-bit value."""
    return _to_signed(_fmix(_mix_h1(seed & _MASK32, _mix_k1(value & _MASK32)), 4))


def _hash_long(value: int, seed: int) -> int:
    """``hashLong`` of a 64-bit value."""
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK32, _mix_k1(bits & _MASK32))
    h1 = _mix_h1(h1, _mix_k1(bits >> 32))
    return _to_signed(_fmix(h1, 8))


def _hash_bytes(data: bytes, seed: int) -> int:
    """``hashUnsafeBytes``: whole little-endian words, then each trailing byte
    sign-extended (Java's ``(int) (byte) b``) and mixed on its own."""
    n = len(data)
    aligned = n - n % 4
    h1 = seed & _MASK32
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte >= 128 else byte) & _MASK32))
    return _to_signed(_fmix(h1, n))


def _hash_column(value: object, type_name: str, seed: int) -> int:
    """One step of Spark's ``hash(...)``: the column ``value`` of ``type_name``."""
    if value is None:
        return seed
    if isinstance(value, bool):
        return _hash_int(1 if value else 0, seed)
    if type_name in ("tinyint", "smallint", "int") and isinstance(value, int):
        return _hash_int(value, seed)
    if type_name == "bigint" and isinstance(value, int):
        return _hash_long(value, seed)
    if type_name == "string" and isinstance(value, str):
        try:
            return _hash_bytes(value.encode("utf-8"), seed)
        except UnicodeEncodeError as exc:
            raise KeyGroupError(
                f"string key {value!r} is not valid UTF-8 ({exc.reason}); Spark strings are UTF-8"
            ) from None
    if type_name == "binary" and isinstance(value, bytes):
        return _hash_bytes(value, seed)
    if type_name == "date" and isinstance(value, datetime.date):
        return _hash_int(value.toordinal() - _EPOCH_ORDINAL, seed)
    if type_name in ("timestamp", "timestamp_ntz") and isinstance(value, datetime.datetime):
        return _hash_long(epoch_micros(value), seed)
    if type_name == "float" and isinstance(value, float):
        if value == 0.0:
            return _hash_int(0, seed)  # Spark hashes -0.0f as 0.0f
        if math.isnan(value):
            return _hash_int(0x7FC00000, seed)  # Float.floatToIntBits(NaN)
        return _hash_int(struct.unpack("<i", struct.pack("<f", value))[0], seed)
    if type_name == "double" and isinstance(value, float):
        if value == 0.0:
            return _hash_long(0, seed)  # Spark hashes -0.0d as 0.0d
        if math.isnan(value):
            return _hash_long(0x7FF8000000000000, seed)  # Double.doubleToLongBits(NaN)
        return _hash_long(struct.unpack("<q", struct.pack("<d", value))[0], seed)
    raise KeyGroupError(
        f"key value {value!r} (Python {type(value).__name__}) is not a Spark {type_name!r}"
    )


def epoch_micros(value: datetime.datetime) -> int:
    """Microseconds since the epoch (Spark's timestamp value); a naive value is read as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return (value - _EPOCH) // datetime.timedelta(microseconds=1)


# -- what the command line needs --------------------------------------------------------------


def key_types(key_schema: str) -> list[tuple[str, str]]:
    """The ``(column, type)`` pairs of an operator's recorded key schema.

    Parameters
    ----------
    key_schema : str
        The key columns as DDL, as the keyed operator records them (``"user_id string,
        n int"``).

    Returns
    -------
    list of (str, str)

    Raises
    ------
    KeyGroupError
        When a key column has a type whose hash is not computed here.
    """
    pairs = ddl.columns(key_schema, "the recorded key schema")
    for name, type_name in pairs:
        if type_name not in SUPPORTED_TYPES:
            raise KeyGroupError(
                f"key column {name!r} has type {type_name!r}, whose key group cannot be "
                f"computed outside Spark; supported key types are {', '.join(SUPPORTED_TYPES)}"
                f" (look the key group up in Spark: pmod(hash({name}), maxParallelism))"
            )
    return pairs


def store_key_types(key_schema: Mapping[str, Any], columns: int) -> list[tuple[str, str]]:
    """The leaf ``(field, type)`` pairs of a Spark state store's partition key.

    Parameters
    ----------
    key_schema : mapping
        The store's key schema as Spark JSON (``StructType.json()``, parsed), as the
        provider records it.
    columns : int
        How many leading key fields are the partition key (the provider's
        ``partition_key_columns``: all, or fewer for a session window's or a join's store).

    Returns
    -------
    list of (str, str)
        Dotted field names (``window.start``) with their ``simpleString`` types, nested
        structs flattened in order: Spark hashes a struct's fields as it hashes columns.

    Raises
    ------
    KeyGroupError
        When a key field has a type whose hash is not computed here.
    """
    pairs: list[tuple[str, str]] = []

    def leaves(fields: Sequence[Mapping[str, Any]], prefix: str) -> None:
        for field in fields:
            name, data_type = prefix + str(field["name"]), field["type"]
            if isinstance(data_type, Mapping) and data_type.get("type") == "struct":
                leaves(data_type["fields"], name + ".")
                continue
            type_name = _JSON_TYPES.get(str(data_type), str(data_type))
            if not isinstance(data_type, str) or type_name not in SUPPORTED_TYPES:
                raise KeyGroupError(
                    f"key field {name!r} has type {json.dumps(data_type)}, whose key group "
                    "cannot be computed outside Spark; supported key types are "
                    f"{', '.join(SUPPORTED_TYPES)} and structs of them"
                )
            pairs.append((name, type_name))

    leaves(list(key_schema["fields"])[:columns], "")
    return pairs


def parse_key(texts: Sequence[str], types: Sequence[tuple[str, str]]) -> tuple[object, ...]:
    """The key column values written on a command line, typed as the key columns.

    ``boolean`` is ``true``/``false``, ``date`` is ISO (``2024-02-29``), ``timestamp`` is
    ISO-8601 (``2024-02-29T10:00:00Z``; without an offset: UTC), ``binary`` is hex
    (``0x...`` or plain).

    Raises
    ------
    KeyGroupError
        When the number of values differs from the key columns, or a value does not
        parse as its column's type (the message names the column).
    """
    if len(texts) != len(types):
        names = ", ".join(f"{n} {t}" for n, t in types)
        raise KeyGroupError(
            f"{len(texts)} key value(s) {list(texts)} for {len(types)} key column(s) "
            f"({names}); give one value per key column"
        )
    return tuple(_parse(text, name, t) for text, (name, t) in zip(texts, types, strict=True))


def _parse(text: str, name: str, type_name: str) -> object:
    try:
        if type_name in _INT_RANGES:
            value = int(text)
            low, high = _INT_RANGES[type_name]
            if not low <= value <= high:
                raise ValueError(f"out of range [{low}, {high}]")
            return value
        if type_name == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError("not true or false")
            return text.lower() == "true"
        if type_name == "double":
            return float(text)
        if type_name == "float":
            value_f = float(text)
            struct.pack("<f", value_f)  # OverflowError when it does not fit
            return value_f
        if type_name == "date":
            return datetime.date.fromisoformat(text)
        if type_name in ("timestamp", "timestamp_ntz"):
            return datetime.datetime.fromisoformat(text)
        if type_name == "binary":
            return binascii.unhexlify(text.removeprefix("0x"))
        return text  # string
    except (ValueError, OverflowError, binascii.Error) as exc:
        raise KeyGroupError(
            f"key value {text!r} is not a {type_name} for key column {name!r} ({exc})"
        ) from None


def spark_hash(values: Sequence[object], types: Sequence[str]) -> int:
    """Spark SQL's ``hash(col1, col2, ...)`` of one key.

    Parameters
    ----------
    values : sequence of object
        The key column values in column order; ``None`` is null (leaves the seed).
    types : sequence of str
        The Spark type of each column (:data:`SUPPORTED_TYPES`).

    Returns
    -------
    int
        The 32-bit signed value Spark's ``hash`` returns.

    Raises
    ------
    KeyGroupError
        When a value does not fit its type.

    Examples
    --------
    >>> spark_hash([1], ["int"])
    -559580957
    """
    h = SPARK_HASH_SEED
    for value, type_name in zip(values, types, strict=True):
        h = _hash_column(value, type_name, h)
    return h


def key_group_for_key(values: Sequence[object], types: Sequence[str], max_parallelism: int) -> int:
    """The key group of a key: ``pmod(hash(key cols), max_parallelism)``, the
    ``_key_group`` column :func:`barriered.keyed` computes in the JVM."""
    return spark_hash(values, types) % max_parallelism  # Python's % is Spark's pmod for n > 0


def partition_of(key_group: int, partitions: int, max_parallelism: int) -> int:
    """The Spark partition that owns ``key_group`` with ``partitions`` shuffle partitions:
    ``key_group * partitions div max_parallelism`` (Flink's operator index of a key group),
    so each partition owns one contiguous range of key groups
    (:func:`partition_key_groups`).

    Raises
    ------
    KeyGroupError
        When ``partitions`` or ``max_parallelism`` is below 1.
    """
    if partitions < 1 or max_parallelism < 1:
        raise KeyGroupError(
            f"the number of partitions must be >= 1 and maxParallelism >= 1, got "
            f"{partitions} and {max_parallelism}"
        )
    return key_group * partitions // max_parallelism


def partition_key_groups(partition: int, partitions: int, max_parallelism: int) -> range:
    """The key groups partition ``partition`` of ``partitions`` owns (Flink's
    ``KeyGroupRange`` of an operator index): the inverse of :func:`partition_of`."""
    first = (partition * max_parallelism + partitions - 1) // partitions
    last = ((partition + 1) * max_parallelism - 1) // partitions
    return range(first, last + 1)


def group_values(partitions: int) -> tuple[int, ...]:
    """The ``int`` the keyed operator groups the rows of each partition by: for
    partition ``p``, the smallest ``v >= 0`` with ``pmod(hash(v), partitions) == p``, so
    that Spark's ``HashPartitioning`` of the grouping column puts exactly one group, all
    of a partition's key groups, into each partition (one Python call per partition and
    micro-batch).

    Raises
    ------
    KeyGroupError
        When ``partitions`` is below 1.
    """
    if partitions < 1:
        raise KeyGroupError(f"the number of partitions must be >= 1, got {partitions}")
    found: dict[int, int] = {}
    value = 0
    while len(found) < partitions:
        found.setdefault(hash_partition(_hash_int(value, SPARK_HASH_SEED), partitions), value)
        value += 1
    return tuple(found[p] for p in range(partitions))


def shuffle_partition(key_group: int, partitions: int, max_parallelism: int) -> int:
    """The Spark partition of key group ``key_group`` under the keyed operator with
    ``partitions`` shuffle partitions (its grouping value hashes there by construction,
    :func:`group_values`)."""
    return partition_of(key_group, partitions, max_parallelism)


def hash_partition(hash_value: int, partitions: int) -> int:
    """The Spark partition of a row whose partition key hashes to ``hash_value`` with
    ``partitions`` shuffle partitions: ``pmod(hash, partitions)`` (``HashPartitioning``)."""
    if partitions < 1:
        raise KeyGroupError(f"the number of partitions must be >= 1, got {partitions}")
    return hash_value % partitions
