"""Starting `tenure ui` as a subprocess on a free port, a JSON client for its API, and a
prefix-stripping reverse proxy (the ``X-Forwarded-Prefix`` mode) for the UI tests."""

from __future__ import annotations

import base64
import http.client
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from support.processes import start_server

URL = re.compile(r"ui listening on (http://\S+?)/?\s")


def start_ui(env: dict[str, str], log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``tenure ui ARGS --bind 127.0.0.1:0``; the process and its base URL (with the prefix,
    no trailing slash) once it listens."""
    proc, url = start_server(env, log, ["ui", "--bind", "127.0.0.1:0", *args], URL)
    return proc, url.rstrip("/")


@contextmanager
def ui_process(env: dict[str, str], log: Path, *args: str) -> Iterator[str]:
    proc, url = start_ui(env, log, *args)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def call(url: str, method: str = "GET", body: Any = None, *, user: tuple[str, str] | None = None,
         headers: dict[str, str] | None = None, raw: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
    """One request; ``(status, parsed JSON body or text, headers)``."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    h = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    if user is not None:
        h["Authorization"] = "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn.request(method, path or "/", body=data, headers=h)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}


class StrippingProxy:
    """``http://127.0.0.1:PORT/tenure/...`` -> ``upstream/...`` with ``X-Forwarded-Prefix:
    /tenure``, streaming responses (server-sent events pass through)."""

    def __init__(self, upstream: str, prefix: str = "/tenure") -> None:
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def _forward(self) -> None:
                if not (self.path == prefix or self.path.startswith(prefix + "/")):
                    self.send_error(404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                headers["X-Forwarded-Prefix"] = prefix
                headers["X-Forwarded-Host"] = self.headers.get("Host", "")
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                upstream_conn.request(self.command, self.path[len(prefix):] or "/", body=data, headers=headers)
                resp = upstream_conn.getresponse()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while chunk := resp.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError, http.client.HTTPException):
                    pass
                finally:
                    upstream_conn.close()
                proxy.requests += 1

            do_GET = do_POST = _forward  # noqa: N815

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StrippingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
