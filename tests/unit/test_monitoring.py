"""Checkpoint monitoring on the rows of real snapshot paths (no Spark).

The rows are written the way the driver writes them (``monitoring_rows.finish``); the
figures, the Prometheus endpoint scraped over HTTP, the OpenTelemetry spans and metrics
and ``barriered ui`` must agree with ``_checkpoints`` as read back from the table.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from barriered.config import BarrieredConf
from barriered.errors import MonitoringError
from barriered.monitoring import hub
from barriered.monitoring.figures import Tally, reason_label
from barriered.monitoring.offline import path_view
from barriered.monitoring.phases import phases
from barriered.monitoring.server import MonitoringServer
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from monitoring_rows import finish, get, samples, snapshot_path, value

EXPIRED = "expired after 600000 ms (spark.sql.streaming.barriered.checkpointTimeout=600000 ms)"


@pytest.fixture()
def snap(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path with checkpoints 1-3 completed, 4 expired, 5 declined, 6 completed."""
    layout = snapshot_path(tmp_path / "snap", checkpoint_interval_ms=2000)
    for cid in (1, 2, 3):
        finish(layout, cid)
    finish(layout, 4, EXPIRED)
    finish(layout, 5, "declined by key group 7: disk full")
    finish(layout, 6, state_bytes=123_456, alignment_duration_ms=321)
    return SnapshotLayout.existing(layout.root)


def test_figures_count_the_rows_of_checkpoints(snap: SnapshotLayout) -> None:
    rows = checkpoints_table.read_rows(snap)
    figures = Tally.of(snap.root, rows).figures()
    assert figures.completed == sum(r["status"] == "completed" for r in rows) == 4
    assert figures.failed == sum(r["status"] == "aborted" for r in rows) == 2
    assert dict(figures.failed_by_reason) == {"expired": 1, "declined": 1}
    assert figures.latest_completed is not None and figures.latest_completed["checkpoint_id"] == 6
    assert figures.latest_failed is not None
    assert figures.latest_failed["failure_reason"] == "declined by key group 7: disk full"
    assert [r["checkpoint_id"] for r in figures.history] == [1, 2, 3, 4, 5, 6]
    assert figures.duration_buckets[-1] == 4  # every duration is below 600 s


def test_reason_labels_are_a_bounded_set() -> None:
    assert reason_label(EXPIRED) == "expired"
    assert reason_label("commit failed: OSError: gone") == "commit_failed"
    assert reason_label("subsumed") == "subsumed"
    assert reason_label("aborted by the source: max_inflight") == "aborted_by_source"
    assert reason_label("something new") == reason_label(None) == "other"


def test_phases_follow_one_another_inside_the_checkpoint(snap: SnapshotLayout) -> None:
    for row in checkpoints_table.read_rows(snap):
        found = phases(row)
        assert found[0].start_ms == row["trigger_timestamp_ms"]
        assert found[-1].end_ms == row["end_timestamp_ms"]
        assert all(a.end_ms == b.start_ms for a, b in itertools.pairwise(found))
        names = [p.name for p in found]
        last = "acknowledge_commit" if row["status"] == "completed" else "abort"
        durations = ("start_delay_ms", "alignment_duration_ms", "state_write_ms")
        room = sum(row[c] for c in durations) < row["end_to_end_duration_ms"]
        assert names == ["start_delay", "alignment", "state_write", *([last] if room else [])]
        if room:  # else the phases are clipped to the checkpoint's end (checkpoint 6)
            assert found[1].duration_ms == row["alignment_duration_ms"]


def test_prometheus_endpoint_of_a_snapshot_path(snap: SnapshotLayout) -> None:
    server = MonitoringServer(lambda: [path_view(snap)])
    try:
        found = samples(server.url)
        rows = checkpoints_table.read_rows(snap)
        path = {"snapshot_path": snap.root}
        done = [r for r in rows if r["status"] == "completed"]
        assert value(found, "barriered_checkpoints_completed_total", **path) == len(done)
        assert value(found, "barriered_checkpoints_total", **path) == len(rows)
        expired = value(found, "barriered_checkpoints_failed_total", reason="expired", **path)
        assert expired == 1
        assert value(found, "barriered_last_checkpoint_id", **path) == 6
        assert value(found, "barriered_last_checkpoint_size_bytes", **path) == 123_456
        assert value(found, "barriered_last_checkpoint_alignment_seconds", **path) == 0.321
        assert value(found, "barriered_last_failed_checkpoint_id", **path) == 5
        count = value(found, "barriered_checkpoint_duration_seconds_count", **path)
        assert count == len(done)
        mode = {"kind": "checkpoint", "mode": "unaligned", "effective_mode": "unaligned"}
        assert value(found, "barriered_last_checkpoint_info", **path, **mode) == 1
        # a new row is scraped at once (the snapshot path is read per request)
        finish(snap, 7)
        found = samples(server.url)
        assert value(found, "barriered_checkpoints_completed_total", **path) == len(done) + 1
        page = json.loads(get(server.url + "checkpoints.json"))
        (view,) = page["snapshot_paths"]
        assert view["counts"]["total"] == len(rows) + 1
        assert view["history"][0]["checkpoint_id"] == 7
        assert view["configuration"]["spark.sql.streaming.barriered.checkpointInterval"] == "2s"
        page = get(server.url)
        assert "data-checkpoint-id='7'" in page
        # per channel, checkpoint 7's barrier positions (monitoring_rows.finish)
        row_7 = page.split("data-checkpoint-id='7'", 1)[1].split("</tr></table></details>")[0]
        assert "<td>0</td><td class='n'>70</td>" in row_7
        assert "<td>1</td><td class='n'>84</td>" in row_7
    finally:
        server.close()


def test_a_taken_port_is_a_typed_error(snap: SnapshotLayout) -> None:
    server = MonitoringServer(lambda: [path_view(snap)])
    try:
        with pytest.raises(MonitoringError, match="cannot listen"):
            MonitoringServer(lambda: [], server.port)
    finally:
        server.close()


def test_driver_hook_serves_what_it_recorded(tmp_path: Path) -> None:
    """The driver's hook: off without the keys; with a port, an endpoint whose counts are
    the table's, updated by every row recorded after."""
    layout = snapshot_path(tmp_path / "snap")
    off = BarrieredConf(snapshot_path=layout.root)
    on = BarrieredConf(snapshot_path=layout.root, metrics_prometheus_port=0)
    hub.stop()
    try:
        hub.recorded(off, layout, finish(layout, 1))
        assert hub.address() is None and hub.figures() == []
        hub.recorded(on, layout, finish(layout, 2))  # seeded with checkpoint 1's row too
        url = hub.address()
        assert url is not None
        path = {"snapshot_path": layout.root}
        assert value(samples(url), "barriered_checkpoints_completed_total", **path) == 2
        hub.recorded(on, layout, finish(layout, 3, "subsumed"))
        found = samples(url)
        rows = checkpoints_table.read_rows(layout)
        assert value(found, "barriered_checkpoints_total", **path) == len(rows) == 3
        assert value(found, "barriered_checkpoints_failed_total", reason="subsumed", **path) == 1
        assert "subsumed" in get(url)
    finally:
        hub.stop()


def test_otel_spans_carry_the_ids_and_phases_of_checkpoints(snap: SnapshotLayout) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from barriered.monitoring.otel import OtelReporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reporter = OtelReporter(tracer_provider=provider)
    rows = checkpoints_table.read_rows(snap)
    for row in rows:
        reporter.checkpoint(row)
    spans = exporter.get_finished_spans()
    parents = {s.context.span_id: s for s in spans if s.parent is None}
    assert sorted(s.attributes["barriered.checkpoint_id"] for s in parents.values()) == [
        r["checkpoint_id"] for r in rows
    ]
    for parent in parents.values():
        row = checkpoints_table.row_of(rows, int(parent.attributes["barriered.checkpoint_id"]))
        assert row is not None
        assert parent.start_time == row["trigger_timestamp_ms"] * 1_000_000
        assert parent.end_time == row["end_timestamp_ms"] * 1_000_000
        assert parent.attributes["barriered.state_bytes"] == row["state_bytes"]
        assert parent.attributes["barriered.mode"] == row["mode"]
        assert parent.attributes["barriered.snapshot_path"] == snap.root
        children = [s for s in spans if s.parent and s.parent.span_id == parent.context.span_id]
        assert {c.context.trace_id for c in children} == {parent.context.trace_id}
        names = [c.name for c in sorted(children, key=lambda c: c.start_time or 0)]
        assert names == [p.name for p in phases(row)]
        failed = row["status"] == "aborted"
        assert (parent.status.status_code == StatusCode.ERROR) == failed
        if failed:
            assert parent.status.description == row["failure_reason"]


def test_otel_metrics_are_the_figures(snap: SnapshotLayout) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from barriered.monitoring.otel import OtelReporter

    reader = InMemoryMetricReader()
    figures = Tally.of(snap.root, checkpoints_table.read_rows(snap)).figures()
    OtelReporter(meter_provider=MeterProvider(metric_readers=[reader]), figures=lambda: [figures])
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    (done,) = points["barriered.checkpoints.completed"]
    assert done.value == 4 and done.attributes["barriered.snapshot_path"] == snap.root
    failed = {
        p.attributes["barriered.reason"]: p.value for p in points["barriered.checkpoints.failed"]
    }
    assert failed["expired"] == failed["declined"] == 1 and failed["other"] == 0
    (size,) = points["barriered.checkpoint.last.size"]
    assert size.value == 123_456


def test_ui_command_serves_a_snapshot_path_until_stopped(snap: SnapshotLayout) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "barriered", "ui", snap.root, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"checkpoint page of {snap.root} at http://"), first
        url = first.split(" at ", 1)[1].split(" ", 1)[0]
        page = get(url)
        assert "declined by key group 7: disk full" in page
        assert value(samples(url), "barriered_checkpoints_total", snapshot_path=snap.root) == 6
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_ui_command_refuses_a_folder_that_is_no_snapshot_path(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "barriered", "ui", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "is not a snapshot path" in done.stderr


def test_docs_list_exactly_the_metrics_served(snap: SnapshotLayout) -> None:
    """docs/monitoring.md's Prometheus table names every metric family served, and no
    other."""
    from prometheus_client import generate_latest

    from barriered.monitoring.prometheus import registry_of

    figures = Tally.of(snap.root, checkpoints_table.read_rows(snap)).figures()
    served = {
        line.split()[2]
        for line in generate_latest(registry_of(lambda: [figures])).decode().splitlines()
        if line.startswith("# TYPE ")
    }
    doc = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    documented = set(re.findall(r"^\| `(barriered_[a-z_]+)", doc, re.MULTILINE))
    assert documented == served


def test_a_restore_is_measured_served_and_traced(snap: SnapshotLayout, tmp_path: Path) -> None:
    """A run restored from checkpoint 3 of another path: the driver's start hook records
    what it loaded and how long it took (owner record to now), on /metrics and the page,
    and the OpenTelemetry ``restore`` span carries the same."""
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from barriered.monitoring.otel import OtelReporter
    from barriered.statestore.ownership import Owner
    from barriered.wall_time import now_ms

    layout = snapshot_path(tmp_path / "restored")
    conf = BarrieredConf(snapshot_path=layout.root, metrics_prometheus_port=0)
    restored = {"from": snap.root, "checkpoint_id": 3}
    began = now_ms() - 1500
    owner = Owner(epoch=2, host="h", pid=1, started_ms=began, restore_from="3")
    origin = checkpoints_table.row_of(checkpoints_table.read_rows(snap), 3)
    assert origin is not None
    hub.stop()
    try:
        hub.started(conf, layout, restored, owner)
        url = hub.address()
        assert url is not None
        found = samples(url)
        path = {"snapshot_path": layout.root}
        assert value(found, "barriered_restored_checkpoint_id", **path) == 3
        took = value(found, "barriered_last_restore_duration_seconds", **path)
        assert 1.5 <= took < 60
        state = value(found, "barriered_last_restore_state_bytes", **path)
        assert state == origin["state_bytes"]
        assert f"from {snap.root}" in get(url)
        # a later run of the same query continues: its offsets still name the restore,
        # its owner record does not
        hub.started(conf, layout, restored, Owner(epoch=3, host="h", pid=1, started_ms=began))
        assert value(samples(url), "barriered_restored_checkpoint_id", **path) == 3
    finally:
        hub.stop()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    record = hub.restore_record(restored, began, began + 2000)
    OtelReporter(tracer_provider=provider).restore({**record, "snapshot_path": layout.root})
    (span,) = exporter.get_finished_spans()
    assert span.name == "restore"
    assert (span.start_time, span.end_time) == (began * 1_000_000, (began + 2000) * 1_000_000)
    assert span.attributes["barriered.checkpoint_id"] == 3
    assert span.attributes["barriered.restore.from"] == snap.root
    assert span.attributes["barriered.restore.state_bytes"] == origin["state_bytes"]
    assert span.attributes["barriered.restore.duration_ms"] == 2000
