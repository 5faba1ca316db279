"""A snapshot path and an output table on S3 (the local S3 server, ``tests/s3_server.py``),
end to end: ``barriered.keyed`` running totals of the ``rate`` upstream into the
``barriered-delta`` sink, an uninterrupted ``availableNow`` run, and a run whose driver is
SIGKILLed, restored (``restoreFrom=latest``) with 3 shuffle partitions instead of 2.

The storage settings reach every party through ``snapshotStorageOptions`` alone (the
session key): the exact state and the exact output are read back from the bucket with
delta-rs, every file of the run is an object in the bucket (only Spark's own checkpoint
location is local), and the secret key is in no object and no log.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from test_sink_recovery import crash_driver

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

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def everything() -> dict[int, int]:
    return dict(enumerate(upstream().available()))


def _on_s3(session: Any, s3_server: S3Server, name: str) -> tuple[str, str, dict[str, str]]:
    """The snapshot path and output table of one test in the session's bucket, and the
    session keys that give every party the bucket's settings."""
    conf = {"snapshotStorageOptions": json.dumps(s3_server.storage_options)}
    session.conf.set(PREFIX + "snapshotStorageOptions", conf["snapshotStorageOptions"])
    # this process reads the bucket before any query registered the settings here
    storage.register(s3_server.uri(name), s3_server.storage_options)
    return s3_server.uri(name, "snap"), s3_server.uri(name, "out"), conf


def _final_state(layout: SnapshotLayout, query: Any, after_id: int = 0) -> dict[str, int]:
    row = wait_final_checkpoint(layout, tuple(upstream().available()), query, after_id)
    return state_at(layout, int(commit_metadata(layout)[row["checkpoint_id"]]["version"]))


def _local_files(tmp_path: Path) -> list[str]:
    """The files of ``tmp_path`` outside Spark's checkpoint locations."""
    return sorted(
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.relative_to(tmp_path).parts[0].startswith("ck")
    )


@pytest.mark.full
def test_a_run_on_s3_writes_the_exact_state_and_output_to_the_bucket(
    session: Any, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    snap, out, _ = _on_s3(session, s3_server, "plain-run")
    processor, sink = sink_query("update", out)
    query = start(session, tmp_path, MODES["aligned"], SOURCE, snap, "ck", processor, sink)
    query.awaitTermination()
    layout = SnapshotLayout.configured(snap)
    assert _final_state(layout, query) == totals_before(everything())
    assert output_rows(out) == expected_output("update", everything())

    keys = s3_server.no_secret_anywhere("plain-run/", caplog.text)
    assert "plain-run/snap/_coordinator/config.json" in keys
    assert "plain-run/snap/_checkpoints/_delta_log/00000000000000000000.json" in keys
    assert any(k.startswith("plain-run/snap/state/operator=running_totals/") for k in keys)
    assert any(k.startswith("plain-run/out/_delta_log/") for k in keys)
    recorded = json.loads(s3_server.read("plain-run/snap/_coordinator/config.json"))
    options = json.loads(recorded["conf"]["snapshot_storage_options"])
    assert options["AWS_SECRET_ACCESS_KEY"] == storage.REDACTED
    assert options["AWS_ENDPOINT_URL"] == s3_server.endpoint
    assert _local_files(tmp_path) == []
    assert len(checkpoints_table.completed(layout)) >= 2


def test_a_driver_killed_on_s3_restores_with_other_partitions_to_the_exact_output(
    session: Any, s3_server: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    snap, out, conf = _on_s3(session, s3_server, "crash-run")
    mode, point = "unaligned", faults.AFTER_COMMIT
    fired = crash_driver(tmp_path, "update", mode, point, snap=snap, out=out, conf=conf)
    layout = SnapshotLayout.configured(snap)
    crashed_at = fired["checkpoint_id"]
    assert crashed_at in commit_metadata(layout)  # the state committed, the output staged
    staged = s3_server.keys("crash-run/snap/_sink/out/")
    assert staged, "the crashed run left its output staged, not committed"

    processor, sink = sink_query("update", out)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        source = {**SOURCE, "restoreFrom": "latest"}
        restored = start(
            session, tmp_path, MODES[mode], source, snap, "ck-restored", processor, sink
        )
        restored.awaitTermination()
        state = _final_state(layout, restored, after_id=crashed_at)
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")
    assert state == totals_before(everything())
    assert output_rows(out) == expected_output("update", everything())

    logs = caplog.text + (tmp_path / "driver.out").read_text()
    keys = s3_server.no_secret_anywhere("crash-run/", logs)
    assert any(k.startswith("crash-run/snap/_owners/_delta_log/") for k in keys)
    recorded = json.loads(s3_server.read("crash-run/snap/_coordinator/config.json"))
    options = json.loads(recorded["conf"]["snapshot_storage_options"])
    assert options["AWS_SECRET_ACCESS_KEY"] == storage.REDACTED
    assert options["AWS_ENDPOINT_URL"] == s3_server.endpoint
    # the restored run's load() gave the JVM the bucket's settings (fs.s3a.*)
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get("fs.s3a.endpoint") == s3_server.endpoint
    assert hadoop.get("fs.s3a.path.style.access") == "true"
    assert hadoop.get("fs.s3a.secret.key") == s3_server.secret_key
    assert _local_files(tmp_path) == ["driver.out"]
