"""Every path on S3, on the real standalone cluster: an executor lost in the middle of a
checkpoint, then a restore at another parallelism.

The snapshot path and the ``barriered-delta`` output table are in the session's bucket on
the local S3 server (``tests/s3_server.py``); the two workers each run their executor in
a working folder of their own, and nothing the query writes goes to a local folder but
Spark's own checkpoint locations (see ``statestore/README.md``, "Object stores"). The
storage settings reach the executors' Python workers through ``snapshotStorageOptions``
alone (with the keyed operator and the sink, never in a file).

A fault armed with the ``"block"`` action holds the task that wrote its key group's
snapshot object for checkpoint 2 (before it acknowledged); the test SIGKILLs the executor
running it. Spark re-runs the lost tasks elsewhere; the query must end without a restore,
the killed attempt's object must stay an orphan no Delta version reads, and state and
output must equal a batch recount. Then the query is restored from the checkpoint the
executor died in, with 3 shuffle partitions instead of 2, and runs to the end: the same
exact state and output (the sink takes back what the later checkpoints published and
publishes it again).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from standalone import Cluster
from test_executor_loss import kill_at, referenced

from barriered.statestore import checkpoints_table, storage
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from runs import (
    MODES,
    PREFIX,
    SOURCE,
    commit_metadata,
    expected_output,
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


def _everything() -> dict[int, int]:
    return dict(enumerate(upstream().available()))


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
        query = start(
            spark, tmp_path, MODES["aligned"], CLUSTER_SOURCE, snap, "ck", processor, sink
        )
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
        restored = start(spark, tmp_path, MODES["aligned"], source, snap, "ck2", processor, sink)
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
    local = sorted(
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.relative_to(tmp_path).parts[0].startswith("ck")
    )
    assert local == [], "only Spark's checkpoint locations are local"
    print(f"\nkilled executor {jvm} at checkpoint {killed_at}; restored on 3 partitions")
