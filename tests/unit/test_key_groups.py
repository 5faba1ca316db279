"""Key groups: Spark's hash in Python and Flink's KeyGroupRangeAssignment formulas."""

from __future__ import annotations

import datetime
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from barriered.errors import BarrieredError, KeyGroupError
from barriered.statestore.key_groups import (
    SPARK_HASH_SEED,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    default_max_parallelism,
    hash_bytes,
    hash_int,
    hash_long,
    hash_string,
    hash_value,
    key_group_for_key,
    key_group_of_hash,
    key_group_range_for_operator,
    operator_index_for_key_group,
    spark_hash,
)

# Values computed by Spark 4.3 (`SELECT hash(...)`); the integration test checks many
# more against the JVM, these keep the pure suite honest without Spark.
SPARK_GOLDEN: list[tuple[list[object], list[str] | None, int]] = [
    ([1], ["int"], -559580957),
    ([1], ["bigint"], -1712319331),
    ([1], ["smallint"], -559580957),
    ([True], None, -559580957),
    ([None], ["int"], 42),
    ([1.5], None, 1290763749),
    ([-0.0], None, -1670924195),
    ([1.5], ["float"], -221251528),
    ([datetime.date(2024, 1, 2)], None, -21057580),
    ([b"\x01\x02\xff"], None, 456895484),
    ([""], None, 142593372),
    (["a"], None, 1485273170),
    (["ab"], None, -97053317),
    (["abc"], None, 1322437556),
    (["abcd"], None, -396302900),
    (["abcde"], None, 814637928),
    (["é"], None, 2119106806),
    (["日本語"], None, -1143049834),
    (["😀x"], None, -1814635023),
    (["\x80\xff"], None, -511854205),
    ([1, "a", None, 2], ["int", "string", "int", "bigint"], -947240264),
]


@pytest.mark.parametrize(("values", "types", "expected"), SPARK_GOLDEN)
def test_spark_hash_matches_spark_golden_values(
    values: list[object], types: list[str] | None, expected: int
) -> None:
    assert spark_hash(values, types) == expected


def test_hash_primitives_agree_with_spark_hash() -> None:
    assert hash_int(1) == spark_hash([1], ["int"])
    assert hash_long(1) == spark_hash([1], ["bigint"])
    assert hash_string("abc") == hash_bytes(b"abc") == spark_hash("abc")
    assert hash_value(7, "integer", SPARK_HASH_SEED) == hash_int(7)


def test_columns_are_chained_through_the_seed() -> None:
    h1 = hash_int(5)
    assert spark_hash([5, "k"], ["int", "string"]) == hash_string("k", seed=h1)


def test_null_leaves_the_seed_unchanged() -> None:
    assert spark_hash([None, 5], ["string", "int"]) == spark_hash([5], ["int"])
    assert spark_hash([5, None], ["int", "string"]) == spark_hash([5], ["int"])
    assert spark_hash([None]) == SPARK_HASH_SEED


def test_single_scalar_is_one_column() -> None:
    assert spark_hash("abc") == spark_hash(["abc"])
    assert spark_hash(b"ab") == spark_hash([b"ab"], ["binary"])
    assert key_group_for_key(3, "int", 128) == key_group_for_key([3], ["int"], 128)


def test_type_aliases_and_datatype_like_hints() -> None:
    class IntegerTypeLike:
        def simpleString(self) -> str:
            return "int"

    assert spark_hash([9], [IntegerTypeLike()]) == spark_hash([9], ["int"])
    for alias in ("long", "BIGINT"):
        assert spark_hash([9], [alias]) == spark_hash([9], ["bigint"])


def test_python_int_is_inferred_as_bigint_like_create_dataframe() -> None:
    assert spark_hash([1]) == hash_long(1)


def test_float_nan_and_negative_zero_are_canonical() -> None:
    assert spark_hash([-0.0], ["float"]) == spark_hash([0.0], ["float"])
    assert spark_hash([float("nan")]) == spark_hash([float("-nan")])


@given(st.integers(-(2**31), 2**31 - 1))
def test_hash_of_int_is_32_bit_signed(value: int) -> None:
    h = hash_int(value)
    assert -(2**31) <= h < 2**31
    assert hash_long(value) == spark_hash([value], ["bigint"])


@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, UPPER_BOUND_MAX_PARALLELISM))
def test_key_group_of_hash_is_spark_pmod(hash_value_: int, max_parallelism: int) -> None:
    kg = key_group_of_hash(hash_value_, max_parallelism)
    assert 0 <= kg < max_parallelism
    java_rem = abs(hash_value_) % max_parallelism * (1 if hash_value_ >= 0 else -1)
    assert kg == (java_rem + max_parallelism) % max_parallelism


@pytest.mark.parametrize(
    ("values", "types", "match"),
    [
        ([2**31], ["int"], "out of range for Spark type 'int'"),
        ([200], ["tinyint"], "out of range for Spark type 'tinyint'"),
        ([2**63], ["bigint"], "is not a 64-bit signed integer"),
        (["1"], ["int"], "does not fit Spark type 'int'"),
        ([True], ["int"], "does not fit Spark type 'int'"),
        ([1], ["boolean"], "does not fit Spark type 'boolean'"),
        ([1e300], ["float"], "does not fit Spark type 'float'"),
        ([1], ["decimal(10,0)"], "cannot hash key type 'decimal\\(10,0\\)'"),
        ([1], ["string collate UTF8_LCASE"], "collated strings"),
        ([1, 2], ["int"], "2 key value\\(s\\) .* but 1 type\\(s\\)"),
        ([object()], None, "cannot hash key value"),
        ([datetime.datetime(2024, 1, 1)], None, "timestamp"),
        (["\ud800"], None, "not valid UTF-8"),
    ],
)
def test_hash_errors(values: list[object], types: list[str] | None, match: str) -> None:
    with pytest.raises(KeyGroupError, match=match):
        spark_hash(values, types)


# ---- Flink's KeyGroupRangeAssignment ---------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [
        (1, 128),
        (2, 128),
        (85, 128),  # 85 + 42 = 127 -> 128
        (86, 256),  # 86 + 43 = 129 -> 256
        (100, 256),
        (171, 256),  # 256 exactly
        (172, 512),
        (1000, 2048),
        (21846, 32768),
        (32768, 32768),  # capped
    ],
)
def test_default_max_parallelism_matches_flink(parallelism: int, expected: int) -> None:
    assert default_max_parallelism(parallelism) == expected


@pytest.mark.parametrize(
    ("max_parallelism", "parallelism", "expected"),
    [
        # From Flink's KeyGroupRangeAssignment formulas, worked by hand.
        (128, 1, [(0, 127)]),
        (128, 2, [(0, 63), (64, 127)]),
        (128, 3, [(0, 42), (43, 85), (86, 127)]),
        (10, 4, [(0, 2), (3, 4), (5, 7), (8, 9)]),
        (7, 7, [(i, i) for i in range(7)]),
        (5, 3, [(0, 1), (2, 3), (4, 4)]),
    ],
)
def test_key_group_ranges_known_values(
    max_parallelism: int, parallelism: int, expected: list[tuple[int, int]]
) -> None:
    ranges = [
        key_group_range_for_operator(max_parallelism, parallelism, i) for i in range(parallelism)
    ]
    assert [(r.start, r.end) for r in ranges] == expected


def _check_assignment(max_parallelism: int, parallelism: int) -> None:
    ranges = [
        key_group_range_for_operator(max_parallelism, parallelism, i) for i in range(parallelism)
    ]
    # The ranges partition [0, maxP) in order, none empty, sizes differ by at most one.
    assert ranges[0].start == 0
    assert ranges[-1].end == max_parallelism - 1
    for left, right in itertools.pairwise(ranges):
        assert right.start == left.end + 1
    sizes = {len(r) for r in ranges}
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    assert sum(len(r) for r in ranges) == max_parallelism
    # Every key group maps back to the operator whose range contains it.
    for index, key_range in enumerate(ranges):
        for kg in key_range:
            assert operator_index_for_key_group(max_parallelism, parallelism, kg) == index


@pytest.mark.parametrize(
    ("max_parallelism", "parallelism"),
    [(m, p) for m in (1, 2, 7, 128, 129, 1000) for p in range(1, min(m, 40) + 1)]
    + [(32768, 1), (32768, 3), (32768, 1000), (32768, 32768), (128, 128)],
)
def test_ranges_partition_and_invert(max_parallelism: int, parallelism: int) -> None:
    _check_assignment(max_parallelism, parallelism)


@given(st.integers(1, 4096).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m))))
def test_ranges_partition_and_invert_property(pair: tuple[int, int]) -> None:
    _check_assignment(*pair)


def test_key_group_range_protocol() -> None:
    r = KeyGroupRange(3, 6)
    assert list(r) == [3, 4, 5, 6]
    assert len(r) == 4
    assert 3 in r and 6 in r and 7 not in r and 2 not in r and "3" not in r
    empty = KeyGroupRange(0, -1)
    assert len(empty) == 0 and list(empty) == [] and 0 not in empty
    assert r.intersection(KeyGroupRange(5, 10)) == KeyGroupRange(5, 6)
    assert len(r.intersection(KeyGroupRange(7, 10))) == 0
    with pytest.raises(KeyGroupError, match=r"invalid key group range \[5, 2\]"):
        KeyGroupRange(5, 2)
    with pytest.raises(KeyGroupError, match=r"invalid key group range \[-1, 2\]"):
        KeyGroupRange(-1, 2)


# ---- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: default_max_parallelism(0), r"parallelism = 0 is out of range.*\[1, 32768\]"),
        (lambda: default_max_parallelism(32769), r"parallelism = 32769 is out of range"),
        (
            lambda: key_group_range_for_operator(0, 1, 0),
            r"maxParallelism = 0 is out of range.*set spark\.sql\.streaming\.barriered"
            r"\.maxParallelism",
        ),
        (
            lambda: key_group_range_for_operator(32769, 1, 0),
            r"maxParallelism = 32769 is out of range: it must be in \[1, 32768\]",
        ),
        (
            lambda: key_group_range_for_operator(128, 129, 0),
            r"parallelism = 129 is larger than maxParallelism = 128.*at most 128 partitions",
        ),
        (
            lambda: key_group_range_for_operator(128, 4, 4),
            r"operator index 4 is out of range \[0, 4\)",
        ),
        (
            lambda: key_group_range_for_operator(128, 4, -1),
            r"operator index -1 is out of range",
        ),
        (
            lambda: operator_index_for_key_group(128, 4, 128),
            r"key group 128 is out of range \[0, 128\) for maxParallelism = 128",
        ),
        (
            lambda: operator_index_for_key_group(128, 4, -1),
            r"key group -1 is out of range",
        ),
        (lambda: operator_index_for_key_group(128, 0, 1), r"parallelism = 0 is out of range"),
        (lambda: key_group_of_hash(5, 0), r"maxParallelism = 0 is out of range"),
        (lambda: key_group_of_hash(2**31, 128), r"hash value 2147483648 is not a 32-bit"),
        (lambda: key_group_for_key([1], ["int"], 40000), r"maxParallelism = 40000"),
        (lambda: key_group_range_for_operator(True, 1, 0), r"must be an integer"),
    ],
)
def test_validation_messages(call: object, match: str) -> None:
    with pytest.raises(KeyGroupError, match=match) as info:
        call()  # type: ignore[operator]
    assert isinstance(info.value, BarrieredError)
    assert isinstance(info.value, ValueError)


def test_key_group_for_key_composes_hash_and_pmod() -> None:
    h = spark_hash([1, "a"], ["int", "string"])
    for n in (1, 7, 128, 32768):
        assert key_group_for_key([1, "a"], ["int", "string"], n) == h % n
