"""A PostgreSQL restart between a guarded effect's body and ``effect.succeeded()`` (issue 12, defect 1).

Each test owns an embedded server (the session's shared one is never restarted) and runs an
in-process worker against it. The "provider" counts how often the body ran, per key.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tenure import App, JobContext
from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.repository import Repository
from tenure.reaper.reaper import ReaperConfig
from tenure.worker import context as context_module
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.runtime import Worker, WorkerConfig

pytestmark = pytest.mark.integration

SCHEMA = "tenure"
KEY = "invoice:42:email:v1"


@pytest.fixture
def own_server() -> Iterator[EmbeddedServer]:
    home = Path(tempfile.mkdtemp(prefix="tenure-restart-pg-"))
    server = ensure_server(home / "data")
    with connect(server.dsn) as conn:
        Repository(conn, SCHEMA).migrate()
    yield server
    server.stop("immediate")
    shutil.rmtree(home, ignore_errors=True)


class Provider:
    """Counts body runs per key; knows which keys it performed (for reconcile)."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.reconciled: list[str] = []

    def send(self, key: str) -> str:
        self.runs[key] += 1
        return f"msg-{key}"

    def lookup(self, key: str) -> str | None:
        self.reconciled.append(key)
        return f"msg-{key}" if self.runs[key] else None


def _app(provider: Provider, body_done: threading.Event, go_on: threading.Event,
         reconcile: bool) -> App:
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5))

    @app.task("send")
    def send(ctx: JobContext) -> None:
        with ctx.effect(KEY, **({"reconcile": provider.lookup} if reconcile else {})) as eff:
            if eff.already_succeeded:
                return
            ref = provider.send(KEY)
            if ctx.attempt == 1:
                body_done.set()
                go_on.wait(60)  # the gap between body and success, in which PostgreSQL restarts
            eff.succeeded(ref)

    return app


def _run_until(worker: Worker, dsn: str, job_id: int, statuses: tuple[str, ...], timeout: float) -> dict[str, Any]:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    row: dict[str, Any] | None = None
    try:
        while time.monotonic() < deadline:
            try:
                with connect(dsn) as conn:
                    row = Repository(conn, SCHEMA).get_job(job_id)
            except Exception:  # noqa: BLE001 - the server may be restarting
                row = None
            if row is not None and row["status"] in statuses:
                return row
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not reach {statuses}: {row}")
    finally:
        worker.request_stop()
        thread.join(timeout=60)


def _enqueue(dsn: str) -> int:
    with connect(dsn) as conn:
        return Repository(conn, SCHEMA).enqueue("send", {"invoice_id": 42}).id


def _execution(dsn: str) -> dict[str, Any]:
    with connect(dsn) as conn:
        row = Repository(conn, SCHEMA).execution_get(KEY)
    assert row is not None
    return row


def _worker(app: App, server: EmbeddedServer, lease: float) -> Worker:
    return Worker(app, WorkerConfig(concurrency=2, poll_interval=0.1,
                                    heartbeat=HeartbeatConfig(lease=lease, interval=lease / 4),
                                    reaper=ReaperConfig(grace=lease / 4, interval=0.2)),
                  dsn=server.dsn, schema=SCHEMA, registry=CollectorRegistry())


def test_restart_between_body_and_succeeded_records_success_once(own_server: EmbeddedServer) -> None:
    """The tester's scenario: `pg_ctl restart -m fast` in the gap; the worker stays alive."""
    provider, body_done, go_on = Provider(), threading.Event(), threading.Event()
    worker = _worker(_app(provider, body_done, go_on, reconcile=False), own_server, lease=8.0)
    job_id = _enqueue(own_server.dsn)

    def restart_in_gap() -> None:
        assert body_done.wait(30)
        own_server.restart("fast")
        time.sleep(1.0)
        go_on.set()

    restarter = threading.Thread(target=restart_in_gap, daemon=True)
    restarter.start()
    row = _run_until(worker, own_server.dsn, job_id, ("completed", "failed"), 60)
    restarter.join(5)
    assert provider.runs[KEY] == 1, "the guarded body ran again after the restart"
    assert row["status"] == "completed" and row["attempt_count"] == 1
    execution = _execution(own_server.dsn)
    assert execution["status"] == "succeeded" and execution["result_ref"] == f"msg-{KEY}"


@pytest.mark.parametrize("reconcile", [False, True])
def test_unrecordable_success_leaves_the_effect_in_doubt_for_the_next_attempt(
        own_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, reconcile: bool) -> None:
    """The database stays down past the bounded retry: the next attempt must not rerun the body.
    Without reconcile the job is dead-lettered as ambiguous; with it, the provider's answer wins."""
    monkeypatch.setattr(context_module, "EFFECT_RECORD_RETRY_MIN", 0.5, raising=False)
    provider, body_done, go_on = Provider(), threading.Event(), threading.Event()
    worker = _worker(_app(provider, body_done, go_on, reconcile=reconcile), own_server, lease=1.2)
    job_id = _enqueue(own_server.dsn)

    def outage_in_gap() -> None:
        assert body_done.wait(30)
        own_server.stop("fast")
        go_on.set()
        time.sleep(3.0)  # longer than the key's lease and the retry: success cannot be recorded
        own_server.start()

    outage = threading.Thread(target=outage_in_gap, daemon=True)
    outage.start()
    row = _run_until(worker, own_server.dsn, job_id, ("completed", "failed"), 90)
    outage.join(10)
    assert provider.runs[KEY] == 1, "the body ran again blindly"
    execution = _execution(own_server.dsn)
    if reconcile:
        assert provider.reconciled == [KEY]
        assert row["status"] == "completed"
        assert execution["status"] == "succeeded" and execution["result_ref"] == f"msg-{KEY}"
    else:
        assert row["status"] == "failed" and row["last_error_code"] == "effect_in_doubt"
        assert execution["status"] != "succeeded" and execution["last_error_code"] == "in_doubt"
