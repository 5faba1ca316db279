"""A savepoint's maxParallelism changed offline (``barriered savepoint rescale``) and
restored on real Spark, under the JVM provider.

The query numbers each user's records with ``barriered.keyed`` (its state: the count so
far) and aggregates the numbers with Spark's own ``groupBy().agg()`` (count and highest
number per user, the provider's store). A first run reads half of the input with
``maxParallelism`` 128 and a savepoint is copied from its last checkpoint; the savepoint
is rewritten for 64 and for 512 key groups (both in the full suite; the rewrite itself is
checked without Spark in ``tests/unit/test_savepoint_rescale.py``); the query is restored
from the result with that ``maxParallelism`` and another number of shuffle partitions
(more than the old 128 for 512) and reads the rest. Both operators' state must then equal a
recount of every record: every user's count, and the aggregation's ``(n, last)`` equal to
it, which holds only if the keyed state came back exactly (a lost or doubled key restarts
or repeats the numbering). The source savepoint is unchanged byte for byte.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from queries import mixed, operator_id, state_rows

import barriered
from barriered.state_processor import rescale
from barriered.statestore.key_groups import spark_hash
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.savepoints import export
from file_tree import digests
from runs import FILES_SOURCE, PREFIX, wait_final_checkpoint, write_records

pytestmark = [pytest.mark.spark, pytest.mark.provider]

OLD = 128
SOURCE = {**FILES_SOURCE, "maxRowsPerChannel": "60"}
CONF = {"checkpointInterval": "200ms", "unaligned.enabled": "false", "leaseTimeout": "3s"}


def _run(
    spark: Any, tmp: Path, name: str, partitions: int, max_parallelism: int, **options: str
) -> tuple[Any, SnapshotLayout]:
    """Run the query on ``tmp/<name>`` (snapshot path and checkpoint location) to the end
    of the input (availableNow); return it and its snapshot path once its last checkpoint
    completed."""
    for key, value in {**CONF, "maxParallelism": str(max_parallelism)}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    snap = tmp / f"snap-{name}"
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE, path=str(tmp / "data"), **options)
        .option("snapshotPath", str(snap))
        .load()
    )
    query = (
        mixed(events)
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(tmp / f"ck-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(600)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert query.exception() is None, query.exception()
    layout = SnapshotLayout.configured(str(snap))
    return query, layout


def _restored_exactly(
    spark: Any, tmp: Path, savepoint: str, new: int, partitions: int, counts: Counter[str]
) -> None:
    """Rescale ``savepoint`` to ``new`` key groups, restore it at ``partitions`` and read
    the rest of the input: both operators' state equals the recount ``counts``."""
    before = digests(savepoint)
    rescaled = rescale(savepoint, str(tmp / f"sp-{new}"), new)
    assert digests(savepoint) == before
    name = f"{new}"
    query, layout = _run(spark, tmp, name, partitions, new, restoreFrom=rescaled.path)
    ends = {"0": 2 * 300, "1": 2 * 300}
    wait_final_checkpoint(layout, tuple(ends.values()), query)
    keyed = barriered.state_table(spark, layout.root, operator="record_numbers").collect()
    assert {r.user_id: r["count"] for r in keyed} == dict(counts)
    assert {r.key_group for r in keyed} == {spark_hash([u], ["string"]) % new for u in counts}
    ck = str(tmp / f"ck-{name}")
    op = operator_id(spark, ck, "mixed")
    assert state_rows(spark, ck, operator=op) == {((u,), (n, n)) for u, n in counts.items()}
    restored = spark.read.format("statestore").option("operatorId", op).load(ck)
    assert {r.partition_id for r in restored.collect()} <= set(range(partitions))


def _first_half(spark: Any, tmp: Path) -> tuple[str, Counter[str]]:
    """Run over the first half of the input at 128 key groups and 2 partitions; return
    a savepoint of its last checkpoint and the records per user of the whole input."""
    counts = write_records(tmp / "data", "first", 300, 97)
    query, layout = _run(spark, tmp, "first", 2, OLD)
    wait_final_checkpoint(layout, (300, 300), query)
    saved = export(layout, None, str(tmp / "sp"))
    return saved.path, counts + write_records(tmp / "data", "second", 300, 97)


@pytest.mark.full  # the default suite's one new Spark test is test_managed_rescale's
def test_a_savepoint_rescaled_to_64_key_groups_restores_exactly(
    provider_spark: Any, tmp_path: Path
) -> None:
    savepoint, counts = _first_half(provider_spark, tmp_path)
    _restored_exactly(provider_spark, tmp_path, savepoint, 64, 3, counts)


@pytest.mark.full
def test_a_savepoint_rescaled_to_512_key_groups_restores_above_the_old_maximum(
    provider_spark: Any, tmp_path: Path
) -> None:
    savepoint, counts = _first_half(provider_spark, tmp_path)
    _restored_exactly(provider_spark, tmp_path, savepoint, 512, 136, counts)
