"""Spark's own stateful operators survive a driver SIGKILL and restore at another
parallelism, exactly, with the barriered state store provider.

A driver process runs the query on the provider and is killed (SIGKILL) once a
checkpoint holding state completed before the end of the input; the query is restored
from it (``restoreFrom=latest``) into a new checkpoint location with another
``spark.sql.shuffle.partitions`` and runs to the end. The state Spark's own reader then
shows equals the batch computation over every record. One case per operator runs by
default; the other modes and operators are in the full matrix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from queries import (
    CONF,
    MODES,
    PREFIX,
    QUERIES,
    SOURCE,
    by_key,
    expected_rows,
    state_rows,
    upstream,
)

import barriered
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.contents import inspect_checkpoint
from runs import wait_final_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.provider]
HERE = Path(__file__).resolve().parent


def _kill_after_checkpoint(tmp: Path, name: str, mode: str, partitions: int) -> dict[str, Any]:
    """Run ``name`` in a driver process until a checkpoint with state completed before
    the end of the input, SIGKILL the driver; return that checkpoint's row."""
    end = upstream().available()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    args = [str(tmp / "snap"), str(tmp / "ck1"), name, mode, str(partitions)]
    driver = subprocess.Popen(
        [sys.executable, str(HERE / "provider_driver.py"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and driver.poll() is None:
            if (tmp / "snap" / "_checkpoints").exists():
                layout = SnapshotLayout.configured(str(tmp / "snap"))
                for row in checkpoints_table.completed(layout):
                    at = list(json.loads(row["barrier_positions"]).values())
                    if row["state_rows"] and at != end:
                        return dict(row)
            time.sleep(0.2)
        out = driver.stdout.read() if driver.poll() is not None and driver.stdout else ""
        raise AssertionError(f"no checkpoint with state before the end of the input: {out}")
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)


def _restore(spark: Any, tmp: Path, name: str, mode: str, partitions: int) -> None:
    for key, value in {**CONF, **MODES[mode]}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    build, output_mode = QUERIES[name]
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", str(tmp / "snap"))
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        build(barriered.records(events))
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", str(tmp / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def _recovered_exactly(
    spark: Any, tmp: Path, name: str, mode: str, before: int, after: int
) -> dict[str, Any]:
    row = _kill_after_checkpoint(tmp, name, mode, before)
    _restore(spark, tmp, name, mode, after)
    got = state_rows(spark, str(tmp / "ck2"))
    assert by_key(got, name) == by_key(expected_rows(spark, name), name)
    restored = spark.read.format("statestore").load(str(tmp / "ck2")).collect()
    assert {r.partition_id for r in restored} == set(range(after))
    return row


@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [("aggregation", "aligned", 2, 5), ("window", "unaligned", 4, 3)],
)
def test_restored_at_other_parallelism_after_sigkill(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    row = _recovered_exactly(provider_spark, tmp_path, name, mode, before, after)
    if name == "aggregation":
        _table_equals_state_reader(provider_spark, tmp_path, row)
        _last_checkpoint_holds_the_final_state(provider_spark, tmp_path)


def _last_checkpoint_holds_the_final_state(spark: Any, tmp: Path) -> None:
    """The restored run's final checkpoint (its first one rewrote every partition: the
    killed run's files are replaced) holds the whole result: ``state_table`` and
    ``barriered inspect`` show it."""
    snap = str(tmp / "snap")
    layout = SnapshotLayout.configured(snap)
    wait_final_checkpoint(layout, tuple(upstream().available()))
    table = barriered.state_table(spark, snap, operator="0-default").collect()
    assert {(r.key.user_id,): tuple(r.value) for r in table} == dict(
        expected_rows(spark, "aggregation")
    )
    assert {r.store_partition for r in table} <= set(range(5))
    groups = [g for g in inspect_checkpoint(snap).key_groups if g.operator == "0-default (Spark)"]
    assert sum(g.rows for g in groups) == len(table) == 25


def _table_equals_state_reader(spark: Any, tmp: Path, row: dict[str, Any]) -> None:
    """The checkpoint's store table at its recorded version holds exactly what Spark's
    state reader shows for the cut batch of the killed run."""
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    history = DeltaTable(layout.state_table).history()
    meta = next(h for h in history if h.get("barriered.checkpoint_id") == row["checkpoint_id"])
    stores = operators.stores_of(meta)
    assert list(stores) == ["0-default"]
    table = DeltaTable(layout.operator_table("0-default"), version=stores["0-default"]["version"])
    rows = table.to_pyarrow_table().to_pylist()
    exported = {(tuple(r["key"].values()), tuple(r["value"].values())) for r in rows}
    assert len(exported) == len(rows)
    reader = state_rows(spark, str(tmp / "ck1"), int(row["cut_batch_id"]))
    assert exported == reader
    assert {r["key_group"] for r in rows} <= set(range(int(CONF["maxParallelism"])))


@pytest.mark.full
@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [
        ("aggregation", "unaligned", 4, 3),
        ("window", "aligned", 2, 5),
        ("dedup", "aligned", 2, 5),
        ("dedup", "unaligned", 4, 3),
    ],
)
def test_restored_at_other_parallelism_full(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    _recovered_exactly(provider_spark, tmp_path, name, mode, before, after)


def test_a_changed_query_is_refused_naming_the_operator(
    provider_spark: Any, tmp_path: Path
) -> None:
    """Restoring a grouped count into a query grouped by another column (other key types)
    fails naming the store and both types; the restored store never starts from a wrong state."""
    _kill_after_checkpoint(tmp_path, "aggregation", "aligned", 2)
    for key, value in {**CONF, **MODES["aligned"]}.items():
        provider_spark.conf.set(PREFIX + key, value)
    events = (
        provider_spark.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", str(tmp_path / "snap"))
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        barriered.records(events)
        .groupBy("amount")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as failed:
        query.awaitTermination(300)
    message = str(failed.value)
    assert "cannot restore state store 0-default" in message
    assert "struct<user_id:string> at the checkpoint and is struct<amount:bigint> now" in message
    assert not (tmp_path / "ck2" / "commits" / "0").exists()
