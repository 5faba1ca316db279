"""The driver's monitoring: what the coordinator's one hook feeds.

The driver calls :func:`recorded` after it appended a finished checkpoint's row to
``_checkpoints``. When the query's configuration turns monitoring on
(``metrics.prometheusPort``, ``metrics.openTelemetry``), the row is counted in the
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

from barriered.config import METRICS_OPEN_TELEMETRY, METRICS_PROMETHEUS_PORT, BarrieredConf
from barriered.errors import MonitoringError
from barriered.monitoring.figures import Figures, Tally
from barriered.monitoring.offline import configuration, restored_from
from barriered.monitoring.page import PathView
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout

__all__ = ["address", "figures", "recorded", "stop"]

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

    def record(self, conf: BarrieredConf, layout: SnapshotLayout, row: Mapping[str, Any]) -> None:
        with self.lock:
            tally = self.tallies.get(layout.root)
        if tally is None:  # the rows already in the table (this one included)
            tally = Tally.of(
                layout.root, checkpoints_table.read_rows(layout), restored_from(layout)
            )
            config = configuration(layout)
            with self.lock:
                self.tallies[layout.root] = tally
                self.configs[layout.root] = config
        else:
            tally.add(row)
        if conf.metrics_prometheus_port is not None:
            self._serve(conf.metrics_prometheus_port, conf.metrics_host)
        if conf.metrics_open_telemetry:
            self._trace({**row, "snapshot_path": layout.root})

    def _serve(self, port: int, host: str) -> None:
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

    def _trace(self, row: Mapping[str, Any]) -> None:
        with self.lock:
            if self.otel is None and "otel" not in self.refused:
                from barriered.monitoring.otel import OtelReporter

                try:
                    self.otel = OtelReporter(figures=self.figures)
                except MonitoringError as exc:
                    self.refused.add("otel")
                    log.warning("%s=true: %s", METRICS_OPEN_TELEMETRY.key, exc)
            otel = self.otel
        if otel is not None:
            otel.checkpoint(row)


_HUB = _Hub()


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
