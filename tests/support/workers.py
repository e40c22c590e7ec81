"""An in-process burst worker for the integration tests that need the whole runtime, and an
in-process answer to the heartbeat statement for unit tests."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from prometheus_client import CollectorRegistry

from tenure.core.repository import HeartbeatOutcome
from tenure.worker.app import App
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.runtime import Worker, WorkerConfig


def run_burst_worker(app: App, dsn: str, schema: str, *, timeout: float = 60) -> None:
    """Run a burst worker (two slots, 5 s leases) until the queues are drained; fail after ``timeout``."""
    config = WorkerConfig(concurrency=2, poll_interval=0.05, burst=True, heartbeat=HeartbeatConfig(lease=5, interval=1))
    worker = Worker(app, config, dsn=dsn, schema=schema, registry=CollectorRegistry())
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=timeout)
    assert not thread.is_alive(), "burst worker did not finish"


class RenewingRepo:
    """The heartbeat statement, answered in-process for unit tests: every lease given is
    renewed for 60 s, and each call's (id, token) pairs are kept in :attr:`sent`."""

    def __init__(self) -> None:
        self.sent: list[list[tuple[int, uuid.UUID]]] = []

    def heartbeat(self, worker_id: str, held: list[tuple[int, uuid.UUID]], *args: Any,
                  **kwargs: Any) -> list[HeartbeatOutcome]:
        self.sent.append(list(held))
        return [HeartbeatOutcome(jid, "renewed", None, 60.0) for jid, _ in held]

