"""Incremental store exports: after the state is built, a cut writes only the key groups
the store's writes changed since the base checkpoint, and every checkpoint's store table
still equals what Spark's own state reader shows for its cut batch.

A grouped count first sees every user (all key groups), then only two hot keys (at most
two key groups per store partition change), over dozens of micro-batches with a
checkpoint every 300 ms. Both ways of finding the changed key groups run
(``provider.changeDetection``: ``writes``, the default, and ``digest``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from queries import CONF, PREFIX, state_rows

import barriered
from barriered.datasource.upstreams.rate import RateUpstream
from barriered.statestore import checkpoints_table, operators, retention
from barriered.statestore.acks import Ack, read_acks
from barriered.statestore.layout import SnapshotLayout
from runs import wait_final_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.provider]

CHANNELS, ROWS, SEEDED = 2, 400, 40
SOURCE = {
    "upstream": "rate",
    "channels": str(CHANNELS),
    "rowsPerSecond": "0",
    "rowsPerChannel": str(ROWS),
    "keys": "25",
    "maxRowsPerChannel": "20",
}


def _table_at(layout: SnapshotLayout, checkpoint_id: int) -> set[tuple[Any, Any]]:
    """``(key, value)`` of the store table at the version checkpoint ``checkpoint_id``
    recorded in its ``state`` commit."""
    history = DeltaTable(layout.state_table).history()
    meta = next(h for h in history if h.get("barriered.checkpoint_id") == checkpoint_id)
    version = operators.stores_of(meta)["0-default"]["version"]
    rows = DeltaTable(layout.operator_table("0-default"), version=version).to_pyarrow_table()
    out = {(tuple(r["key"].values()), tuple(r["value"].values())) for r in rows.to_pylist()}
    assert len(out) == rows.num_rows
    return out


@pytest.mark.parametrize("detection", ["writes", pytest.param("digest", marks=pytest.mark.full)])
def test_later_cuts_write_only_changed_key_groups(
    provider_spark: Any, tmp_path: Path, detection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = provider_spark
    kept: dict[int, list[Ack]] = {}
    discard = retention.discard

    def keep_then_discard(layout: SnapshotLayout, checkpoint_id: int, delete_data: bool) -> None:
        acks = read_acks(layout, checkpoint_id).items()
        kept[checkpoint_id] = [a for p, a in acks if p.startswith("operator/")]
        discard(layout, checkpoint_id, delete_data)

    # The coordinator deletes a finished checkpoint's acknowledgements: keep the stores'.
    monkeypatch.setattr(retention, "discard", keep_then_discard)
    for key, value in CONF.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set(PREFIX + "provider.changeDetection", detection)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        _run_and_check(spark, tmp_path, kept)
    finally:
        spark.conf.unset(PREFIX + "provider.changeDetection")


def _run_and_check(spark: Any, tmp_path: Path, kept: dict[int, list[Ack]]) -> None:
    snap, ck = str(tmp_path / "snap"), str(tmp_path / "ck")
    events = barriered.records(
        spark.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap).load()
    )
    hot = F.concat(F.lit("hot-"), (F.col("_seq") % 2).cast("string"))
    keyed = events.withColumn("k", F.when(F.col("_seq") < SEEDED, F.col("user_id")).otherwise(hot))
    query = (
        keyed.groupBy("k")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    layout = SnapshotLayout.configured(snap)
    end = RateUpstream(CHANNELS, 0, ROWS, 25, {}, state_dir="/nonexistent").available()
    final = wait_final_checkpoint(layout, tuple(end), query)

    completed = checkpoints_table.completed(layout)
    incremental = []
    for row in completed:
        cid = int(row["checkpoint_id"])
        assert _table_at(layout, cid) == state_rows(spark, ck, int(row["cut_batch_id"])), cid
        acks = kept[cid]
        assert len(acks) == 2
        if all(not a.extra["full"] and len(a.extra["changed_groups"]) <= 2 for a in acks):
            incremental.append(cid)
    # After seeding, cuts write at most the hot keys' groups, and the final state is complete.
    assert len(incremental) >= 2, [dict(r) for r in completed]
    assert final["checkpoint_id"] in incremental
    assert len(_table_at(layout, int(final["checkpoint_id"]))) == 25 + 2
