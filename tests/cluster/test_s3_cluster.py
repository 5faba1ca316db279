"""Every path on S3, on the real standalone cluster: an executor lost in the middle of a
checkpoint, a driver SIGKILLed, each followed by a restore at another parallelism.

The snapshot path, Spark's checkpoint locations and the ``barriered-delta`` output table
are in the session's bucket on the local S3 server (``tests/s3_server.py``); the two
workers each run their executors in a working folder of their own, and nothing a query
writes goes to a local folder. The storage settings reach the executors' Python workers
through ``snapshotStorageOptions`` alone (with the keyed operator and the sink, never in
a file), and the JVMs (Spark's checkpoint files, RocksDB's uploads, the provider's tables
through ``s3a``) through the Hadoop configuration the source's ``load()`` sets from them.

A fault armed with the ``"block"`` action holds the task that wrote its key group's
snapshot object for checkpoint 2 (before it acknowledged); the test SIGKILLs the executor
running it. Spark re-runs the lost tasks elsewhere; the query must end without a restore,
the killed attempt's object must stay an orphan no Delta version reads, and state and
output must equal a batch recount. Then the query is restored from the checkpoint the
executor died in, with 3 shuffle partitions instead of 2, and runs to the end: the same
exact state and output (the sink takes back what the later checkpoints published and
publishes it again).

A driver process of its own (``cluster_driver.py``, an application with an executor on
each worker) runs ``barriered.keyed`` running totals of files in a folder of the bucket
(the ``files`` upstream), or a windowed ``groupBy().agg()``
under the barriered provider (append mode, windows evicted by the watermark), until a
checkpoint completed, and is SIGKILLed with its JVM; the query restored from the latest
checkpoint on 3 shuffle partitions in the tests' session ends with the batch
computation's state (the keyed snapshot, or Spark's state reader on the restored
checkpoint location on S3) and output.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import queries
from cluster_driver import PROVIDER, PROVIDER_QUERY, start_query
from deltalake import DeltaTable
from standalone import ROCKSDB, Cluster
from test_executor_loss import kill_at, referenced
from test_provider_eviction import PAST, _state_keys
from test_s3_recovery import FILES_SIZES, _put_files, _state_rows

from barriered.files import storage
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from runs import (
    MODES,
    PREFIX,
    SOURCE,
    commit_metadata,
    expected_output,
    kill_driver_when,
    output_rows,
    sink_query,
    start,
    state_at,
    totals_before,
    upstream,
    wait_final_checkpoint,
)
from s3_server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.s3]

#: Half the batches of ``runs.SOURCE`` (as ``test_executor_loss``'s state snapshot kill).
CLUSTER_SOURCE = {**SOURCE, "maxRowsPerChannel": "80"}
DRIVER = Path(__file__).resolve().parent / "cluster_driver.py"


def _everything() -> dict[int, int]:
    return dict(enumerate(upstream().available()))


@pytest.mark.full  # ~85 s; S3 in the default suite: test_s3_recovery's plain run
def test_an_executor_lost_mid_checkpoint_on_s3_then_a_restore_at_other_parallelism(
    cluster: tuple[Cluster, Any],
    cluster_session: Any,
    s3_server: S3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    nodes, _ = cluster
    spark = cluster_session
    options = json.dumps(s3_server.storage_options)
    spark.conf.set(PREFIX + "snapshotStorageOptions", options)
    storage.register(s3_server.uri("cluster"), s3_server.storage_options)
    snap, out = s3_server.uri("cluster", "snap"), s3_server.uri("cluster", "out")
    faults.inject(snap, faults.STATE_SNAPSHOT, checkpoint_id=2, action=faults.BLOCK)
    processor, sink = sink_query("update", out)
    try:
        ck = s3_server.uri("cluster", "ck")
        query = start(spark, tmp_path, MODES["aligned"], CLUSTER_SOURCE, snap, ck, processor, sink)
        record, jvm = kill_at(nodes, query, snap, faults.STATE_SNAPSHOT)
        query.awaitTermination(600)
        assert query.exception() is None  # Spark retried the lost tasks, no restore
        layout = SnapshotLayout.configured(snap)
        final = wait_final_checkpoint(layout, tuple(upstream().available()), query)
        killed_at = int(record["checkpoint_id"])
        assert killed_at in {r["checkpoint_id"] for r in checkpoints_table.completed(layout)}
        assert state_at(layout, final["state_table_version"]) == totals_before(_everything())
        assert output_rows(out) == expected_output("update", _everything())
        # The killed attempt's object is in the bucket, and no version of the table reads it.
        orphans = record["detail"]["files"]
        assert orphans, "the killed attempt had written its snapshot object"
        state_keys = set(s3_server.keys("cluster/snap/state/"))
        versions = referenced(layout.state_table)
        for orphan in orphans:
            assert f"cluster/snap/state/{orphan}" in state_keys
            assert all(orphan not in {f["path"] for f in fs} for fs in versions.values())

        # Restore the checkpoint the executor died in, on 3 shuffle partitions.
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        source = {**CLUSTER_SOURCE, "restoreFrom": str(killed_at)}
        ck2 = s3_server.uri("cluster", "ck2")
        restored = start(spark, tmp_path, MODES["aligned"], source, snap, ck2, processor, sink)
        restored.awaitTermination(600)
        assert restored.exception() is None
        last = wait_final_checkpoint(
            layout, tuple(upstream().available()), restored, after_id=final["checkpoint_id"]
        )
        version = int(commit_metadata(layout)[last["checkpoint_id"]]["version"])
        assert state_at(layout, version) == totals_before(_everything())
        assert output_rows(out) == expected_output("update", _everything())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.conf.unset(PREFIX + "snapshotStorageOptions")

    s3_server.no_secret_anywhere("cluster/", caplog.text)
    assert _local_files(tmp_path) == []
    print(f"\nkilled executor {jvm} at checkpoint {killed_at}; restored on 3 partitions")


def _local_files(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("kind", "mode"),
    [
        pytest.param("provider", "aligned", marks=pytest.mark.full),  # ~70 s
        pytest.param("provider", "unaligned", marks=pytest.mark.full),
        pytest.param("keyed", "unaligned", marks=pytest.mark.full),
        pytest.param("keyed", "aligned", marks=pytest.mark.full),
    ],
)
def test_a_driver_killed_on_the_cluster_then_restored_at_other_parallelism(
    cluster: tuple[Cluster, Any],
    cluster_session: Any,
    s3_server: S3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    mode: str,
) -> None:
    caplog.set_level(logging.INFO)
    nodes, _ = cluster
    spark = cluster_session
    name = f"driver-{kind}-{mode}"
    options = json.dumps(s3_server.storage_options)
    storage.register(s3_server.uri(name), s3_server.storage_options)
    snap, out = s3_server.uri(name, "snap"), s3_server.uri(name, "out")
    source: dict[str, str] = {}
    if kind == "keyed":  # its input: files in a folder of the bucket
        totals, counts = _put_files(s3_server, f"{name}/events", "first")
        source["path"] = s3_server.uri(name, "events") + "/"
        ends = tuple(FILES_SIZES.values())
    else:
        ends = tuple(queries.upstream().available())

    def killable() -> dict[str, Any] | None:
        if not s3_server.keys(f"{name}/snap/_checkpoints/_delta_log/"):
            return None
        for row in checkpoints_table.completed(SnapshotLayout.configured(snap)):
            at = tuple(json.loads(row["barrier_positions"]).values())
            # the provider's windows: some were emitted and evicted before the cut
            if row["state_rows"] and at != ends and (kind == "keyed" or at[0] >= PAST):
                return dict(row)
        return None

    log = tmp_path / "driver.out"
    args = [nodes.master_url, kind, mode, snap, s3_server.uri(name, "ck1"), out]
    env = {
        "BARRIERED_TEST_CONF": json.dumps({"snapshotStorageOptions": options}),
        "BARRIERED_TEST_SOURCE": json.dumps(source),
    }
    killed = kill_driver_when(DRIVER, args, log, killable, timeout_s=300, env=env)

    ck2 = s3_server.uri(name, "ck2")
    spark.conf.set(PREFIX + "snapshotStorageOptions", options)
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        restored = start_query(spark, kind, mode, snap, ck2, out, restoreFrom="latest", **source)
        restored.awaitTermination(600)
        assert restored.exception() is None
        layout = SnapshotLayout.configured(snap)
        last = wait_final_checkpoint(layout, ends, restored, after_id=killed["checkpoint_id"])
        if kind == "keyed":
            version = int(commit_metadata(layout)[last["checkpoint_id"]]["version"])
            assert _state_rows(layout, version) == {u: (totals[u], n) for u, n in counts.items()}
            assert output_rows(out) == sorted(totals.items())
        else:
            emitted, kept = queries.expected_eviction(PROVIDER_QUERY)
            assert _state_keys(spark, ck2, PROVIDER_QUERY) == kept
            table = DeltaTable(out, storage_options=s3_server.storage_options).to_pyarrow_table()
            rows = zip(*(table[c].to_pylist() for c in table.column_names), strict=True)
            assert sorted(rows) == emitted
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.conf.set(PROVIDER, ROCKSDB)

    s3_server.no_secret_anywhere(f"{name}/", caplog.text + log.read_text())
    assert _local_files(tmp_path) == ["driver.out"]
