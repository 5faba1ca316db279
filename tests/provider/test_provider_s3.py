"""Spark's own stateful operators under the JVM provider with every path of the run on S3
(the local S3 server, ``tests/s3_server.py``): the provider writes its operator tables
and acknowledgements through Hadoop's ``s3a`` (``tests/hadoop_aws.py``) with the
settings of ``snapshotStorageOptions`` (set into the session's Hadoop configuration by
the source's ``load()``), and reads them back when a restored query's stores load.

A windowed ``groupBy().agg()`` (count and total per user and window, append mode: a
window is emitted once the watermark passes it; ``barriered-delta`` takes append only)
runs in a driver process into the ``barriered-delta`` sink on the bucket, is SIGKILLed
once a checkpoint cut past the first emitted windows completed, and is restored
(``restoreFrom=latest``, availableNow) with other shuffle partitions: the output holds
every window once with the batch computation's values, Spark's state reader and the
restored run's last operator table on S3 hold exactly the windows the final watermark
kept, and the secret key is in no object, no local file and no log.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from queries import CONF, MODES, PREFIX, SOURCE, expected_eviction, stream, upstream
from test_provider_eviction import PAST, _state_keys

import barriered
from barriered.files import storage
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from hadoop_aws import missing
from runs import kill_driver_when, wait_final_checkpoint
from s3_server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.provider, pytest.mark.s3]
HERE = Path(__file__).resolve().parent
QUERY = "window_append"
STORE = "0-default"


def _kill_on_s3(
    s3_server: S3Server, tmp: Path, snap: str, out: str, mode: str, partitions: int
) -> dict[str, Any]:
    """Run the query in a driver process on ``snap`` into ``out`` until a checkpoint with
    state completed, cut past :data:`PAST` on channel 0 (windows were emitted and evicted
    before it) and before the end of the input, SIGKILL the driver; return that row."""
    end = upstream().available()
    log = tmp / "driver.out"
    prefix = snap.removeprefix(f"s3://{s3_server.bucket}/") + "/_checkpoints/_delta_log/"

    def killable() -> dict[str, Any] | None:
        if not s3_server.keys(prefix):
            return None
        for row in checkpoints_table.completed(SnapshotLayout.configured(snap)):
            at = list(json.loads(row["barrier_positions"]).values())
            if row["state_rows"] and at != end and at[0] >= PAST:
                return dict(row)
        return None

    args = [snap, str(tmp / "ck1"), QUERY, mode, str(partitions), out]
    keys = {"snapshotStorageOptions": json.dumps(s3_server.storage_options)}
    env = {"BARRIERED_TEST_CONF": json.dumps(keys)}
    return kill_driver_when(HERE / "provider_driver.py", args, log, killable, env=env)


def _restore(spark: Any, tmp: Path, snap: str, out: str, mode: str, partitions: int) -> Any:
    """The query restored (latest) from ``snap`` into ``ck2`` on ``partitions``, run to
    the end (availableNow: its last batch evicts with the final watermark)."""
    for key, value in {**CONF, **MODES[mode]}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", snap)
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        stream(QUERY, events)
        .writeStream.format("barriered-delta")
        .options(snapshotPath=snap, path=out)
        .outputMode("append")
        .option("checkpointLocation", str(tmp / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


def _restored_exactly_on_s3(
    spark: Any,
    s3_server: S3Server,
    tmp: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    before: int,
    after: int,
) -> None:
    assert missing() is None, missing()
    caplog.set_level(logging.INFO)
    name = f"provider-{mode}"
    snap, out = s3_server.uri(name, "snap"), s3_server.uri(name, "out")
    storage.register(snap, s3_server.storage_options)  # this process reads the bucket
    spark.conf.set(PREFIX + "snapshotStorageOptions", json.dumps(s3_server.storage_options))
    try:
        killed = _kill_on_s3(s3_server, tmp, snap, out, mode, before)
        layout = SnapshotLayout.configured(snap)
        tables = s3_server.keys(f"{name}/snap/operators/{STORE}/")
        assert any(k.endswith(".parquet") for k in tables), tables  # written by s3a
        assert any("/_delta_log/" in k for k in tables), tables
        query = _restore(spark, tmp, snap, out, mode, after)
        wait_final_checkpoint(layout, tuple(upstream().available()), query, killed["checkpoint_id"])
        final = barriered.state_table(spark, snap, operator=STORE).collect()
    finally:
        spark.conf.unset(PREFIX + "snapshotStorageOptions")
        spark.conf.set("spark.sql.shuffle.partitions", "2")

    emitted, kept = expected_eviction(QUERY)
    assert _state_keys(spark, str(tmp / "ck2"), QUERY) == kept
    reader = spark.read.format("statestore").load(str(tmp / "ck2"))
    assert {r.partition_id for r in reader.collect()} == set(range(after))
    table = DeltaTable(out, storage_options=storage.delta_options(out)).to_pyarrow_table()
    assert sorted(zip(*(table[c].to_pylist() for c in table.column_names), strict=True)) == emitted
    # the restored run's last checkpoint: its operator table on S3 holds the kept windows
    assert {(int(r.key.window.start.timestamp()), r.key.user_id) for r in final} == kept
    assert {r.store_partition for r in final} <= set(range(after))

    logs = caplog.text + (tmp / "driver.out").read_text()
    s3_server.no_secret_anywhere(f"{name}/", logs)
    local = [p for p in tmp.rglob("*") if p.is_file()]
    assert [str(p) for p in local if s3_server.secret_key.encode() in p.read_bytes()] == []
    assert s3_server.keys(f"{name}/snap/_acks/")  # the provider's acknowledgements


@pytest.mark.full  # 91 s; the default suite's S3 crash is the files upstream's
def test_an_aggregation_on_s3_restores_exactly_after_sigkill(
    provider_spark: Any, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _restored_exactly_on_s3(provider_spark, s3_server, tmp_path, caplog, "unaligned", 2, 3)


@pytest.mark.full
def test_an_aligned_aggregation_on_s3_restores_exactly_after_sigkill(
    provider_spark: Any, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _restored_exactly_on_s3(provider_spark, s3_server, tmp_path, caplog, "aligned", 3, 2)
