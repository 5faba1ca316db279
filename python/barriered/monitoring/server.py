"""The monitoring endpoint: the page, its JSON and the Prometheus metrics over HTTP.

One small threaded HTTP server (the standard library's) serves

* ``/``: the live checkpoint page (:mod:`barriered.monitoring.page`);
* ``/checkpoints.json``: the figures the page's script polls;
* ``/metrics``: the Prometheus metrics (:mod:`barriered.monitoring.prometheus`).

The driver serves its running queries' figures with it (:mod:`barriered.monitoring.hub`),
``barriered ui`` a snapshot path's (:mod:`barriered.monitoring.offline`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from barriered.errors import MonitoringError
from barriered.monitoring.page import PathView, as_json, render

__all__ = ["MonitoringServer"]

log = logging.getLogger(__name__)


class MonitoringServer:
    """An HTTP server of the page, its JSON and the metrics, on a daemon thread.

    Parameters
    ----------
    views : callable
        Returns the :class:`PathView` of every snapshot path to show; called per request.
    port : int, default 0
        The port (0: a free one, see :attr:`port`).
    host : str, default "127.0.0.1"
        The address to listen on.
    refresh_ms : int, default 2000
        How often the page polls for new checkpoints.
    title : str, optional
        The page's heading.

    Raises
    ------
    MonitoringError
        When the port cannot be bound (taken, or an address of another machine).
    """

    def __init__(
        self,
        views: Callable[[], Sequence[PathView]],
        port: int = 0,
        host: str = "127.0.0.1",
        refresh_ms: int = 2000,
        title: str = "",
    ) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from barriered.monitoring.prometheus import registry_of

        registry = registry_of(lambda: [v.figures for v in views()])

        def route(path: str) -> tuple[int, str, bytes]:
            if path in ("/", "/index.html"):
                page = render(views(), refresh_ms, title)
                return 200, "text/html; charset=utf-8", page.encode()
            if path == "/checkpoints.json":
                return 200, "application/json", as_json(views()).encode()
            if path == "/metrics":
                return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
            return 404, "text/plain; charset=utf-8", b"not found: try /, /metrics\n"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    status, kind, body = route(self.path.split("?", 1)[0])
                except Exception as exc:  # a damaged table: say so, keep serving
                    log.warning("monitoring: %s failed", self.path, exc_info=True)
                    status, kind = 500, "text/plain; charset=utf-8"
                    body = f"{type(exc).__name__}: {exc}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("monitoring: " + format, *args)

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise MonitoringError(
                f"the monitoring endpoint cannot listen on {host}:{port}: {exc}; choose "
                "another port (0 picks a free one)"
            ) from exc
        self._server.daemon_threads = True
        self.host = host
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="barriered-monitoring", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port/`` (``localhost`` for every interface)."""
        host = "localhost" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def serve_until_interrupted(self) -> None:
        """Block until Ctrl-C (the serving thread keeps running meanwhile)."""
        self._thread.join()
