"""Test helpers for users' own tests (``tenure.testing``), also a pytest plugin.

Installing tenure registers this module as a pytest plugin (entry point ``pytest11``), so any
test can ask for these fixtures; nothing starts until a test uses one:

- ``tenure_dsn`` (session): ``TENURE_TEST_DATABASE_URL``, else an embedded PostgreSQL started
  in a temporary directory for the session and stopped after it;
- ``tenure_schema``: a fresh, migrated schema per test, dropped afterwards;
- ``tenure``: a :class:`TenureTester` bound to that schema: enqueue, run jobs inline, drain a
  queue in-process with a real worker, and assert on jobs.

Without pytest, use :class:`TenureTester` directly with any DSN and schema. Limits: the drain
runs the real worker (claim, heartbeat, acknowledgements), so it takes real time — keep
handlers fast; retries wait out their backoff delay unless ``ready_only`` is used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tenure.core.db import Connection
    from tenure.core.repository import Repository
    from tenure.worker.app import App

DRAIN_TIMEOUT_DEFAULT = 30.0


@dataclass(frozen=True)
class DrainResult:
    """Jobs of the drained queues by status after the drain (counts include earlier jobs)."""

    processed: int
    """Outcomes the worker recorded during this drain (completions, retries, dead-letters...)."""
    by_status: dict[str, int]


class TenureTester:
    """Enqueue, run and inspect jobs of one schema (see the module docstring)."""

    def __init__(self, dsn: str, schema: str) -> None:
        from tenure.core.db import connect
        from tenure.core.repository import Repository

        self.dsn, self.schema = dsn, schema
        self.conn: Connection = connect(dsn, application_name="tenure-testing")
        self.repo: Repository = Repository(self.conn, schema)

    def close(self) -> None:
        self.conn.close()

    # -- enqueue and inspect ------------------------------------------------------------------
    def enqueue(self, task: str, payload: Any = None, **options: Any) -> int:
        """Enqueue like ``tenure.enqueue`` (queue, priority, delay, idempotency_key...); the id."""
        return self.repo.enqueue(task, payload, **options).id

    def jobs(self, *, task: str | None = None, status: str | None = None,
             queue: str | None = None) -> list[dict[str, Any]]:
        """Jobs (newest first) with their payloads, filtered."""
        rows = self.repo.job_list(task=task, status=status, queue=queue, limit=100_000)
        return [{**r, "payload": (self.repo.get_job(int(r["id"])) or {}).get("payload")} for r in rows]

    def job(self, job_id: int) -> dict[str, Any]:
        row = self.repo.get_job(job_id)
        if row is None:
            raise AssertionError(f"no job {job_id}")
        return dict(row)

    def assert_enqueued(self, task: str, payload: Any = None, *, queue: str | None = None,
                        status: str | None = None, count: int | None = None) -> list[dict[str, Any]]:
        """Assert that jobs of ``task`` exist (with this payload/queue/status; exactly ``count``
        of them if given) and return them."""
        found = [j for j in self.jobs(task=task, status=status, queue=queue)
                 if payload is None or j["payload"] == payload]
        what = f"{task!r}" + (f" with payload {payload!r}" if payload is not None else "")
        if count is None and not found:
            raise AssertionError(f"no job {what} was enqueued; jobs: {self._summary()}")
        if count is not None and len(found) != count:
            raise AssertionError(f"expected {count} job(s) {what}, found {len(found)}; jobs: {self._summary()}")
        return found

    def assert_not_enqueued(self, task: str, payload: Any = None) -> None:
        found = [j for j in self.jobs(task=task) if payload is None or j["payload"] == payload]
        if found:
            raise AssertionError(f"expected no job {task!r}, found {[j['id'] for j in found]}")

    def _summary(self) -> str:
        return ", ".join(f"{j['id']}:{j['task']}:{j['status']}" for j in self.repo.job_list(limit=20)) or "none"

    # -- running ------------------------------------------------------------------------------
    def drain(self, app: App, queues: Sequence[str] | None = None, *, timeout: float = DRAIN_TIMEOUT_DEFAULT,
              concurrency: int = 4, ready_only: bool = False) -> DrainResult:
        """Run a real in-process worker for ``app`` until its queues have no ready, blocked or
        running jobs (and, unless ``ready_only``, no scheduled ones such as retries waiting out
        their backoff). AssertionError if that takes longer than ``timeout`` seconds."""
        from prometheus_client import CollectorRegistry

        from tenure.worker.heartbeat import HeartbeatConfig
        from tenure.worker.runtime import Worker, WorkerConfig

        names = tuple(queues or app.queues)
        worker = Worker(app, WorkerConfig(queues=names, concurrency=concurrency, poll_interval=0.05,
                                          heartbeat=HeartbeatConfig(lease=30, interval=1), scheduler=False),
                        dsn=self.dsn, schema=self.schema, registry=CollectorRegistry())
        thread = threading.Thread(target=worker.run, name="tenure-testing-drain", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                if not thread.is_alive():
                    raise AssertionError("the drain worker stopped unexpectedly")
                idle = not worker.slots.busy() and worker.state.ready
                if idle:
                    stats = [s for s in self.repo.queue_stats(completed=False) if s.queue in names]
                    # Blocked jobs (held back by a rate limit or a handler's back-pressure) are
                    # ready soon: wait for them as for ready ones.
                    if not any(s.ready or s.blocked or s.running or (s.scheduled and not ready_only) for s in stats):
                        break
                if time.monotonic() > deadline:
                    raise AssertionError(f"queues {list(names)} not drained within {timeout:g}s: {self._summary()}")
                time.sleep(0.05)
        finally:
            worker.request_stop()
            thread.join(timeout=30)
        counts: dict[str, int] = {}
        for q in names:
            for r in self.repo.job_list(queue=q, limit=100_000):
                counts[r["status"]] = counts.get(r["status"], 0) + 1
        return DrainResult(processed=worker.slots.processed, by_status=counts)

    def run_inline(self, app: App, task: str, payload: Any = None, *, timeout: float = DRAIN_TIMEOUT_DEFAULT,
                   **options: Any) -> dict[str, Any]:
        """Enqueue one job of ``task`` on a private queue, run it through the real worker path
        (claim, handler, acknowledgement; retries included) and return the job row after."""
        queue = f"inline-{uuid.uuid4().hex[:12]}"
        job_id = self.enqueue(task, payload, queue=queue, **options)
        self.drain(app, [queue], timeout=timeout, concurrency=1)
        return self.job(job_id)


# -- pytest plugin ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def tenure_dsn() -> Iterator[str]:
    """A PostgreSQL for the session: ``TENURE_TEST_DATABASE_URL`` or an embedded server."""
    url = os.environ.get("TENURE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from tenure.core.embedded import ensure_server

    home = Path(tempfile.mkdtemp(prefix="tenure-testing-pg-"))
    server = ensure_server(home / "data")
    try:
        yield server.dsn
    finally:
        server.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def tenure_schema(tenure_dsn: str) -> Iterator[str]:
    """A fresh schema with every migration applied, dropped after the test."""
    from tenure.core.db import connect
    from tenure.core.repository import Repository

    name = f"tenure_test_{uuid.uuid4().hex[:12]}"
    with connect(tenure_dsn) as conn:
        Repository(conn, name).migrate()
    yield name
    with connect(tenure_dsn) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def tenure(tenure_dsn: str, tenure_schema: str) -> Iterator[TenureTester]:
    """A :class:`TenureTester` on this test's fresh schema."""
    tester = TenureTester(tenure_dsn, tenure_schema)
    try:
        yield tester
    finally:
        tester.close()
