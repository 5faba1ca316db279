"""The driver's monitoring: what the coordinator's one hook feeds.

The driver calls :func:`started` when a run's coordinator starts (the endpoint is served
from then on, and a restore is recorded: its duration, the page, a ``restore`` span) and
:func:`recorded` after it appended a finished checkpoint's row to ``_checkpoints``. When
the query's configuration turns monitoring on (``metrics.prometheusPort``,
``metrics.openTelemetry``), the row is counted in the
snapshot path's :class:`~barriered.monitoring.figures.Tally` (seeded, at the path's first
row in this process, with the rows already in the table), the endpoint is started once
per process (Prometheus metrics at ``/metrics``, the live page at ``/``) and the row is
reported as an OpenTelemetry span. Otherwise it returns at once. It never raises:
monitoring must not fail a checkpoint; problems are logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from barriered import wall_time
from barriered.config import METRICS_OPEN_TELEMETRY, METRICS_PROMETHEUS_PORT, BarrieredConf
from barriered.errors import BarrieredError, MonitoringError
from barriered.monitoring.figures import Figures, Tally
from barriered.monitoring.offline import configuration, restored_from
from barriered.monitoring.page import PathView
from barriered.statestore import checkpoints_table, ownership
from barriered.statestore.layout import SnapshotLayout

__all__ = ["address", "figures", "recorded", "restore_record", "started", "stop"]

log = logging.getLogger(__name__)


class _Hub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tallies: dict[str, Tally] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.server: Any = None
        self.otel: Any = None
        self.refused: set[str] = set()  # what was logged once already

    def views(self) -> list[PathView]:
        with self.lock:
            items = list(self.tallies.items())
        return [PathView(t.figures(), self.configs.get(root, {})) for root, t in items]

    def figures(self) -> list[Figures]:
        with self.lock:
            tallies = list(self.tallies.values())
        return [t.figures() for t in tallies]

    def tally(self, layout: SnapshotLayout) -> tuple[Tally, bool]:
        """The path's tally, and whether it was made now (from the rows in the table)."""
        with self.lock:
            tally = self.tallies.get(layout.root)
        if tally is not None:
            return tally, False
        tally = Tally.of(layout.root, checkpoints_table.read_rows(layout), restored_from(layout))
        config = configuration(layout)
        with self.lock:
            self.tallies[layout.root] = tally
            self.configs[layout.root] = config
        return tally, True

    def record(self, conf: BarrieredConf, layout: SnapshotLayout, row: Mapping[str, Any]) -> None:
        tally, fresh = self.tally(layout)
        if not fresh:  # else the table's rows counted it already
            tally.add(row)
        self._serve(conf)
        if conf.metrics_open_telemetry:
            reporter = self._reporter()
            if reporter is not None:
                reporter.checkpoint({**row, "snapshot_path": layout.root})

    def start(
        self,
        conf: BarrieredConf,
        layout: SnapshotLayout,
        restored: Mapping[str, Any] | None,
        started_ms: int | None,
    ) -> None:
        tally, _ = self.tally(layout)
        self._serve(conf)
        if not restored or started_ms is None:
            return
        restore = restore_record(restored, started_ms, wall_time.now_ms())
        tally.restored_from(restore)
        log.info(
            "%s restored from checkpoint %s of %s in %d ms",
            layout.root,
            restore.get("checkpoint_id"),
            restore.get("from"),
            restore["duration_ms"],
        )
        if conf.metrics_open_telemetry:
            reporter = self._reporter()
            if reporter is not None:
                reporter.restore({**restore, "snapshot_path": layout.root})

    def _serve(self, conf: BarrieredConf) -> None:
        port, host = conf.metrics_prometheus_port, conf.metrics_host
        if port is None:
            return
        with self.lock:
            if self.server is not None:
                if port not in (0, self.server.port) and "port" not in self.refused:
                    self.refused.add("port")
                    log.warning(
                        "monitoring endpoint already at %s; %s=%d is not used",
                        self.server.url,
                        METRICS_PROMETHEUS_PORT.key,
                        port,
                    )
                return
            if "serve" in self.refused:
                return
            from barriered.monitoring.server import MonitoringServer

            try:
                self.server = MonitoringServer(self.views, port, host, title="barriered")
            except MonitoringError as exc:
                self.refused.add("serve")
                log.warning("%s", exc)
                return
            log.info(
                "barriered monitoring: checkpoint page at %s, Prometheus metrics at %smetrics",
                self.server.url,
                self.server.url,
            )

    def _reporter(self) -> Any:
        with self.lock:
            if self.otel is None and "otel" not in self.refused:
                from barriered.monitoring.otel import OtelReporter

                try:
                    self.otel = OtelReporter(figures=self.figures)
                except MonitoringError as exc:
                    self.refused.add("otel")
                    log.warning("%s=true: %s", METRICS_OPEN_TELEMETRY.key, exc)
            return self.otel


_HUB = _Hub()


def restore_record(restored: Mapping[str, Any], started_ms: int, ready_ms: int) -> dict[str, Any]:
    """What the figures keep of a restore: ``from``, ``checkpoint_id``, ``started_ms`` (the
    run took the snapshot path, after finding the restore point), ``ready_ms`` (its first
    micro-batch, which loaded the state, ended), ``duration_ms`` and, when the restored
    checkpoint's row can be read, its ``state_bytes``, ``state_rows`` and
    ``inflight_rows``."""
    record: dict[str, Any] = {
        "from": restored.get("from"),
        "checkpoint_id": restored.get("checkpoint_id"),
        "started_ms": int(started_ms),
        "ready_ms": int(ready_ms),
        "duration_ms": max(0, int(ready_ms) - int(started_ms)),
    }
    try:
        origin = SnapshotLayout.configured(str(restored["from"]))
        row = checkpoints_table.row_of(
            checkpoints_table.read_rows(origin), int(restored["checkpoint_id"])
        )
    except (BarrieredError, KeyError, TypeError, ValueError) as exc:
        log.debug("the restored checkpoint's row cannot be read: %s", exc)
        row = None
    for column in ("state_bytes", "state_rows", "inflight_rows"):
        if row is not None and row.get(column) is not None:
            record[column] = int(row[column])
    return record


def recorded(conf: BarrieredConf, layout: SnapshotLayout, row: Mapping[str, Any]) -> None:
    """Monitor one finished checkpoint's ``_checkpoints`` row (the driver's hook).

    Parameters
    ----------
    conf : BarrieredConf
        The query's configuration (monitoring is on when it sets
        ``metrics.prometheusPort`` or ``metrics.openTelemetry``).
    layout : SnapshotLayout
        The query's snapshot path.
    row : mapping
        The row just appended.
    """
    if conf.metrics_prometheus_port is None and not conf.metrics_open_telemetry:
        return
    try:
        _HUB.record(conf, layout, row)
    except Exception:
        log.warning("barriered monitoring failed on checkpoint %s", row.get("checkpoint_id"))
        log.debug("monitoring failure", exc_info=True)


def started(
    conf: BarrieredConf,
    layout: SnapshotLayout,
    restored: Mapping[str, Any] | None,
    owner: ownership.Owner | None,
) -> None:
    """Monitor a run from its start (the driver's hook when its coordinator starts, at
    the run's first micro-batch): the endpoint is served from now on, and a restore is
    recorded (the page, ``barriered_last_restore_*``, a ``restore`` span).

    Parameters
    ----------
    conf : BarrieredConf
        The query's configuration.
    layout : SnapshotLayout
        Its snapshot path.
    restored : mapping or None
        What the run's offsets say it was restored from (``from``, ``checkpoint_id``);
        they keep saying so in later runs, which continue rather than restore.
    owner : Owner or None
        The run's owner record: when it took the snapshot path, and whether it restored
        (``restore_from``).
    """
    if conf.metrics_prometheus_port is None and not conf.metrics_open_telemetry:
        return
    restoring = owner is not None and owner.restore_from is not None
    try:
        _HUB.start(
            conf,
            layout,
            restored if restoring else None,
            owner.started_ms if owner is not None else None,
        )
    except Exception:
        log.warning("barriered monitoring failed at the start of %s", layout.root)
        log.debug("monitoring failure", exc_info=True)


def address() -> str | None:
    """The URL of this process' monitoring endpoint (``http://host:port/``), or None
    when none was started."""
    server = _HUB.server
    return None if server is None else str(server.url)


def figures() -> list[Figures]:
    """The figures of every snapshot path monitored in this process."""
    return _HUB.figures()


def stop() -> None:
    """Stop the endpoint and forget every figure (a new session starts afresh)."""
    with _HUB.lock:
        server, _HUB.server = _HUB.server, None
        _HUB.tallies.clear()
        _HUB.configs.clear()
        _HUB.otel = None
        _HUB.refused.clear()
    if server is not None:
        server.close()
