"""The pure-Python Spark hash agrees with the JVM's ``hash`` / ``pmod`` on every row."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from barriered import cli
from barriered.api import group_column
from barriered.statestore.key_groups import key_group_for_key, shuffle_partition, spark_hash
from runs import MODES, run, totals_before, upstream

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


TIMESTAMPS = [
    datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc),
    datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc),
    datetime.datetime(2026, 1, 1, 9, 3, 7, 250, tzinfo=datetime.timezone.utc),
    datetime.datetime(2262, 4, 11, 23, 47, 16, tzinfo=datetime.timezone.utc),
]  # no null: a window drops rows without a time (the nulls of hash are tested above)


def test_timestamps_and_structs_hash_as_the_jvm_hashes_them(spark: Any) -> None:
    """A state store's key (a window struct of timestamps, then the grouping column)
    hashes as its flattened leaf fields do: what ``inspect --key`` of a store relies on."""
    from pyspark.sql import functions as F

    rows = [(i, t, STRINGS[i], INTS[i]) for i, t in enumerate(TIMESTAMPS)]
    df = spark.createDataFrame(rows, "n int, t timestamp, s string, i int")
    out = df.select(
        "n",
        "s",
        "i",
        F.hash("t").alias("h_t"),
        F.hash(F.col("t").cast("timestamp_ntz")).alias("h_ntz"),
        F.hash(F.window("t", "5 minutes"), "s").alias("h_window"),
        F.hash(F.struct("i", F.struct("t", "s")), "s").alias("h_nested"),
    ).collect()
    assert len(out) == len(TIMESTAMPS)
    five = datetime.timedelta(minutes=5)
    for r in out:
        t = TIMESTAMPS[r.n]  # aware: the collected values would be in the process's zone
        assert spark_hash([t], ["timestamp"]) == r.h_t, t
        ntz = t.replace(tzinfo=None)  # the session zone is UTC
        assert spark_hash([ntz], ["timestamp_ntz"]) == r.h_ntz, t
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        start = epoch + ((t - epoch) // five) * five
        window = [start, start + five]
        assert spark_hash([*window, r.s], ["timestamp", "timestamp", "string"]) == r.h_window
        leaves = [r.i, t, r.s, r.s]
        assert spark_hash(leaves, ["int", "timestamp", "string", "string"]) == r.h_nested, t


def test_the_shuffle_partition_of_a_key_group_agrees_with_the_jvm(spark: Any) -> None:
    from pyspark.sql import functions as F

    groups = spark.range(0, 300).select(F.col("id").cast("int").alias("_key_group"))
    for n in (1, 2, 3, 5, 64):
        # Placed as the keyed operator's shuffle places them: by their partition's group.
        placed = groups.repartition(n, group_column(n, 300)).select(
            "_key_group", F.spark_partition_id().alias("p")
        )
        rows = placed.collect()
        assert len(rows) == 300
        expected = {g: shuffle_partition(g, n, 300) for g in range(300)}
        assert {r._key_group: r.p for r in rows} == expected
        assert expected == {g: g * n // 300 for g in range(300)}  # contiguous ranges


def test_inspect_key_finds_the_key_group_partition_and_state_of_a_key(
    session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.sql import functions as F

    _query, layout = run(session, tmp_path, MODES["aligned"])
    totals = totals_before(dict(enumerate(upstream().available())))
    users = sorted(totals)[:5]
    expected = {
        r.user_id: (r.kg, r.p)
        for r in session.createDataFrame([(u,) for u in users], "user_id string")
        .withColumn("_key_group", F.pmod(F.hash("user_id"), F.lit(8)))
        .select(  # the partition of the group the keyed operator groups by, with 3
            "user_id",
            F.col("_key_group").alias("kg"),
            F.pmod(F.hash(group_column(3, 8)), F.lit(3)).alias("p"),
        )
        .collect()
    }
    for user in users:
        assert cli.main(["inspect", layout.root, "--key", user, "--partitions", "3", "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert (found["key_group"], found["partition"]) == expected[user], user
        assert found["max_parallelism"] == 8 and found["key"] == {"user_id": user}
        (row,) = found["state_rows"]
        assert row["total"] == totals[user]
        assert row["key_group"] == found["key_group"]
    assert cli.main(["inspect", layout.root, "--key", "nobody"]) == 0
    assert "no state for this key" in capsys.readouterr().out
