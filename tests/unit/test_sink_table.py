"""Whose table the sink writes, and what it can write there, without Spark: the owner
recorded in the table, a second query refused, a restore from another snapshot path
taking the table over, a foreign table, another schema, column types Delta cannot
store, misspelt options, and a rerun's first batch that Spark ran again."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import (
    ArrayType,
    DayTimeIntervalType,
    IntegerType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from test_sink import SCHEMA, rows_of, settings, stage_batch

from barriered.errors import ConfigError, SinkError
from barriered.sink import commit_plan, committer, owner, schema, staging
from barriered.sink.participant import SinkParticipants
from barriered.sink.staging import StagedBatch
from barriered.sink.writer import write_files
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree


def commit_one(
    tmp_path: Path, snap: str, cid: int, rows: list[tuple[str, str, int]], **kw: str
) -> tuple[SnapshotLayout, list[commit_plan.SinkCommit]]:
    """Stage one batch of ``rows`` on snapshot path ``snap`` and commit it as ``cid``."""
    layout = SnapshotLayout.at(str(tmp_path / snap))
    s = settings(tmp_path, snapshotPath=str(tmp_path / snap), **kw)
    stage_batch(layout, s, 0, cid, rows)
    return layout, committer.commit(layout, cid, commit_plan.plan(layout, 0, cid))


def test_a_second_query_on_the_same_table_and_sink_id_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    first, _ = commit_one(tmp_path, "snap-a", 1, [("a", "eu", 1)])
    assert DeltaTable(str(tmp_path / "out")).metadata().configuration == {
        "barriered.sink.owner.out": first.root
    }
    second = SnapshotLayout.at(str(tmp_path / "snap-b"))
    s = settings(tmp_path, snapshotPath=second.root)
    stage_batch(second, s, 0, 0, [("b", "eu", 1)])
    before = tree(tmp_path / "out"), tree(tmp_path / "snap-b")
    plans = commit_plan.plan(second, 0, 0)
    participants = SinkParticipants(second, 0)
    participants.ran(0)
    for attempt in (
        lambda: committer.commit(second, 1, plans),
        lambda: participants.plans(1, 0),  # the checkpoint does not complete
        lambda: committer.guard(second.root, s, SCHEMA),
    ):
        with pytest.raises(SinkError) as err:
            attempt()
        assert str(err.value) == (
            f"barriered-delta sink 'out' of snapshot path {second.root!r}: the output table "
            f"{s.path!r} belongs to sink 'out' of another query (snapshot path "
            f"{first.root!r}, table property 'barriered.sink.owner.out'); its committed "
            "checkpoints (up to 1) would be taken for this query's and this query's output "
            "silently dropped. Nothing was written. Give this sink its own id (option "
            "sinkId) to add its output next to that query's, or write to a new table "
            "(option path). A restore of that query (restoreFrom its snapshot path or a "
            "savepoint of it) takes its table over"
        )
    assert (tree(tmp_path / "out"), tree(tmp_path / "snap-b")) == before
    # its own sinkId: its output goes next to the first query's
    commit_one(tmp_path, "snap-c", 1, [("c", "eu", 1)], sinkId="second")
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("c", "eu", 1)]
    assert owner.owners(DeltaTable(str(tmp_path / "out"))) == {
        "out": first.root,
        "second": SnapshotLayout.at(str(tmp_path / "snap-c")).root,
    }


def test_a_query_restored_from_the_owner_takes_the_table_over(tmp_path: Path) -> None:
    first, _ = commit_one(tmp_path, "snap-a", 3, [("a", "eu", 1)])
    restored = SnapshotLayout.at(str(tmp_path / "snap-b"))
    s = settings(tmp_path, snapshotPath=restored.root)
    # restored from checkpoint 2 of snap-a: the table holds snap-a's output up to 3
    behind = owner.lineage(restored.root, {"from": first.root, "checkpoint_id": 2})
    assert behind == owner.Lineage(first.root, 2)
    before = tree(tmp_path / "out")
    with pytest.raises(
        SinkError, match=r"already holds that query's output up to its checkpoint 3"
    ):
        committer.guard(restored.root, s, SCHEMA, behind)
    assert tree(tmp_path / "out") == before
    # restored from checkpoint 3 (its latest): the restored query owns the table from now on
    latest = owner.Lineage(first.root, 3)
    assert committer.guard(restored.root, s, SCHEMA, owner.Lineage(first.root, None))[1] is False
    stage_batch(restored, s, 0, 0, [("b", "eu", 1)])
    committer.commit(restored, 4, commit_plan.plan(restored, 0, 0), latest)
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("b", "eu", 1)]
    assert owner.owners(DeltaTable(str(tmp_path / "out"))) == {"out": restored.root}
    with pytest.raises(SinkError, match="belongs to sink 'out' of another query"):
        committer.guard(first.root, settings(tmp_path, snapshotPath=first.root), SCHEMA)


def test_a_savepoints_origin_is_the_lineage(tmp_path: Path) -> None:
    savepoint = SnapshotLayout.at(str(tmp_path / "sp"))
    Path(savepoint.savepoint_file).parent.mkdir(parents=True)
    Path(savepoint.savepoint_file).write_text('{"origin": "/data/snap-a", "checkpoint_id": 7}')
    found = owner.lineage("/data/snap-b", {"from": savepoint.root, "checkpoint_id": 7})
    assert found == owner.Lineage("/data/snap-a", 7)
    assert owner.lineage("/data/snap-b", {"from": "latest"}) is None
    assert owner.lineage("/data/snap-b", {"from": "/data/snap-b", "checkpoint_id": 2}) is None


def test_a_table_no_sink_wrote_is_refused_unless_adopted(tmp_path: Path) -> None:
    theirs = pa.table({"user_id": ["x"], "region": ["eu"], "n": [9]}, schema=SCHEMA)
    write_deltalake(str(tmp_path / "out"), theirs)
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    before = tree(tmp_path / "out")
    with pytest.raises(SinkError) as err:
        committer.guard(layout.root, s, SCHEMA)
    assert str(err.value) == (
        f"barriered-delta sink 'out' of snapshot path {layout.root!r}: the output table "
        f"{s.path!r} exists and no barriered-delta sink wrote it (no table property "
        "'barriered.sink.owner.out'); the sink owns its table. Nothing was written. Write "
        "to a new table (option path), or set .option('adoptTable', 'true') to let this "
        "query's sink take the table over"
    )
    assert tree(tmp_path / "out") == before
    adopted = settings(tmp_path, adoptTable="true")
    stage_batch(layout, adopted, 0, 0, [("a", "eu", 1)])
    committer.commit(layout, 1, commit_plan.plan(layout, 0, 0))
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("x", "eu", 9)]
    assert owner.owners(DeltaTable(str(tmp_path / "out"))) == {"out": layout.root}


def test_a_table_with_other_columns_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "out"), pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}))
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path, adoptTable="true")
    before = tree(tmp_path / "out")
    with pytest.raises(SinkError) as err:
        committer.guard(layout.root, s, SCHEMA)
    assert str(err.value) == (
        f"barriered-delta sink: the output table {s.path!r} does not have the query's "
        "output columns: a (only in the table); b (only in the table); user_id (only in "
        "the output); region (only in the output); n (only in the output). The sink never "
        "changes a table's schema. Nothing was written. Write to a new table (option "
        "path), or make the query's output match the table"
    )
    assert tree(tmp_path / "out") == before


def test_a_table_overwritten_with_another_schema_between_runs_is_refused(tmp_path: Path) -> None:
    layout, _ = commit_one(tmp_path, "snap", 1, [("a", "eu", 1)])
    changed = pa.table({"user_id": ["x"], "region": ["eu"], "n": ["nine"]})
    write_deltalake(str(tmp_path / "out"), changed, mode="overwrite", schema_mode="overwrite")
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 2, [("b", "eu", 1)])
    before = tree(tmp_path / "out")
    with pytest.raises(SinkError, match=r'n \(table: "string", output: "long"\)'):
        committer.commit(layout, 2, commit_plan.plan(layout, 0, 2))
    assert tree(tmp_path / "out") == before
    with pytest.raises(SinkError, match=r"partition columns \(table: \[\], option partitionBy"):
        committer.guard(layout.root, settings(tmp_path, partitionBy="region"), changed.schema)


def test_column_types_delta_cannot_store_are_refused_naming_the_column() -> None:
    output = StructType(
        [
            StructField("user_id", StringType()),
            StructField("wait", DayTimeIntervalType()),
            StructField("tags", ArrayType(StructType([StructField("x", NullType())]))),
            StructField("m", MapType(StringType(), IntegerType())),
            StructField("at", TimestampType()),
        ]
    )
    with pytest.raises(ConfigError) as err:
        schema.arrow_schema(output)
    assert str(err.value) == (
        "the barriered-delta sink cannot store the output column(s) ['wait: interval day "
        "to second', 'tags[].x: void']: Delta stores booleans, integers, floats, decimals, "
        "strings, binary, dates, timestamps and arrays, maps and structs of them. Cast or "
        "drop those columns (e.g. an interval as its seconds in a long) before writeStream"
    )
    fine = schema.arrow_schema(StructType([output.fields[0], *output.fields[3:]]))
    assert fine.field("at").type == pa.timestamp("us", tz="UTC")


def test_a_misspelt_sink_option_gets_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        settings(tmp_path, keycolumn="user_id", partitionby="region")
    assert str(err.value) == (
        "unknown barriered-delta sink option 'keycolumn' (did you mean 'keyColumns'?). "
        "Options: path, snapshotPath, mode, keyColumns, partitionBy, sinkId, adoptTable "
        "(Spark hands the sink the option names lower-cased, so they are quoted that way)"
    )


def test_the_batch_a_rerun_ran_again_from_sparks_offset_log_is_its_own(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 1, 0, [("a", "eu", 1)])  # no progress of batch 0 reaches the run
    stage_batch(layout, s, 1, 1, [("b", "eu", 1)])
    rerun = SinkParticipants(layout, 1, continues=True)
    rerun.ran(1)
    rerun.on_cut(1, 1)
    assert [p.batches for p in rerun.plans(1, 1)] == [((1, 0), (1, 1))]
    fresh = SinkParticipants(layout, 1, continues=False)  # a restored run ran batch 0 itself
    fresh.ran(1)
    with pytest.raises(SinkError, match=r"batch 0 staged under epoch 1 .*this run never ran"):
        fresh.plans(1, 1)
    assert staging.staged_ids(layout, "out", 1) == [0, 1]


def test_mode_update_merges_rows_of_every_delta_type(tmp_path: Path) -> None:
    typed = pa.schema(
        [
            ("k", pa.string()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("day", pa.date32()),
            ("price", pa.decimal128(12, 3)),
            ("raw", pa.binary()),
            ("tags", pa.map_(pa.string(), pa.int64())),
            ("nested", pa.struct([("xs", pa.list_(pa.int64()))])),
        ]
    )
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

    def row(i: int, key: str) -> dict[str, Any]:
        return {
            "k": key,
            "at": start + dt.timedelta(hours=i),
            "local": dt.datetime(2024, 1, 1, i),
            "day": dt.date(2024, 1, i + 1),
            "price": Decimal("1.5") * i,
            "raw": bytes([i]),
            "tags": [("a", i)],
            "nested": {"xs": [i, i]},
        }

    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path, mode="update", keyColumns="k")
    for batch, (i, key) in enumerate([(1, "a"), (2, "b"), (3, "a")]):
        files = write_files(s, pa.Table.from_pylist([row(i, key)], schema=typed))
        staging.stage(layout, StagedBatch(s, 0, batch, typed, tuple(files)))
    committer.commit(layout, 1, commit_plan.plan(layout, 0, 2))
    got = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    assert sorted(got, key=lambda r: r["k"]) == [row(3, "a"), row(2, "b")]
