"""A fake email provider on loopback that (optionally) honours Idempotency-Key, and counts sends.

POST /send with JSON {"to": ..., "invoice": ...} and header Idempotency-Key: returns
{"message_id": ...}; with idempotency on, a repeated key returns the first message id and
sends nothing. GET /stats returns {"sent": N, "requests": M}; GET /lookup?key=K returns
{"message_id": ...} of the last send with that key, or null (what a reconcile asks).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeProvider:
    def __init__(self, honour_idempotency: bool = True) -> None:
        self.honour_idempotency = honour_idempotency
        self.sent: list[dict[str, object]] = []
        self.requests = 0
        self.lookups = 0
        self.by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                key = self.headers.get("Idempotency-Key")
                with provider._lock:
                    provider.requests += 1
                    if provider.honour_idempotency and key and key in provider.by_key:
                        message_id = provider.by_key[key]
                    else:
                        message_id = f"msg-{uuid.uuid4().hex[:10]}"
                        provider.sent.append({**body, "key": key, "message_id": message_id})
                        if key:
                            provider.by_key[key] = message_id
                self._reply({"message_id": message_id})

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlsplit(self.path)
                with provider._lock:
                    if url.path == "/lookup":
                        key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
                        provider.lookups += 1
                        self._reply({"message_id": provider.by_key.get(key)})
                    else:
                        self._reply({"sent": len(provider.sent), "requests": provider.requests})

            def _reply(self, data: dict[str, object]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
