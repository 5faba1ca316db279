"""Executor loss on a real Spark standalone cluster: nothing lost, nothing counted twice.

A master and two workers run as separate JVMs; each worker runs one executor JVM. A
fault armed with the ``"block"`` action holds the task that reaches the point (after it
wrote its Parquet file, before it acknowledged) while the test SIGKILLs the executor
running it, with its Python workers. Spark re-runs the lost tasks (and the lost shuffle
output) on the surviving or a relaunched executor; the retried attempt writes its files
again under new names. The query must run to its end without a restore, every file a
Delta commit references must exist whole, the killed attempt's file must stay an orphan,
and the final snapshot must equal a batch recount of the input.

Run them alone with ``pytest -m cluster``; skip them with ``-m "not cluster"``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from standalone import Cluster, alive

from barriered.files.storage import delta_options
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import current_files, open_table
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from runs import MODES, SOURCE, commit_metadata, start, state_at, totals_before, upstream
from runs import wait_final_checkpoint as wait_final

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

#: Where an executor is killed in each mode: every mode writes state snapshots; only
#: unaligned checkpoints capture in-flight records (aligned ones have none). ``make test``
#: kills once, while a state snapshot is written, with every path on S3
#: (``test_s3_cluster.py``); ``make test-full`` at each point in every mode, locally.
KILLS = [
    pytest.param("aligned", faults.STATE_SNAPSHOT, marks=pytest.mark.full),
    pytest.param("unaligned", faults.STATE_SNAPSHOT, marks=pytest.mark.full),
    pytest.param("aligned_with_timeout", faults.STATE_SNAPSHOT, marks=pytest.mark.full),
    pytest.param("unaligned", faults.INFLIGHT_CAPTURE, marks=pytest.mark.full),
    pytest.param("aligned_with_timeout", faults.INFLIGHT_CAPTURE, marks=pytest.mark.full),
]
#: The source of each kill: ``runs.SOURCE`` admitted 80 rows per channel and batch (half
#: the batches, ~1-2 s each on the cluster) for state snapshots; in-flight capture needs
#: ``runs.SOURCE`` itself (at 80 rows, aligned_with_timeout aligns before its timeout).
SOURCES = {
    faults.STATE_SNAPSHOT: {**SOURCE, "maxRowsPerChannel": "80"},
    faults.INFLIGHT_CAPTURE: SOURCE,
}
TABLE_OF = {faults.STATE_SNAPSHOT: "state", faults.INFLIGHT_CAPTURE: "inflight"}


def referenced(table_uri: str) -> dict[int, list[dict[str, Any]]]:
    """The files of every version of a Delta table (on any store), by version (empty if
    there is no table)."""
    table = open_table(table_uri)
    if table is None:
        return {}
    return {
        v: current_files(DeltaTable(table_uri, version=v, storage_options=delta_options(table_uri)))
        for v in range(table.version() + 1)
    }


def assert_whole(table_uri: str, versions: dict[int, list[dict[str, Any]]]) -> None:
    """Every file of every version exists with its logged size and record count and
    reads as Parquet; no file is listed twice in a version."""
    for version, files in versions.items():
        paths = [f["path"] for f in files]
        assert len(paths) == len(set(paths)), f"a file twice in version {version}"
        for f in files:
            full = os.path.join(table_uri, f["path"])
            assert os.path.getsize(full) == f["size"], f"{full} differs from its log entry"
            assert pq.read_table(full).num_rows == f["rows"], f"{full} is partial"


def assert_one_value_per_key(layout: SnapshotLayout, versions: dict[int, Any]) -> None:
    """No version of the state table holds a key twice (``state_at`` asserts it)."""
    for version in versions:
        state_at(layout, version)


def of(file: dict[str, Any], point: str, participant: str, checkpoint_id: int) -> bool:
    """Whether a committed ``file`` is ``participant``'s part of ``checkpoint_id``."""
    name = participant.rsplit("/", 1)[-1]  # the keyed partition (p<n>), or the channel
    values = file["partition_values"]
    if point == faults.STATE_SNAPSHOT:  # p<partition>-c<checkpoint>-<uuid>.parquet
        return bool(file["path"].rsplit("/", 1)[1].startswith(f"{name}-c{checkpoint_id}-"))
    in_checkpoint = values["checkpoint_id"] == str(checkpoint_id)
    return in_checkpoint and file["path"].rsplit("/", 1)[1].startswith(f"ch{name}-")


def kill_at(cluster: Cluster, query: Any, snap: str, point: str) -> tuple[dict[str, Any], int]:
    """Wait for the task blocked at ``point``, kill its executor; return the fault's
    record and the killed JVM's pid."""
    deadline = time.monotonic() + 300
    while (record := faults.fired(snap, point)) is None:
        assert query.isActive, f"the query ended without reaching {point}"
        assert time.monotonic() < deadline, f"no task reached {point} in 300 s"
        time.sleep(0.1)
    before = cluster.executors()
    jvm = cluster.kill_executor(record["pid"])
    assert jvm in before and not alive(jvm) and not alive(record["pid"])
    return record, jvm


@pytest.mark.parametrize(("mode", "point"), KILLS)
def test_executor_killed_mid_write_loses_nothing(
    cluster: tuple[Cluster, Any], cluster_session: Any, tmp_path: Path, mode: str, point: str
) -> None:
    nodes, _ = cluster
    begin = time.monotonic()
    snap = str(tmp_path / "snap")
    faults.inject(snap, point, checkpoint_id=2, action=faults.BLOCK)
    query = start(cluster_session, tmp_path, MODES[mode], SOURCES[point], snap)
    record, jvm = kill_at(nodes, query, snap, point)
    killed_s = time.monotonic() - begin
    killed_at = record["checkpoint_id"]
    participant, orphans = record["detail"]["participant"], record["detail"]["files"]
    assert orphans, "the killed attempt had written its file"

    query.awaitTermination(600)
    assert not query.isActive and query.exception() is None  # Spark retried, no restore
    layout = SnapshotLayout.configured(snap)
    ended_s = time.monotonic() - begin
    final = wait_final(layout, tuple(upstream().available()), query)

    # The checkpoint of the killed attempt completed with the retried attempt's files.
    assert killed_at in {r["checkpoint_id"] for r in checkpoints_table.completed(layout)}
    table_uri = layout.state_table if TABLE_OF[point] == "state" else layout.inflight_table
    versions = referenced(table_uri)
    version = int(commit_metadata(layout)[killed_at]["version"])
    if point == faults.INFLIGHT_CAPTURE:
        version = max(versions)  # retention leaves every checkpoint's records (100 kept)
    retried = [f["path"] for f in versions[version] if of(f, point, participant, killed_at)]
    assert len(retried) == 1, f"{participant} of checkpoint {killed_at}: {retried}"
    # The killed attempt's file is still there (nothing deleted) and no version reads it.
    for orphan in orphans:
        assert os.path.exists(os.path.join(table_uri, orphan))
        assert all(orphan not in {f["path"] for f in fs} for fs in versions.values())
    assert retried[0] not in orphans
    assert point != faults.STATE_SNAPSHOT or f"-c{killed_at}-" in retried[0]

    for uri in (layout.state_table, layout.inflight_table):
        assert_whole(uri, referenced(uri))
    assert_one_value_per_key(layout, referenced(layout.state_table))
    everything = dict(enumerate(upstream().available()))
    assert state_at(layout, final["state_table_version"]) == totals_before(everything)
    print(
        f"\n{mode}/{point}: killed executor {jvm} at checkpoint {killed_at} "
        f"({participant}) at {killed_s:.1f} s; query ended at {ended_s:.1f} s after "
        f"{len(query.recentProgress)} batches; test {time.monotonic() - begin:.1f} s; "
        f"batch ms: {[p.durationMs.get('triggerExecution') for p in query.recentProgress]}"
    )


def test_an_executor_killed_while_a_partition_compacts_loses_nothing_and_restores_exactly(
    cluster: tuple[Cluster, Any], cluster_session: Any, tmp_path: Path
) -> None:
    """With ``keyed.maxRuns=1`` every cut after the first writes each partition's whole
    state and replaces its older files (a compaction). The executor writing one is
    killed: Spark retries, the query ends exactly, and a restore of that very checkpoint
    into 3 partitions ends exactly too."""
    nodes, _ = cluster
    snap = str(tmp_path / "snap")
    conf = {**MODES["aligned"], "keyed.maxRuns": "1"}
    faults.inject(snap, faults.STATE_COMPACTION, checkpoint_id=2, action=faults.BLOCK)
    source = SOURCES[faults.STATE_SNAPSHOT]
    query = start(cluster_session, tmp_path, conf, source, snap)
    record, jvm = kill_at(nodes, query, snap, faults.STATE_COMPACTION)
    killed_at, orphans = record["checkpoint_id"], record["detail"]["files"]
    query.awaitTermination(600)
    assert not query.isActive and query.exception() is None  # Spark retried, no restore
    layout = SnapshotLayout.configured(snap)
    final = wait_final(layout, tuple(upstream().available()), query)
    assert killed_at in {r["checkpoint_id"] for r in checkpoints_table.completed(layout)}
    versions = referenced(layout.state_table)
    for orphan in orphans:  # the killed attempt's whole-state file: never committed
        assert all(orphan not in {f["path"] for f in fs} for fs in versions.values())
    assert_whole(layout.state_table, versions)
    assert_one_value_per_key(layout, versions)
    everything = dict(enumerate(upstream().available()))
    assert state_at(layout, final["state_table_version"]) == totals_before(everything)
    # a compaction removed the files it replaced: the last version holds one file per
    # partition that wrote its whole state, and the files of the cuts after it
    last = versions[max(versions)]
    assert len(last) <= 2 * (1 + 1), [f["path"] for f in last]

    cluster_session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        restored = start(
            cluster_session, tmp_path, conf, {**source, "restoreFrom": str(killed_at)}, snap, "ck2"
        )
        restored.awaitTermination(600)
        assert restored.exception() is None
        after = wait_final(
            layout, tuple(upstream().available()), restored, after_id=final["checkpoint_id"]
        )
    finally:
        cluster_session.conf.set("spark.sql.shuffle.partitions", "2")
    assert state_at(layout, after["state_table_version"]) == totals_before(everything)
    assert_one_value_per_key(layout, referenced(layout.state_table))
    print(f"\nkilled executor {jvm} compacting checkpoint {killed_at}; restored on 3 partitions")
