"""Key groups: Spark's ``hash`` in pure Python and Flink's key-group arithmetic.

A keyed stream is split into ``maxParallelism`` *key groups*; a key belongs to key group
``pmod(hash(key cols), maxParallelism)``, where ``hash`` is Spark's own SQL ``hash``
function (Murmur3_x86_32, seed 42). :func:`barriered.keyed` computes that expression in
the JVM; this module computes exactly the same number in Python (for tests, for the
driver, for restore planning) without importing PySpark.

Operator instances own contiguous ranges of key groups, assigned with Flink's formulas
(``KeyGroupRangeAssignment``), so that the state of a key group can move between any
parallelism ``p <= maxParallelism`` on restore.

Hashing, in Spark's terms (``org.apache.spark.sql.catalyst.expressions.Murmur3Hash``):

* the columns are hashed left to right, each column's hash is the seed of the next one;
  the first seed is 42;
* ``null`` leaves the seed unchanged;
* ``tinyint``, ``smallint``, ``int``, ``date`` (days since the epoch) and ``boolean``
  (1/0) use ``hashInt``; ``bigint`` uses ``hashLong``; ``float`` and ``double`` hash
  their IEEE bits (``-0.0`` as ``0.0``, NaN canonical) with ``hashInt``/``hashLong``;
* ``string`` (UTF-8 bytes) and ``binary`` use ``hashUnsafeBytes``, Spark's legacy
  variant of Murmur3 that mixes each of the last ``len % 4`` bytes on its own as a
  sign-extended int, instead of the standard Murmur3 tail.

Python values do not say which Spark type they have (``1`` may be ``int`` or
``bigint``), so every hashing function takes the Spark type names of the key columns.
Without them the types are inferred the way ``spark.createDataFrame`` infers them:
``bool`` -> ``boolean``, ``int`` -> ``bigint``, ``float`` -> ``double``, ``str`` ->
``string``, ``bytes`` -> ``binary``, ``datetime.date`` -> ``date``.
"""

from __future__ import annotations

import datetime
import math
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from barriered.errors import KeyGroupError

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "SPARK_HASH_SEED",
    "SUPPORTED_TYPES",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "TypeHint",
    "default_max_parallelism",
    "hash_bytes",
    "hash_int",
    "hash_long",
    "hash_string",
    "hash_value",
    "key_group_for_key",
    "key_group_of_hash",
    "key_group_range_for_operator",
    "operator_index_for_key_group",
    "spark_hash",
]

#: Seed of Spark's ``hash`` (``Murmur3Hash(children, seed = 42)``).
SPARK_HASH_SEED = 42
#: Largest ``maxParallelism`` (Flink's ``UPPER_BOUND_MAX_PARALLELISM``, ``1 << 15``).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15
#: Smallest ``maxParallelism`` that :func:`default_max_parallelism` returns.
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()

# Spark type name (DataType.simpleString()) -> canonical name; aliases accepted.
_TYPE_ALIASES: dict[str, str] = {
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "boolean": "boolean",
    "bool": "boolean",
    "float": "float",
    "real": "float",
    "double": "double",
    "string": "string",
    "str": "string",
    "binary": "binary",
    "date": "date",
}
#: Canonical Spark type names that :func:`hash_value` supports.
SUPPORTED_TYPES: tuple[str, ...] = tuple(dict.fromkeys(_TYPE_ALIASES.values()))
_INT_RANGES = {
    "tinyint": (-(1 << 7), (1 << 7) - 1),
    "smallint": (-(1 << 15), (1 << 15) - 1),
    "int": (_INT_MIN, _INT_MAX),
}


@runtime_checkable
class _SparkDataType(Protocol):
    """Anything with Spark's ``DataType.simpleString()`` (e.g. ``IntegerType()``)."""

    def simpleString(self) -> str: ...  # Spark's name


TypeHint = str | _SparkDataType
"""A Spark type: its name (``"int"``, ``"bigint"``, ...) or a PySpark ``DataType``."""


# --------------------------------------------------------------------------------------
# Murmur3_x86_32 as in org.apache.spark.unsafe.hash.Murmur3_x86_32 (32-bit arithmetic)
# --------------------------------------------------------------------------------------


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


def _check_int32(value: int, what: str) -> None:
    if not _INT_MIN <= value <= _INT_MAX:
        raise KeyGroupError(
            f"{what} {value} is not a 32-bit signed integer "
            f"(range [{_INT_MIN}, {_INT_MAX}]); pass the value Spark's hash() returned"
        )


def hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt``: the hash of a 32-bit integer.

    Parameters
    ----------
    value : int
        A value in ``[-2**31, 2**31)`` (Spark ``int``, ``smallint``, ``tinyint``,
        ``date`` as days, ``boolean`` as 1/0).
    seed : int, default 42
        32-bit signed seed (the hash of the previous column, or 42).

    Returns
    -------
    int
        The 32-bit signed hash, as Spark returns it.

    Raises
    ------
    KeyGroupError
        If ``value`` or ``seed`` is outside the 32-bit signed range.
    """
    _check_int32(value, "int value")
    _check_int32(seed, "seed")
    h1 = _mix_h1(seed & _MASK32, _mix_k1(value & _MASK32))
    return _to_signed(_fmix(h1, 4))


def hash_long(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashLong``: the hash of a 64-bit integer.

    Parameters
    ----------
    value : int
        A value in ``[-2**63, 2**63)`` (Spark ``bigint``).
    seed : int, default 42
        32-bit signed seed.

    Returns
    -------
    int
        The 32-bit signed hash.

    Raises
    ------
    KeyGroupError
        If ``value`` is outside the 64-bit or ``seed`` outside the 32-bit signed range.
    """
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise KeyGroupError(
            f"bigint value {value} is not a 64-bit signed integer "
            f"(range [{_LONG_MIN}, {_LONG_MAX}]); Spark cannot hold it in a bigint column"
        )
    _check_int32(seed, "seed")
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK32, _mix_k1(bits & _MASK32))
    h1 = _mix_h1(h1, _mix_k1(bits >> 32))
    return _to_signed(_fmix(h1, 8))


def hash_bytes(data: bytes | bytearray | memoryview, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes`` (legacy tail), used for strings/binary.

    The whole 4-byte words are read little-endian as in Murmur3; each of the
    ``len % 4`` trailing bytes is then sign-extended to an int and mixed on its own.
    This differs from standard Murmur3 (``mmh3``) whenever ``len % 4 != 0``.

    Parameters
    ----------
    data : bytes-like
        The bytes to hash.
    seed : int, default 42
        32-bit signed seed.

    Returns
    -------
    int
        The 32-bit signed hash.
    """
    _check_int32(seed, "seed")
    buf = bytes(data)
    n = len(buf)
    aligned = n - n % 4
    h1 = seed & _MASK32
    for (word,) in struct.iter_unpack("<I", buf[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in buf[aligned:]:
        signed_byte = byte - 256 if byte >= 128 else byte  # Java's (int) (byte) b
        h1 = _mix_h1(h1, _mix_k1(signed_byte & _MASK32))
    return _to_signed(_fmix(h1, n))


def hash_string(value: str, seed: int = SPARK_HASH_SEED) -> int:
    """The hash of a Spark ``string`` (UTF-8 bytes, ``hashUnsafeBytes``).

    Parameters
    ----------
    value : str
        The string; it must be encodable as UTF-8 (no lone surrogates).
    seed : int, default 42
        32-bit signed seed.

    Returns
    -------
    int
        The 32-bit signed hash.

    Raises
    ------
    KeyGroupError
        If ``value`` cannot be encoded as UTF-8.
    """
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KeyGroupError(
            f"string key {value!r} is not valid UTF-8 ({exc.reason}); "
            "Spark strings are UTF-8, remove lone surrogates from the key"
        ) from None
    return hash_bytes(data, seed)


# --------------------------------------------------------------------------------------
# Spark's hash(col1, col2, ...)
# --------------------------------------------------------------------------------------


def _type_name(type_hint: TypeHint) -> str:
    raw = type_hint.simpleString() if isinstance(type_hint, _SparkDataType) else type_hint
    if not isinstance(raw, str):
        raise KeyGroupError(
            f"type hint {type_hint!r} is neither a Spark type name nor a DataType; "
            f"use one of {', '.join(SUPPORTED_TYPES)}"
        )
    canonical = _TYPE_ALIASES.get(raw.strip().lower())
    if canonical is None:
        raise KeyGroupError(
            f"cannot hash key type {raw!r} in Python; supported key types are "
            f"{', '.join(SUPPORTED_TYPES)} (collated strings, decimals, timestamps and "
            "nested types are not): cast the key column to one of them"
        )
    return canonical


def _infer_type(value: object) -> str:
    # Order matters: bool is an int, datetime is a date.
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, datetime.datetime):
        raise KeyGroupError(
            f"cannot infer a hashable Spark type for {value!r}: Spark infers timestamp, "
            "which is not supported; pass types=['date'] to hash it as a date"
        )
    if isinstance(value, datetime.date):
        return "date"
    raise KeyGroupError(
        f"cannot hash key value {value!r} of Python type {type(value).__name__}; "
        f"supported key types are {', '.join(SUPPORTED_TYPES)}"
    )


def _wrong_value(value: object, type_name: str) -> KeyGroupError:
    return KeyGroupError(
        f"key value {value!r} (Python {type(value).__name__}) does not fit Spark type "
        f"{type_name!r}; pass the matching type name or convert the value"
    )


def hash_value(value: object, type_hint: TypeHint, seed: int = SPARK_HASH_SEED) -> int:
    """The hash of one column value, as one step of Spark's ``hash(...)``.

    Parameters
    ----------
    value : object
        The column value; ``None`` is SQL null.
    type_hint : str or pyspark DataType
        The column's Spark type, e.g. ``"int"``, ``"bigint"``, ``"string"`` or
        ``IntegerType()`` (see :data:`SUPPORTED_TYPES`; aliases ``integer``, ``long``,
        ``short``, ``byte``, ``bool``, ``str`` are accepted).
    seed : int, default 42
        The hash of the previous columns (42 for the first column).

    Returns
    -------
    int
        The 32-bit signed hash; ``seed`` itself when ``value`` is ``None``.

    Raises
    ------
    KeyGroupError
        If the type is not supported or the value does not fit it.
    """
    type_name = _type_name(type_hint)
    if value is None:
        _check_int32(seed, "seed")
        return seed
    if type_name == "boolean":
        if not isinstance(value, bool):
            raise _wrong_value(value, type_name)
        return hash_int(1 if value else 0, seed)
    if type_name in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_value(value, type_name)
        low, high = _INT_RANGES[type_name]
        if not low <= value <= high:
            raise KeyGroupError(
                f"key value {value} is out of range for Spark type {type_name!r} "
                f"([{low}, {high}]); declare the column as 'bigint'"
            )
        return hash_int(value, seed)
    if type_name == "bigint":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_value(value, type_name)
        return hash_long(value, seed)
    if type_name == "string":
        if not isinstance(value, str):
            raise _wrong_value(value, type_name)
        return hash_string(value, seed)
    if type_name == "binary":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _wrong_value(value, type_name)
        return hash_bytes(value, seed)
    if type_name == "date":
        if not isinstance(value, datetime.date):
            raise _wrong_value(value, type_name)
        return hash_int(value.toordinal() - _EPOCH_ORDINAL, seed)
    # float / double
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_value(value, type_name)
    number = float(value)
    if type_name == "float":
        if number == 0.0:
            return hash_int(0, seed)  # Spark hashes -0.0f as 0.0f
        if math.isnan(number):
            return hash_int(0x7FC00000, seed)  # Float.floatToIntBits(NaN)
        try:
            (bits,) = struct.unpack("<i", struct.pack("<f", number))
        except OverflowError:
            raise KeyGroupError(
                f"key value {value!r} does not fit Spark type 'float'; declare the column "
                "as 'double'"
            ) from None
        return hash_int(bits, seed)
    if number == 0.0:
        return hash_long(0, seed)  # Spark hashes -0.0d as 0.0d
    if math.isnan(number):
        return hash_long(0x7FF8000000000000, seed)  # Double.doubleToLongBits(NaN)
    (long_bits,) = struct.unpack("<q", struct.pack("<d", number))
    return hash_long(long_bits, seed)


def _columns(
    values: Sequence[object] | object, types: Sequence[TypeHint] | TypeHint | None
) -> list[tuple[object, TypeHint]]:
    cols: list[object] = list(values) if isinstance(values, (list, tuple)) else [values]
    if types is None:
        return [(v, _infer_type(v) if v is not None else "string") for v in cols]
    hints: list[TypeHint] = [types] if isinstance(types, (str, _SparkDataType)) else list(types)
    if len(hints) != len(cols):
        raise KeyGroupError(
            f"{len(cols)} key value(s) {cols!r} but {len(hints)} type(s) {hints!r}; "
            "pass one Spark type per key column"
        )
    return list(zip(cols, hints, strict=True))


def spark_hash(
    values: Sequence[object] | object,
    types: Sequence[TypeHint] | TypeHint | None = None,
) -> int:
    """Spark SQL's ``hash(col1, col2, ...)`` of one row, in pure Python.

    Parameters
    ----------
    values : tuple or list of object, or a single value
        The key column values in column order; ``None`` is null. Anything that is not a
        list or tuple (including ``str`` and ``bytes``) is one single column.
    types : sequence of (str or DataType), str, DataType or None, default None
        The Spark type of each column (one per value), e.g. ``["int", "string"]``.
        ``None`` infers them like ``spark.createDataFrame`` (``int`` -> ``bigint``,
        ``float`` -> ``double``); pass them explicitly for ``int`` columns.

    Returns
    -------
    int
        The 32-bit signed value Spark's ``hash`` returns for that row.

    Raises
    ------
    KeyGroupError
        If a type is unsupported, a value does not fit its type, or the number of
        types differs from the number of values.

    Examples
    --------
    >>> spark_hash([1], ["int"])
    -559580957
    >>> spark_hash((1, "a"), ("bigint", "string")) == spark_hash((1, "a"))
    True
    """
    h = SPARK_HASH_SEED
    for value, type_hint in _columns(values, types):
        h = hash_value(value, type_hint, h)
    return h


def key_group_of_hash(hash_value: int, max_parallelism: int) -> int:
    """The key group of a Spark hash: ``pmod(hash_value, max_parallelism)``.

    Parameters
    ----------
    hash_value : int
        A 32-bit signed value as returned by Spark's ``hash(...)``.
    max_parallelism : int
        The number of key groups, in ``[1, 32768]``.

    Returns
    -------
    int
        The key group, in ``[0, max_parallelism)``.

    Raises
    ------
    KeyGroupError
        If ``max_parallelism`` is out of range or ``hash_value`` is not 32-bit.
    """
    _check_max_parallelism(max_parallelism)
    _check_int32(hash_value, "hash value")
    # Spark's pmod: ((a % n) + n) % n with Java's truncating %; Python's % is already
    # non-negative for n > 0, which is the same number.
    return hash_value % max_parallelism


def key_group_for_key(
    values: Sequence[object] | object,
    types: Sequence[TypeHint] | TypeHint | None,
    max_parallelism: int,
) -> int:
    """The key group of a key: ``pmod(hash(key cols), max_parallelism)``.

    This is the ``_key_group`` column :func:`barriered.keyed` computes in the JVM.

    Parameters
    ----------
    values : tuple or list of object, or a single value
        The key column values (see :func:`spark_hash`).
    types : sequence of (str or DataType), str, DataType or None
        The Spark types of the key columns (see :func:`spark_hash`).
    max_parallelism : int
        The number of key groups, in ``[1, 32768]``.

    Returns
    -------
    int
        The key group, in ``[0, max_parallelism)``.

    Raises
    ------
    KeyGroupError
        As :func:`spark_hash` and :func:`key_group_of_hash`.
    """
    _check_max_parallelism(max_parallelism)
    return key_group_of_hash(spark_hash(values, types), max_parallelism)


# --------------------------------------------------------------------------------------
# Flink's KeyGroupRangeAssignment
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyGroupRange:
    """A contiguous, inclusive range of key groups ``[start, end]`` (Flink's ``KeyGroupRange``).

    ``KeyGroupRange(0, -1)`` is the empty range.

    Parameters
    ----------
    start : int
        First key group, ``>= 0``.
    end : int
        Last key group (inclusive), ``>= start - 1``.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start - 1:
            raise KeyGroupError(
                f"invalid key group range [{self.start}, {self.end}]: need 0 <= start and "
                "start - 1 <= end (end is inclusive)"
            )

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges (Flink's ``getIntersection``), possibly empty.

        Parameters
        ----------
        other : KeyGroupRange
            The other range.

        Returns
        -------
        KeyGroupRange
            The overlap; ``KeyGroupRange(0, -1)`` if there is none.
        """
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange(0, -1)


def _check_parallelism(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KeyGroupError(f"{name} must be an integer, got {value!r}")
    if not 0 < value <= UPPER_BOUND_MAX_PARALLELISM:
        raise KeyGroupError(
            f"{name} = {value} is out of range: it must be in "
            f"[1, {UPPER_BOUND_MAX_PARALLELISM}] (UPPER_BOUND_MAX_PARALLELISM = 1 << 15)"
            + (
                "; set spark.sql.streaming.barriered.maxParallelism to a value in that range"
                if name == "maxParallelism"
                else "; use fewer partitions"
            )
        )


def _check_max_parallelism(max_parallelism: int) -> None:
    _check_parallelism("maxParallelism", max_parallelism)


def _check_parallelisms(max_parallelism: int, parallelism: int) -> None:
    _check_parallelism("maxParallelism", max_parallelism)
    _check_parallelism("parallelism", parallelism)
    if parallelism > max_parallelism:
        raise KeyGroupError(
            f"parallelism = {parallelism} is larger than maxParallelism = {max_parallelism}: "
            "an operator instance must own at least one key group; use at most "
            f"{max_parallelism} partitions, or start a new snapshotPath with a larger "
            "spark.sql.streaming.barriered.maxParallelism (it is fixed for the life of the "
            "snapshot path)"
        )


def _round_up_to_power_of_two(x: int) -> int:
    # Flink's MathUtils.roundUpToPowerOfTwo for 0 < x <= 2**30.
    return 1 << (x - 1).bit_length()


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default ``maxParallelism`` for an operator parallelism.

    ``min(max(roundUpToPowerOfTwo(p + p // 2), 128), 32768)``
    (``KeyGroupRangeAssignment.computeDefaultMaxParallelism``).

    Parameters
    ----------
    parallelism : int
        The operator parallelism, in ``[1, 32768]``.

    Returns
    -------
    int
        A power of two in ``[128, 32768]``.

    Raises
    ------
    KeyGroupError
        If ``parallelism`` is out of range.
    """
    _check_parallelism("parallelism", parallelism)
    return min(
        max(
            _round_up_to_power_of_two(parallelism + parallelism // 2),
            DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
        ),
        UPPER_BOUND_MAX_PARALLELISM,
    )


def key_group_range_for_operator(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The key groups operator instance ``operator_index`` of ``parallelism`` owns.

    Flink's ``computeKeyGroupRangeForOperatorIndex``:
    ``start = (i * maxP + p - 1) // p``, ``end = ((i + 1) * maxP - 1) // p``. The ranges of
    ``i = 0 .. p - 1`` partition ``[0, maxP)`` and differ in size by at most one.

    Parameters
    ----------
    max_parallelism : int
        The number of key groups, in ``[1, 32768]``.
    parallelism : int
        The number of operator instances, in ``[1, max_parallelism]``.
    operator_index : int
        The instance, in ``[0, parallelism)``.

    Returns
    -------
    KeyGroupRange
        The (non-empty) inclusive range of key groups.

    Raises
    ------
    KeyGroupError
        If a parameter is out of range.
    """
    _check_parallelisms(max_parallelism, parallelism)
    if isinstance(operator_index, bool) or not isinstance(operator_index, int):
        raise KeyGroupError(f"operator index must be an integer, got {operator_index!r}")
    if not 0 <= operator_index < parallelism:
        raise KeyGroupError(
            f"operator index {operator_index} is out of range [0, {parallelism}) for "
            f"parallelism = {parallelism}"
        )
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The operator instance that owns ``key_group``: ``key_group * p // maxP``.

    Flink's ``computeOperatorIndexForKeyGroup``; the inverse of
    :func:`key_group_range_for_operator`.

    Parameters
    ----------
    max_parallelism : int
        The number of key groups, in ``[1, 32768]``.
    parallelism : int
        The number of operator instances, in ``[1, max_parallelism]``.
    key_group : int
        The key group, in ``[0, max_parallelism)``.

    Returns
    -------
    int
        The operator index, in ``[0, parallelism)``.

    Raises
    ------
    KeyGroupError
        If a parameter is out of range.
    """
    _check_parallelisms(max_parallelism, parallelism)
    if isinstance(key_group, bool) or not isinstance(key_group, int):
        raise KeyGroupError(f"key group must be an integer, got {key_group!r}")
    if not 0 <= key_group < max_parallelism:
        raise KeyGroupError(
            f"key group {key_group} is out of range [0, {max_parallelism}) for "
            f"maxParallelism = {max_parallelism}; key groups are pmod(hash(key), "
            "maxParallelism), was the snapshot written with another maxParallelism?"
        )
    return key_group * parallelism // max_parallelism
