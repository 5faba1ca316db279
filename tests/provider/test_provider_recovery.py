"""Spark's own stateful operators survive a driver SIGKILL and restore at another
parallelism, exactly, with the barriered state store provider.

A driver process runs the query on the provider and is killed (SIGKILL) once a
checkpoint holding state completed before the end of the input; the query is restored
from it (``restoreFrom=latest``) into a new checkpoint location with another
``spark.sql.shuffle.partitions`` and runs to the end. The state Spark's own reader then
shows equals the batch computation over every record. By default a grouped aggregation
runs (unaligned; the self-join's default case is aligned); every operator in both modes,
and a ``barriered.keyed`` operator mixed with an aggregation, are in the full matrix.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from queries import (
    CONF,
    MODES,
    PREFIX,
    QUERIES,
    SOURCE,
    aggregation,
    by_key,
    expected_rows,
    operator_id,
    state_rows,
    stream,
    stream_of,
    upstream,
)

import barriered
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.contents import inspect_checkpoint
from file_tree import tree
from runs import kill_driver_when, wait_final_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.provider]
HERE = Path(__file__).resolve().parent


def _kill_after_checkpoint(
    tmp: Path,
    name: str,
    mode: str,
    partitions: int,
    switched: bool = False,
    out: Path | None = None,
    past: int = 0,
) -> dict[str, Any]:
    """Run ``name`` in a driver process (into the ``barriered-delta`` sink at ``out`` if
    given) until a checkpoint with state completed before the end of the input (with its
    barrier on channel 0 at ``past`` or beyond; with ``switched``, one whose alignment
    timed out: effective mode unaligned, records in flight), SIGKILL the driver; return
    that checkpoint's row."""
    end = upstream().available()
    args = [str(tmp / "snap"), str(tmp / "ck1"), name, mode, str(partitions)]
    args += [] if out is None else [str(out)]

    def killable() -> dict[str, Any] | None:
        if not (tmp / "snap" / "_checkpoints").exists():
            return None
        for row in checkpoints_table.completed(SnapshotLayout.configured(str(tmp / "snap"))):
            at = list(json.loads(row["barrier_positions"]).values())
            timed_out = row["effective_mode"] == "unaligned" and row["inflight_rows"]
            if row["state_rows"] and at != end and at[0] >= past and (timed_out or not switched):
                return dict(row)
        return None

    return kill_driver_when(HERE / "provider_driver.py", args, tmp / "driver.out", killable)


def _restore(spark: Any, tmp: Path, name: str, mode: str, partitions: int) -> Any:
    """Restore ``name`` (latest) into ``ck2`` on ``partitions``, run it to the end (availableNow);
    return the finished query."""
    for key, value in {**CONF, **MODES[mode]}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", str(tmp / "snap"))
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        stream(name, events)
        .writeStream.format("noop")
        .outputMode(QUERIES[name][1])
        .option("checkpointLocation", str(tmp / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


#: The columns of each query's store key that Spark's shuffle partitions by.
PARTITION_KEYS = {
    "aggregation": ("user_id",),
    "window": ("window", "user_id"),
    "session": ("user_id",),  # not the session's start
    "dedup": ("user_id", "amount"),
    "pandas_state": ("user_id",),
    "mixed": ("user_id",),
}


def _recovered_exactly(
    spark: Any, tmp: Path, name: str, mode: str, before: int, after: int, switched: bool = False
) -> tuple[dict[str, Any], Any]:
    """Kill, restore and compare with the batch computation; return the killed run's
    checkpoint row and the restored query."""
    row = _kill_after_checkpoint(tmp, name, mode, before, switched)
    query = _restore(spark, tmp, name, mode, after)
    op = operator_id(spark, str(tmp / "ck2"), name)
    got = state_rows(spark, str(tmp / "ck2"), operator=op)
    assert by_key(got, name) == by_key(expected_rows(spark, name), name)
    reader = spark.read.format("statestore").option("operatorId", op)
    restored = reader.load(str(tmp / "ck2"))
    assert {r.partition_id for r in restored.collect()} == set(range(after))
    # Every row sits in the partition Spark's shuffle sends its key to.
    owner = F.pmod(F.hash(*(F.col("key." + c) for c in PARTITION_KEYS[name])), after)
    assert restored.where(owner != F.col("partition_id")).count() == 0
    return row, query


@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [  # make test under 20 min: the aggregation alone (~30 s; the mixed query ~50 s)
        ("aggregation", "unaligned", 4, 3),
    ],
)
def test_restored_at_other_parallelism_after_sigkill(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    _recovered_and_checked(provider_spark, tmp_path, name, mode, before, after)


def _recovered_and_checked(
    spark: Any, tmp: Path, name: str, mode: str, before: int, after: int, switched: bool = False
) -> dict[str, Any]:
    row, query = _recovered_exactly(spark, tmp, name, mode, before, after, switched)
    _table_equals_state_reader(spark, tmp, row, name)
    if name == "aggregation":
        _last_checkpoint_holds_the_final_state(spark, tmp, query)
    return row


def _last_checkpoint_holds_the_final_state(spark: Any, tmp: Path, query: Any) -> None:
    """The restored run's final checkpoint (its first one rewrote every partition: the
    killed run's files are replaced) holds the whole result: ``state_table`` and
    ``barriered inspect`` show it."""
    snap = str(tmp / "snap")
    layout = SnapshotLayout.configured(snap)
    wait_final_checkpoint(layout, tuple(upstream().available()), query)
    table = barriered.state_table(spark, snap, operator="0-default").collect()
    assert {(r.key.user_id,): tuple(r.value) for r in table} == dict(
        expected_rows(spark, "aggregation")
    )
    assert {r.store_partition for r in table} <= set(range(5))
    groups = [g for g in inspect_checkpoint(snap).key_groups if g.operator == "0-default (Spark)"]
    assert sum(g.rows for g in groups) == len(table) == 25


def _tuples(value: Any) -> Any:
    """A row as nested tuples, its timestamps as seconds since the epoch (Delta's are
    UTC-aware, Spark's reader gives naive local times)."""
    if isinstance(value, dict | tuple):
        return tuple(_tuples(v) for v in (value.values() if isinstance(value, dict) else value))
    return value.timestamp() if isinstance(value, datetime) else value


def _table_equals_state_reader(
    spark: Any, tmp: Path, row: dict[str, Any], name: str, ck: str = "ck1"
) -> int:
    """The checkpoint's store table at its recorded version holds exactly what Spark's
    state reader shows for the cut batch of the killed run (returned: how many rows).
    The checkpoint holds one store: in the mixed query, ``barriered.keyed``'s own store is
    left to its snapshot."""
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    history = DeltaTable(layout.state_table).history()
    meta = next(h for h in history if h.get("barriered.checkpoint_id") == row["checkpoint_id"])
    stores = operators.stores_of(meta)
    op = operator_id(spark, str(tmp / ck), name)
    store = f"{op}-default"
    assert list(stores) == [store]
    table = DeltaTable(layout.operator_table(store), version=stores[store]["version"])
    rows = table.to_pyarrow_table().to_pylist()
    exported = {(_tuples(r["key"]), _tuples(r["value"])) for r in rows}
    assert len(exported) == len(rows)
    reader = state_rows(spark, str(tmp / ck), int(row["cut_batch_id"]), op)
    assert exported == {(_tuples(k), _tuples(v)) for k, v in reader}
    assert {r["key_group"] for r in rows} <= set(range(int(CONF["maxParallelism"])))
    return len(rows)


@pytest.mark.full
@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [
        ("aggregation", "aligned", 2, 5),
        ("mixed", "unaligned", 4, 3),
        ("window", "aligned", 2, 5),
        ("dedup", "aligned", 2, 5),
        ("dedup", "unaligned", 4, 3),
        ("pandas_state", "aligned", 2, 5),
        ("pandas_state", "unaligned", 4, 3),
        ("window", "unaligned", 4, 3),
        ("mixed", "aligned", 2, 5),
        ("session", "aligned", 2, 5),
        ("session", "unaligned", 4, 3),
    ],
)
def test_restored_at_other_parallelism_full(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    _recovered_and_checked(provider_spark, tmp_path, name, mode, before, after)


@pytest.mark.full
def test_aligned_with_timeout_restores_from_a_switched_checkpoint(
    provider_spark: Any, tmp_path: Path
) -> None:
    """aligned_with_timeout: the driver is killed after a checkpoint whose alignment
    timed out (it completed unaligned, the lagging channel's records in flight); the
    aggregation restored from it at 3 partitions is exact, its store table equals Spark's
    state reader at the cut batch, and the restored run's last checkpoint holds the
    final state."""
    mode = "aligned_with_timeout"
    row = _recovered_and_checked(provider_spark, tmp_path, "aggregation", mode, 4, 3, True)
    assert (row["mode"], row["effective_mode"]) == (mode, "unaligned")
    assert row["inflight_rows"] > 0


def _start(
    spark: Any,
    tmp: Path,
    query: Any,
    ck: str,
    output_mode: str,
    restore_from: str | None = "latest",
    conf: dict[str, str] | None = None,
) -> Any:
    """Start ``query`` (a function of the source's DataFrame) on ``tmp/snap`` (restored
    from ``restore_from``) into checkpoint location ``tmp/ck``, aligned, availableNow."""
    for key, value in {**CONF, **MODES["aligned"], **(conf or {})}.items():
        spark.conf.set(PREFIX + key, value)
    events = spark.readStream.format("barriered").options(**SOURCE)
    events = events.option("snapshotPath", str(tmp / "snap"))
    if restore_from is not None:
        events = events.option("restoreFrom", restore_from)
    return (
        query(events.load())
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", str(tmp / ck))
        .trigger(availableNow=True)
        .start()
    )


#: What a refused restore writes on the snapshot path: its epoch (the ``_owners`` row,
#: taken before anything else so two runs never write at once), its lease, and the
#: resolved configuration the source writes once it owns the path, and its planning
#: decisions for instances that mirror it (``barriered.datasource.mirror``).
OWNERSHIP = ("_owners/", "_coordinator/leases/", "_coordinator/config.json", "_coordinator/mirror/")
#: Restore manifests: a refused run's stays until the next run on the path starts.
RESTORE = "_coordinator/restore/"


@pytest.mark.full  # make test under 20 min: 38 s
def test_a_changed_query_is_refused_naming_the_operator(
    provider_spark: Any, tmp_path: Path
) -> None:
    """Restoring a grouped count into a query grouped by another column (other key
    types), or into one with an operator the checkpoint lacks, fails on its first batch
    naming the store: nothing but the run's ownership and its restore manifest is written
    on the snapshot path (the manifest is removed by the next run). A query lacking the
    checkpoint's operator is refused at its first progress, before any checkpoint. The
    original query then restores exactly."""
    spark, snap = provider_spark, tmp_path / "snap"
    _kill_after_checkpoint(tmp_path, "aggregation", "aligned", 2)
    cases = [
        (
            lambda e: barriered.records(e).groupBy("amount").count(),
            [
                "cannot restore state store 0-default",
                "struct<user_id:string> at the checkpoint and is struct<amount:bigint> now",
            ],
        ),
        (  # the dropDuplicates store fails: new to the checkpoint, or another key there
            lambda e: aggregation(barriered.records(e).dropDuplicates(["user_id", "amount"])),
            ["cannot restore state store ", "(it holds [0-default])|,amount:bigint> now"],
        ),
    ]
    for n, (changed, expected) in enumerate(cases):
        before = tree(snap)
        query = _start(spark, tmp_path, changed, f"changed{n}", "update")
        with pytest.raises(Exception) as failed:
            query.awaitTermination(300)
        message = str(failed.value)
        assert all(any(p in message for p in e.split("|")) for e in expected), message
        assert not (tmp_path / f"changed{n}" / "commits" / "0").exists()
        after = tree(snap)
        written = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        manifests = sorted(p for p in after if p.startswith("_coordinator/restore/"))
        assert len(manifests) == 1  # its own; the previous refused run's is gone
        assert all(p.startswith((*OWNERSHIP, RESTORE)) for p in written), sorted(written)
        assert set(before) - set(after) <= {p for p in before if p.startswith(RESTORE)}
    stateless = _start(
        spark, tmp_path, lambda e: barriered.records(e).select("user_id"), "stateless", "append"
    )
    with pytest.raises(Exception) as failed:
        stateless.awaitTermination(300)
    assert "restored state without its operator: " in str(failed.value)
    assert "holds the state of store(s) 0-default" in str(failed.value)
    completed = checkpoints_table.completed(SnapshotLayout.configured(str(snap)))
    refused = {p for p in tree(snap) if p.startswith(RESTORE)}
    _restore(spark, tmp_path, "aggregation", "aligned", 3)
    assert refused and not refused & set(tree(snap))  # the next run removed them
    assert state_rows(spark, str(tmp_path / "ck2")) == expected_rows(spark, "aggregation")
    assert (
        completed
        == checkpoints_table.completed(SnapshotLayout.configured(str(snap)))[: len(completed)]
    )


def test_store_tables_keep_only_the_files_retained_checkpoints_read(
    provider_spark: Any, tmp_path: Path
) -> None:
    """With ``retainedCheckpoints=2`` and no grace period, after several checkpoints the
    aggregation's store table holds exactly the files its current version and the two
    retained checkpoints read, and each retained checkpoint's version still holds what
    Spark's state reader shows for its cut batch."""
    spark, snap = provider_spark, tmp_path / "snap"
    conf = {"retainedCheckpoints": "2", "retention.minAge": "0s"}
    query = _start(spark, tmp_path, stream_of("aggregation"), "ck1", "update", None, conf)
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    layout = SnapshotLayout.configured(str(snap))
    wait_final_checkpoint(layout, tuple(upstream().available()), query)
    table = Path(layout.operator_table("0-default"))
    deadline = time.time() + 30
    while True:
        completed = checkpoints_table.completed(layout)
        committed = committed_checkpoints(layout)
        retained = [r for r in completed if r["checkpoint_id"] in committed][-2:]
        versions = [DeltaTable(str(table)).version()]
        for row in retained:
            store = operators.stores_of(committed[row["checkpoint_id"]][1])["0-default"]
            versions.append(store["version"])
        needed = {
            str(Path(uri.removeprefix("file://")).resolve())
            for v in versions
            for uri in operators.files_at(layout, "0-default", v)
        }
        on_disk = {str(p.resolve()) for p in table.rglob("*.parquet")}
        if on_disk == needed or time.time() > deadline:
            break
        time.sleep(0.5)  # retention runs right after the last completion
    assert len(completed) >= 4  # (how many depends on the machine's speed)
    assert on_disk == needed
    for row in retained:
        _table_equals_state_reader(spark, tmp_path, row, "aggregation", "ck1")
