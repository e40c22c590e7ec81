"""A tiny HTTP endpoint for /metrics, /healthz and /readyz (one port per process)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Probe = Callable[[], tuple[bool, str]]


def serve(port: int, registry: CollectorRegistry, *, healthz: Probe | None = None,
          readyz: Probe | None = None, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Start serving in a daemon thread; returns the server (``.server_address`` has the port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                return
            probe = {"/healthz": healthz, "/readyz": readyz}.get(path)
            if path in ("/healthz", "/readyz"):
                ok, why = probe() if probe else (True, "ok")
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")
                return
            self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="tenure-http", daemon=True).start()
    return server
