"""A snapshot path and an output table on S3 (the local S3 server, ``tests/s3_server.py``),
end to end: ``barriered.keyed`` running totals of the ``rate`` upstream into the
``barriered-delta`` sink, an uninterrupted ``availableNow`` run, and a run whose driver is
SIGKILLed, restored (``restoreFrom=latest``) with 3 shuffle partitions instead of 2; the
same crash with the ``files`` upstream reading a folder of the bucket, whose manifest is in
the bucket too, and new files put into that folder before the restore.

The storage settings reach every party through ``snapshotStorageOptions`` alone (the
session key): the exact state and the exact output are read back from the bucket with
delta-rs, every file of the run is an object in the bucket (only Spark's own checkpoint
location is local), and the secret key is in no object and no log.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from test_sink_recovery import crash_driver

from barriered.files import storage
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import scan
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from barriered.testing import faults
from runs import (
    FILES_SOURCE,
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
    write_files,
)
from s3_outage import S3Outage
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


@pytest.mark.full  # the default suite's S3 case is the plain run (above)
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


#: Records per channel folder of each batch of files (3 files each, see write_files).
FILES_SIZES = {"a": 150, "b": 60, "c": 60}


def _put_files(s3_server: S3Server, prefix: str, tag: str) -> tuple[Counter[str], Counter[str]]:
    """Put one batch of JSON-lines files (``write_files``) under ``prefix`` of the bucket;
    return the total amount and the number of records per user."""
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        totals = write_files(Path(folder), FILES_SIZES, tag=tag)
        for path in sorted(Path(folder).rglob("*.json")):
            counts.update(json.loads(line)["user_id"] for line in path.open())
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            s3_server.client().upload_file(str(path), s3_server.bucket, key)
    return totals, counts


def _state_rows(layout: SnapshotLayout, version: int) -> dict[str, tuple[int, int]]:
    """``RunningTotals``' (total, count) per user in the state table at ``version``."""
    options = dict(layout.storage_options)
    table = DeltaTable(layout.state_table, version=version, storage_options=options)
    rows = scan(table).to_pylist()
    return {r["user_id"]: (r["total"], r["count"]) for r in rows}


@pytest.mark.full  # ~55 s; S3 in the default suite: the run above
@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_a_files_upstream_on_s3_restores_exactly_and_reads_each_new_file_once(
    session: Any,
    s3_server: S3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    caplog.set_level(logging.INFO)
    name = f"files-{mode}"
    snap, out, conf = _on_s3(session, s3_server, name)
    first = _put_files(s3_server, f"{name}/events", "first")
    source = {**FILES_SOURCE, "path": s3_server.uri(name, "events") + "/"}
    fired = crash_driver(
        tmp_path, "update", mode, faults.AFTER_COMMIT, snap=snap, out=out, conf=conf, source=source
    )
    layout = SnapshotLayout.configured(snap)
    crashed_at = fired["checkpoint_id"]
    assert crashed_at in commit_metadata(layout)
    manifest_key = f"{name}/snap/_source/files_manifest.jsonl"
    crashed = [json.loads(line) for line in s3_server.read(manifest_key).splitlines()]
    assert crashed[0]["path"] == s3_server.uri(name, "events")
    assert [r["path"] for r in crashed[1:]] == [
        f"{folder}/first-{part}.json" for folder in FILES_SIZES for part in range(3)
    ]

    second = _put_files(s3_server, f"{name}/events", "second")  # arrive while it is down
    processor, sink = sink_query("update", out)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        source = {**source, "restoreFrom": "latest"}
        restored = start(
            session, tmp_path, MODES[mode], source, snap, "ck-restored", processor, sink
        )
        restored.awaitTermination()
        final = tuple(2 * rows for rows in FILES_SIZES.values())
        row = wait_final_checkpoint(layout, final, restored, after_id=crashed_at)
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")

    totals, counts = first[0] + second[0], first[1] + second[1]
    version = int(commit_metadata(layout)[row["checkpoint_id"]]["version"])
    assert _state_rows(layout, version) == {u: (totals[u], n) for u, n in counts.items()}
    assert output_rows(out) == sorted(totals.items())
    # every file once in the manifest: each channel's first files, then its second ones
    lines = [json.loads(line) for line in s3_server.read(manifest_key).splitlines()]
    assert lines[1:10] == crashed[1:]
    placed = [(r["channel"], r["path"], r["start"], r["rows"]) for r in lines[1:]]
    assert placed[9:] == [
        (channel, f"{folder}/second-{part}.json", size + part * (size // 3), size // 3)
        for channel, (folder, size) in enumerate(FILES_SIZES.items())
        for part in range(3)
    ]
    logs = caplog.text + (tmp_path / "driver.out").read_text()
    keys = s3_server.no_secret_anywhere(f"{name}/", logs)
    assert any(k.startswith(f"{name}/snap/_owners/_delta_log/") for k in keys)
    recorded = json.loads(s3_server.read(f"{name}/snap/_coordinator/config.json"))
    options = json.loads(recorded["conf"]["snapshot_storage_options"])
    assert options["AWS_SECRET_ACCESS_KEY"] == storage.REDACTED
    assert options["AWS_ENDPOINT_URL"] == s3_server.endpoint
    # the restored run's load() gave the JVM the bucket's settings (fs.s3a.*)
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get("fs.s3a.endpoint") == s3_server.endpoint
    assert hadoop.get("fs.s3a.secret.key") == s3_server.secret_key
    assert _local_files(tmp_path) == ["driver.out"]


@pytest.fixture
def outage(s3_server: S3Server) -> Iterator[S3Outage]:
    """The relay that gives the S3 server an outage on demand; the bucket's settings of
    this process point at the server itself again afterwards."""
    relay = S3Outage(s3_server.port).start()
    try:
        yield relay
    finally:
        relay.stop()
        storage.register(s3_server.uri(), s3_server.storage_options)


class _Ended:
    """A finished run whose last checkpoint is not known: any completed one at the end
    positions is its final one (``wait_final_checkpoint`` reads ``lastProgress``)."""

    lastProgress = None


@pytest.mark.full
def test_an_s3_outage_in_the_middle_of_a_checkpoint_only_delays_or_fails_that_checkpoint(
    session: Any, s3_server: S3Server, outage: S3Outage, tmp_path: Path
) -> None:
    name = "outage"
    options = {**s3_server.storage_options, "AWS_ENDPOINT_URL": outage.endpoint}
    session.conf.set(PREFIX + "snapshotStorageOptions", json.dumps(options))
    storage.register(s3_server.uri(name), options)
    snap, out = s3_server.uri(name, "snap"), s3_server.uri(name, "out")
    faults.inject(snap, faults.STATE_SNAPSHOT, checkpoint_id=2, action=faults.BLOCK)
    processor, sink = sink_query("update", out)
    query = start(session, tmp_path, MODES["aligned"], SOURCE, snap, "ck", processor, sink)
    faults.wait_fired(snap, faults.STATE_SNAPSHOT)  # an executor is writing checkpoint 2
    faults.release(snap, faults.STATE_SNAPSHOT)
    with outage.down():
        time.sleep(4)
    query.awaitTermination()
    assert query.exception() is None
    assert outage.refused() > 0, "the outage answered no request"

    layout = SnapshotLayout.configured(snap)
    final = _final_state(layout, _Ended())
    rows = {row["checkpoint_id"]: row for row in checkpoints_table.read_rows(layout)}
    logging.getLogger(__name__).warning(
        "checkpoints after the outage: %s",
        [
            (cid, row["status"], row["end_to_end_duration_ms"], row["failure_reason"])
            for cid, row in rows.items()
        ],
    )
    assert rows[2]["status"] in ("completed", "aborted")  # retried, or failed: not lost
    versions = commit_metadata(layout)
    for cid, row in rows.items():
        if row["status"] != "completed":
            assert cid not in versions  # a failed checkpoint committed nothing
            continue
        resolve(layout, str(cid)).check_files()  # every file its restore reads is there
        barrier = {int(c): b for c, b in json.loads(row["barrier_positions"]).items()}
        assert state_at(layout, int(versions[cid]["version"])) == totals_before(barrier)
    assert final == totals_before(everything())

    processor, sink = sink_query("update", out)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        source = {**SOURCE, "restoreFrom": "latest"}
        restored = start(
            session, tmp_path, MODES["aligned"], source, snap, "ck-restored", processor, sink
        )
        restored.awaitTermination()
        assert restored.exception() is None
        state = _final_state(layout, _Ended())
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")
    assert state == totals_before(everything())
    assert output_rows(out) == expected_output("update", everything())
