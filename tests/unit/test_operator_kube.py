"""KubeClient against a loopback HTTP stub (request shape), stats fetch mapping, run() args."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest

from tenure.core.errors import ConfigError
from tenure.core.stats import QueueStats
from tenure.operator import figures as fg
from tenure.operator.kube import KubeClient, KubeError, object_path, secret_value


class Stub(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    objects: dict[str, dict[str, Any]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> tuple[str, dict[str, list[str]], Any]:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "content_type": self.headers.get("Content-Type"),
                "auth": self.headers.get("Authorization"),
                "body": body,
            }
        )
        return url.path, parse_qs(url.query), body

    def do_GET(self) -> None:  # noqa: N802
        path, _, _ = self._record()
        if path == "/apis/monitoring.coreos.com/v1":
            self._reply(200, {"resources": [{"kind": "ServiceMonitor", "name": "servicemonitors"}]})
        elif path in self.objects:
            self._reply(200, self.objects[path])
        else:
            self._reply(404, {"kind": "Status", "message": "not found"})

    def do_PATCH(self) -> None:  # noqa: N802
        path, _, body = self._record()
        if body["kind"] == "CronJob":
            self._reply(422, {"kind": "Status", "message": "spec.schedule: Invalid value"})
            return
        self.objects[path] = body
        self._reply(201, body)

    def do_DELETE(self) -> None:  # noqa: N802
        path, _, _ = self._record()
        if self.objects.pop(path, None) is None:
            self._reply(404, {"message": "not found"})
        else:
            self._reply(200, {"status": "Success"})


@pytest.fixture()
def client() -> Iterator[KubeClient]:
    import kubernetes

    Stub.requests = []
    Stub.objects = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    cfg.api_key = {"authorization": "Bearer t0ken"}
    api = kubernetes.client.ApiClient(cfg)
    try:
        yield KubeClient(api, field_manager="tenure-test")
    finally:
        api.close()
        server.shutdown()
        server.server_close()


DEP = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "q-worker", "namespace": "ns"},
    "spec": {"replicas": 2},
}


def test_apply_is_a_forced_server_side_apply(client: KubeClient) -> None:
    live = client.apply(DEP)
    assert live["spec"]["replicas"] == 2
    (req,) = Stub.requests
    assert req["method"] == "PATCH"
    assert req["path"] == "/apis/apps/v1/namespaces/ns/deployments/q-worker"
    assert req["content_type"] == "application/apply-patch+yaml"
    assert req["query"] == {"fieldManager": ["tenure-test"], "force": ["true"]}
    assert req["auth"] == "Bearer t0ken"
    assert req["body"] == DEP


def test_get_delete_and_missing_objects(client: KubeClient) -> None:
    assert client.get("apps/v1", "Deployment", "ns", "q-worker") is None
    client.apply(DEP)
    assert client.get("apps/v1", "Deployment", "ns", "q-worker") == DEP
    assert client.delete("apps/v1", "Deployment", "ns", "q-worker") is True
    assert client.delete("apps/v1", "Deployment", "ns", "q-worker") is False
    delete = Stub.requests[-1]
    assert delete["method"] == "DELETE"
    assert delete["content_type"] == "application/json"
    # A JSON object, not a JSON-encoded string of one (the API server refuses the latter).
    assert delete["body"] == {"propagationPolicy": "Background"}


def test_server_errors_surface_with_status_and_message(client: KubeClient) -> None:
    cron = {**DEP, "apiVersion": "batch/v1", "kind": "CronJob"}
    with pytest.raises(KubeError) as err:
        client.apply(cron)
    assert err.value.status == 422
    assert "spec.schedule" in err.value.message


def test_discovery(client: KubeClient) -> None:
    assert client.api_available("monitoring.coreos.com/v1", "ServiceMonitor") is True
    assert client.api_available("monitoring.coreos.com/v1", "PodMonitor") is False
    assert client.api_available("example.org/v1", "Thing") is False


def test_paths_and_secret_values() -> None:
    assert object_path("v1", "Secret", "a", "b") == "/api/v1/namespaces/a/secrets/b"
    assert object_path("policy/v1", "PodDisruptionBudget", "a") == (
        "/apis/policy/v1/namespaces/a/poddisruptionbudgets"
    )
    assert secret_value({"data": {"url": "cG9zdGdyZXM6Ly94Cg=="}}, "url") == "postgres://x"
    assert secret_value({"stringData": {"url": "postgres://y"}}, "url") == "postgres://y"
    assert secret_value({"data": {}}, "url") is None


def _row(queue: str, ready: int) -> QueueStats:
    return QueueStats(
        queue=queue, ready=ready, scheduled=1, running=2, running_expired=3, completed=6,
        failed=4, oldest_ready_age_seconds=1.5, oldest_running_age_seconds=0.0,
        heartbeat_lag_max_seconds=0.0, heartbeat_lag_p95_seconds=0.0, live_workers=5,
        redelivered=0, reaped_total=0,
    )  # fmt: skip


def test_fetch_figures_picks_the_queue_and_bounds_the_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, str | None]] = []

    def fake(dsn: str, schema: str = "tenure", queue: str | None = None) -> list[QueueStats]:
        seen.append((dsn, schema, queue))
        return [_row("other", 99), _row("emails", 7)]

    monkeypatch.setattr("tenure.core.stats.fetch_queue_stats", fake)
    got = fg.fetch_figures("postgresql://u@db/x", "s", "emails", connect_timeout=3)
    assert got == fg.QueueFigures(
        ready=7, scheduled=1, running=2, running_expired=3, completed=6, failed=4, live_workers=5,
        oldest_ready_age_seconds=1.5,
    )  # fmt: skip
    assert "connect_timeout=3" in seen[0][0]
    assert seen[0][1:] == ("s", "emails")
    # A queue nobody used yet is empty, not an error.
    monkeypatch.setattr("tenure.core.stats.fetch_queue_stats", lambda *a, **k: [])
    assert fg.fetch_figures("postgresql://u@db/x", "s", "emails") == fg.QueueFigures()


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (psycopg.OperationalError("connection refused"), "DatabaseUnreachable"),
        (psycopg.errors.UndefinedTable("relation tenure.jobs does not exist"), "SchemaMissing"),
            (psycopg.errors.DivisionByZero("division by zero"), "DatabaseError"),
    ],
)
def test_fetch_figures_maps_database_errors(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, reason: str
) -> None:
    def boom(*args: Any, **kwargs: Any) -> list[QueueStats]:
        raise exc

    monkeypatch.setattr("tenure.core.stats.fetch_queue_stats", boom)
    with pytest.raises(fg.StatsUnavailable) as err:
        fg.fetch_figures("postgresql://u@db/x", "s", "emails")
    assert err.value.reason == reason


def test_fetch_figures_refuses_a_broken_dsn() -> None:
    with pytest.raises(fg.StatsUnavailable) as err:
        fg.fetch_figures("host=db port", "s", "q")
    assert err.value.reason == "InvalidDSN"


@pytest.mark.parametrize(
    ("namespaces", "all_namespaces"),
    [(["a"], True), ([], False), (None, False)],
)
def test_run_refuses_contradictory_scope(namespaces: list[str] | None, all_namespaces: bool) -> None:
    from tenure.operator.main import run

    with pytest.raises(ConfigError):
        run(namespaces=namespaces, all_namespaces=all_namespaces, liveness_endpoint=None)
