"""Checkpoint monitoring during a real run on Spark (issue 40).

One availableNow query of running totals with ``metrics.prometheusPort`` and
``metrics.openTelemetry`` set: the driver's endpoint is scraped over HTTP while the query
runs, and after it ended its counts equal the ``_checkpoints`` rows; the OpenTelemetry
exporter received one span per row, with its phases and the row's ids.
"""

from __future__ import annotations

import socket
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.examples import RunningTotals
from barriered.monitoring import hub
from barriered.monitoring.offline import path_view
from barriered.monitoring.phases import phases
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.testing.session import barriered_keys
from monitoring_rows import get, samples, value

pytestmark = pytest.mark.spark

SOURCE = {
    "upstream": "rate",
    "channels": "3",
    "rowsPerSecond": "0",
    "rowsPerChannel": "60",
    "skew": "0:3",
    "keys": "20",
    "maxRowsPerChannel": "15",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _span_exporter() -> Any:
    """An in-memory exporter on the global tracer provider (an SDK provider is set here
    when there is none yet; the global one is set once per process)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_endpoint_counts_equal_checkpoints_during_a_run(spark: Any, tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")
    exporter = _span_exporter()
    port = _free_port()
    conf = {
        "checkpointInterval": "10ms",
        "maxParallelism": "8",
        "metrics.prometheusPort": str(port),
        "metrics.host": "127.0.0.1",
        "metrics.openTelemetry": "true",
    }
    url = f"http://127.0.0.1:{port}/"
    snap = str(tmp_path / "snap")
    path = {"snapshot_path": snap}
    hub.stop()
    barriered.install(spark)
    try:
        with barriered_keys(spark, conf):
            events = spark.readStream.format("barriered").options(**SOURCE)
            events = events.option("snapshotPath", snap).load()
            query = (
                barriered.keyed(events, "user_id")
                .process(RunningTotals())
                .writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True)
                .start()
            )
            during: list[float] = []  # completed counts scraped while the query ran
            while query.isActive:
                try:
                    found = samples(url)
                except (urllib.error.URLError, ConnectionError):
                    found = {}  # not served before the first finished checkpoint
                key = ("barriered_checkpoints_completed_total", tuple(path.items()))
                if query.isActive and key in found:
                    during.append(found[key])
                time.sleep(0.1)
            barriered.await_termination(query, timeout=120)
        assert during, "the endpoint never answered while the query ran"
        rows = checkpoints_table.read_rows(SnapshotLayout.at(snap))
        done = [r for r in rows if r["status"] == "completed"]
        found = samples(url)
        assert value(found, "barriered_checkpoints_completed_total", **path) == len(done)
        assert value(found, "barriered_checkpoints_total", **path) == len(rows)
        assert value(found, "barriered_last_checkpoint_id", **path) == done[-1]["checkpoint_id"]
        assert max(during) <= len(done)
        assert f"data-checkpoint-id='{done[-1]['checkpoint_id']}'" in get(url)
        # barriered ui's view of the path: the same rows, and the in-flight ranges per
        # channel of the latest completed checkpoint from the state table's commit
        view = path_view(SnapshotLayout.existing(snap))
        assert view.figures.total == len(rows)
        assert done[-1]["checkpoint_id"] in view.inflight
        spans = [
            s
            for s in exporter.get_finished_spans()
            if s.attributes.get("barriered.snapshot_path") == snap
        ]
        roots = [s for s in spans if s.parent is None]
        ids = sorted(int(s.attributes["barriered.checkpoint_id"]) for s in roots)
        assert ids == sorted(int(r["checkpoint_id"]) for r in rows)
        for root in roots:
            row = checkpoints_table.row_of(rows, int(root.attributes["barriered.checkpoint_id"]))
            assert row is not None
            assert root.start_time == row["trigger_timestamp_ms"] * 1_000_000
            assert root.attributes["barriered.state_bytes"] == row["state_bytes"]
            children = [
                s
                for s in exporter.get_finished_spans()
                if s.parent and s.parent.span_id == root.context.span_id
            ]
            ordered = sorted(children, key=lambda c: (c.start_time or 0, c.end_time or 0))
            assert [c.name for c in ordered] == [p.name for p in phases(row)]
    finally:
        hub.stop()
