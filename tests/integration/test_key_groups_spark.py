"""The pure-Python Spark hash agrees with the JVM's ``hash`` / ``pmod`` on every row."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from barriered.statestore.key_groups import key_group_for_key, spark_hash

pytestmark = pytest.mark.spark

MAX_PARALLELISMS = (128, 7, 32768)

STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "abcdef",
    "abcdefg",
    "abcdefgh",
    "abcdefghi",  # lengths 0..9: every tail length, several whole words
    "é",
    "ü1",
    "日本語",
    "日本語テキスト",
    "😀",
    "😀x",
    "\x80\xff",
    "\u00ff\u00fe\u00fd",
    "key-with spaces\tand\nnewline",
    "user_000123",
]
INTS = [0, 1, -1, 42, 127, -128, 2**31 - 1, -(2**31), 123456789, -987654321]
LONGS = [0, 1, -1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 1234567890123456789]
DOUBLES = [0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), float("nan")]
DATES = [datetime.date(1970, 1, 1), datetime.date(1969, 12, 31), datetime.date(2024, 2, 29)]

SCHEMA = (
    "i int, l bigint, s string, b boolean, d double, f float, sh smallint, by tinyint, "
    "dt date, bin binary"
)
COLS = ["i", "l", "s", "b", "d", "f", "sh", "by", "dt", "bin"]
TYPES = ["int", "bigint", "string", "boolean", "double", "float", "smallint", "tinyint",
         "date", "binary"]  # fmt: skip

# Single-column keys, and multi-column keys in several orders (the order changes the
# chained seed).
KEYS: list[list[str]] = [[c] for c in COLS] + [
    ["i", "s"],
    ["s", "i"],
    ["l", "s", "b"],
    ["b", "i", "l"],
    ["s", "s"],
    ["i", "l", "s", "b", "d", "f", "sh", "by", "dt", "bin"],
    ["dt", "bin", "f"],
]


def _rows() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    n = max(len(STRINGS), len(INTS), len(LONGS))
    for k in range(n):
        s = STRINGS[k % len(STRINGS)]
        rows.append(
            (
                INTS[k % len(INTS)],
                LONGS[k % len(LONGS)],
                s,
                k % 2 == 0,
                DOUBLES[k % len(DOUBLES)],
                DOUBLES[k % len(DOUBLES)] if k % len(DOUBLES) != 4 else 3.5,  # 1e300: no float
                (k * 1000) - 10000,
                k - 10,
                DATES[k % len(DATES)],
                s.encode("utf-8"),
            )
        )
    # Nulls: all-null row, and each column null in turn.
    rows.append(tuple([None] * len(COLS)))
    base = rows[3]
    for c in range(len(COLS)):
        rows.append(tuple(None if j == c else v for j, v in enumerate(base)))
    return rows


def test_spark_hash_and_key_group_agree_with_the_jvm(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(_rows(), SCHEMA)
    exprs = []
    for ki, key in enumerate(KEYS):
        h = F.hash(*[F.col(c) for c in key])
        exprs.append(h.alias(f"h{ki}"))
        for n in MAX_PARALLELISMS:
            exprs.append(F.pmod(h, F.lit(n)).alias(f"kg{ki}_{n}"))
    result = df.select(*COLS, *exprs).collect()
    assert len(result) == len(_rows())

    checked = 0
    for row in result:
        for ki, key in enumerate(KEYS):
            values = [row[c] for c in key]
            types = [TYPES[COLS.index(c)] for c in key]
            expected_hash = row[f"h{ki}"]
            assert spark_hash(values, types) == expected_hash, (key, values)
            for n in MAX_PARALLELISMS:
                assert key_group_for_key(values, types, n) == row[f"kg{ki}_{n}"], (key, values, n)
                checked += 1
    assert checked == len(result) * len(KEYS) * len(MAX_PARALLELISMS)


def test_spark_hash_accepts_the_dataframe_schema_types(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(_rows()[:5], SCHEMA)
    fields = [df.schema[c].dataType for c in ("i", "s", "l")]
    for row in df.select("i", "s", "l", F.hash("i", "s", "l").alias("h")).collect():
        assert spark_hash([row.i, row.s, row.l], fields) == row.h


def test_inferred_python_types_match_create_dataframe_inference(spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = [(1, "a", True, 2.5), (2**40, "😀", False, -0.0), (-7, "", None, None)]
    df = spark.createDataFrame(rows, ["x", "y", "z", "w"])  # inferred: bigint, string, ...
    got = df.select(F.hash("x", "y", "z", "w").alias("h")).collect()
    assert [spark_hash(list(r)) for r in rows] == [g.h for g in got]
