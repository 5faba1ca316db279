"""Key groups of keys in Python: Spark's hash, the key group, the shuffle partition."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from barriered.errors import KeyGroupError
from barriered.statestore.key_groups import (
    SPARK_HASH_SEED,
    group_values,
    key_group_for_key,
    key_types,
    parse_key,
    partition_key_groups,
    partition_of,
    shuffle_partition,
    spark_hash,
    store_key_types,
)

# Values computed by Spark 4.3 (`SELECT hash(...)`); the integration test checks many
# more against the JVM, these keep the pure suite honest without Spark.
SPARK_GOLDEN: list[tuple[list[object], list[str], int]] = [
    ([1], ["int"], -559580957),
    ([1], ["bigint"], -1712319331),
    ([1], ["smallint"], -559580957),
    ([True], ["boolean"], -559580957),
    ([None], ["int"], 42),
    ([1.5], ["double"], 1290763749),
    ([-0.0], ["double"], -1670924195),
    ([1.5], ["float"], -221251528),
    ([datetime.date(2024, 1, 2)], ["date"], -21057580),
    ([b"\x01\x02\xff"], ["binary"], 456895484),
    ([""], ["string"], 142593372),
    (["a"], ["string"], 1485273170),
    (["ab"], ["string"], -97053317),
    (["abc"], ["string"], 1322437556),
    (["abcd"], ["string"], -396302900),
    (["abcde"], ["string"], 814637928),
    (["é"], ["string"], 2119106806),
    (["日本語"], ["string"], -1143049834),
    (["😀x"], ["string"], -1814635023),
    (["\x80\xff"], ["string"], -511854205),
    ([1, "a", None, 2], ["int", "string", "int", "bigint"], -947240264),
]


@pytest.mark.parametrize(("values", "types", "expected"), SPARK_GOLDEN)
def test_spark_hash_matches_spark_golden_values(
    values: list[object], types: list[str], expected: int
) -> None:
    assert spark_hash(values, types) == expected


def test_null_leaves_the_seed_unchanged() -> None:
    assert spark_hash([None, 5], ["string", "int"]) == spark_hash([5], ["int"])
    assert spark_hash([5, None], ["int", "string"]) == spark_hash([5], ["int"])
    assert spark_hash([None], ["string"]) == SPARK_HASH_SEED


def test_float_nan_and_negative_zero_are_canonical() -> None:
    assert spark_hash([-0.0], ["float"]) == spark_hash([0.0], ["float"])
    assert spark_hash([float("nan")], ["double"]) == spark_hash([float("-nan")], ["double"])


@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, 1 << 15))
def test_key_group_is_spark_pmod_of_the_hash(value: int, max_parallelism: int) -> None:
    h = spark_hash([value], ["int"])
    assert -(2**31) <= h < 2**31
    java_rem = abs(h) % max_parallelism * (1 if h >= 0 else -1)
    expected = (java_rem + max_parallelism) % max_parallelism
    assert key_group_for_key([value], ["int"], max_parallelism) == expected


@pytest.mark.parametrize("max_parallelism", [1, 7, 8, 128, 32768])
@pytest.mark.parametrize("partitions", [1, 2, 3, 5, 200])
def test_each_partition_owns_one_contiguous_range_of_key_groups(
    max_parallelism: int, partitions: int
) -> None:
    """Flink's key group ranges: every key group in exactly one partition, ranges in
    order, sizes differing by at most one; the grouping value of a partition hashes
    into it (HashPartitioning of one int: pmod(hash(v), n))."""
    ranges = [partition_key_groups(p, partitions, max_parallelism) for p in range(partitions)]
    assert [g for r in ranges for g in r] == list(range(max_parallelism))
    sizes = {len(r) for r in ranges if len(r)}
    assert max(sizes) - min(sizes) <= 1
    for p, r in enumerate(ranges):
        assert all(partition_of(g, partitions, max_parallelism) == p for g in r)
        assert all(shuffle_partition(g, partitions, max_parallelism) == p for g in r)
    values = group_values(partitions)
    assert [spark_hash([v], ["int"]) % partitions for v in values] == list(range(partitions))
    with pytest.raises(KeyGroupError, match="partitions must be >= 1"):
        group_values(0)


def test_key_types_come_from_the_recorded_key_schema() -> None:
    assert key_types("user_id string, n int") == [("user_id", "string"), ("n", "int")]
    assert key_types("d DATE") == [("d", "date")]


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ("p decimal(10,0)", "key column 'p' has type 'decimal\\(10,0\\)'"),
        ("s string collate UTF8_LCASE", "key column 's' has type 'string collate utf8_lcase'"),
        ("a array<int>", "pmod\\(hash\\(a\\), maxParallelism\\)"),
    ],
)
def test_unsupported_key_types_are_refused(schema: str, match: str) -> None:
    with pytest.raises(KeyGroupError, match=match):
        key_types(schema)


def test_key_values_parse_as_their_column_types() -> None:
    types = key_types(
        "a tinyint, b smallint, c int, d bigint, e boolean, f float, g double, h string, "
        "i binary, j date"
    )
    texts = ["-5", "300", "7", "9000000000", "true", "1.5", "-0.0", "x,y", "0x01ff", "2024-02-29"]
    assert parse_key(texts, types) == (
        -5, 300, 7, 9_000_000_000, True, 1.5, -0.0, "x,y", b"\x01\xff",
        datetime.date(2024, 2, 29),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("texts", "schema", "match"),
    [
        (["200"], "a tinyint", "'200' is not a tinyint for key column 'a'"),
        (["x"], "n int", "'x' is not a int for key column 'n'"),
        (["yes"], "b boolean", "not true or false"),
        (["1e300"], "f float", "not a float"),
        (["2024-13-01"], "d date", "not a date"),
        (["zz"], "b binary", "not a binary"),
        (
            ["1", "2"],
            "n int",
            "2 key value\\(s\\) \\['1', '2'\\] for 1 key column\\(s\\) \\(n int\\)",
        ),
    ],
)
def test_key_values_that_do_not_parse_are_refused(
    texts: list[str], schema: str, match: str
) -> None:
    with pytest.raises(KeyGroupError, match=match):
        parse_key(texts, key_types(schema))


def test_a_value_of_the_wrong_python_type_or_no_utf8_is_refused() -> None:
    with pytest.raises(KeyGroupError, match="is not a Spark 'int'"):
        spark_hash(["1"], ["int"])
    with pytest.raises(KeyGroupError, match="not valid UTF-8"):
        spark_hash(["\udcff"], ["string"])  # an undecodable byte on a command line


UTC = datetime.timezone.utc


def test_a_timestamp_hashes_as_its_microseconds_since_the_epoch() -> None:
    # Spark hashes a timestamp with hashLong of its microseconds: bigint 1 is -1712319331
    one_micro = datetime.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert spark_hash([one_micro], ["timestamp"]) == -1712319331
    assert spark_hash([one_micro.replace(tzinfo=None)], ["timestamp_ntz"]) == -1712319331
    at = datetime.datetime(2026, 1, 1, 9, 5, tzinfo=UTC)
    micros = 1767258300 * 1_000_000
    assert spark_hash([at, "u"], ["timestamp", "string"]) == spark_hash(
        [micros, "u"], ["bigint", "string"]
    )
    types = [("t", "timestamp")]
    for text in ("2026-01-01T09:05:00Z", "2026-01-01T10:05:00+01:00", "2026-01-01 09:05:00"):
        (parsed,) = parse_key([text], types)
        assert spark_hash([parsed], ["timestamp"]) == spark_hash([micros], ["bigint"]), text
    with pytest.raises(KeyGroupError, match="'soon' is not a timestamp for key column 't'"):
        parse_key(["soon"], types)


def _field(name: str, data_type: object) -> dict[str, object]:
    return {"name": name, "type": data_type, "nullable": True, "metadata": {}}


WINDOW_KEY = {
    "type": "struct",
    "fields": [
        _field(
            "window",
            {
                "type": "struct",
                "fields": [_field("start", "timestamp"), _field("end", "timestamp")],
            },
        ),
        _field("user_id", "string"),
        _field("n", "long"),
    ],
}


def test_a_store_key_is_flattened_into_its_leaf_fields() -> None:
    assert store_key_types(WINDOW_KEY, 3) == [
        ("window.start", "timestamp"),
        ("window.end", "timestamp"),
        ("user_id", "string"),
        ("n", "bigint"),
    ]
    # a session window's or a join's store: only the leading partition key columns
    assert store_key_types(WINDOW_KEY, 1) == [
        ("window.start", "timestamp"),
        ("window.end", "timestamp"),
    ]
    shorts = {"type": "struct", "fields": [_field("a", "integer"), _field("b", "short")]}
    assert store_key_types(shorts, 2) == [("a", "int"), ("b", "smallint")]


@pytest.mark.parametrize(
    ("data_type", "shown"),
    [("decimal(10,0)", '"decimal(10,0)"'), ({"type": "array", "elementType": "integer"}, "array")],
)
def test_a_store_key_of_another_type_is_refused_naming_the_field(
    data_type: object, shown: str
) -> None:
    key = {
        "type": "struct",
        "fields": [_field("k", {"type": "struct", "fields": [_field("x", data_type)]})],
    }
    with pytest.raises(KeyGroupError, match=r"key field 'k\.x' has type") as refused:
        store_key_types(key, 1)
    assert shown in str(refused.value) and "structs of them" in str(refused.value)
