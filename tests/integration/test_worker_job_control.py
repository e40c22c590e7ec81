"""Job control seen by an in-process worker: cancelling a running job, per-task timeouts
(sync abandoned, async cancelled, retried as task_timeout), pause/resume while serving."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import tenure
from tenure import App, JobContext, control
from tenure.core.db import Connection
from tenure.core.errors import ConfigError
from tenure.core.repository import JobSpec, Repository
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.runtime import Worker, WorkerConfig

pytestmark = pytest.mark.integration


def _start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def _wait(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _worker(app: App, dsn: str, schema: str, registry: CollectorRegistry, **kw: object) -> Worker:
    cfg = dict(concurrency=2, poll_interval=0.05, max_abandoned=5,
               heartbeat=HeartbeatConfig(lease=1.5, interval=0.3, max_lease_total=60))
    cfg.update(kw)
    return Worker(app, WorkerConfig(**cfg), dsn=dsn, schema=schema, registry=registry)  # type: ignore[arg-type]


def _status(repo: Repository, job_id: int) -> str:
    row = repo.get_job(job_id)
    assert row is not None
    return str(row["status"])


def test_cancelling_a_running_async_job_cancels_the_handler(dsn: str, schema: str, repo: Repository,
                                                            conn: Connection) -> None:
    app = App()
    state: dict[str, object] = {}
    started = threading.Event()

    @app.task("slow")
    async def slow(ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            state["reason"] = ctx.lease_lost_reason
            raise

    job_id = repo.enqueue("slow").id
    registry = CollectorRegistry()
    worker = _worker(app, dsn, schema, registry)
    thread = _start(worker)
    assert started.wait(10)
    report = tenure.cancel(conn, [job_id], schema=schema, requested_by="test-suite")
    assert report.revoked == [job_id]
    _wait(lambda: state.get("cancelled"), 10)
    assert state["reason"] == "job cancelled: token revoked"
    _wait(lambda: worker.slots.in_flight == 0, 5)
    assert _status(repo, job_id) == "cancelled"
    metrics = generate_latest(registry).decode()
    assert 'tenure_jobs_cancelled_while_running_total{queue="default",task="slow"} 1.0' in metrics
    records = repo.job_events(job_id)
    events = [e["event"] for e in records]
    # A claim writes no audit row; the cancel ends the attempt, so it is the attempt's record.
    assert events[0] == "cancelled" and "heartbeat_lost" in events and "claimed" not in events
    detail = records[0]["detail"]
    assert detail["requested_by"] == "test-suite" and detail["previous_status"] == "running"
    assert "fence" in detail and "started_at" in detail
    worker.request_stop()
    thread.join(15)


def test_cancelled_sync_job_late_completion_is_rejected_and_audited(dsn: str, schema: str, repo: Repository,
                                                                    conn: Connection) -> None:
    app = App()
    started, told = threading.Event(), threading.Event()

    @app.task("stubborn")
    def stubborn(ctx: JobContext) -> None:
        started.set()
        if ctx.lease_lost.wait(10):
            told.set()
        # ignores the signal and "completes" anyway

    job_id = repo.enqueue("stubborn").id
    worker = _worker(app, dsn, schema, CollectorRegistry())
    thread = _start(worker)
    assert started.wait(10)
    control.cancel(conn, [job_id], schema=schema, strict=True)
    assert told.wait(10)
    _wait(lambda: "stale_completion_rejected" in [e["event"] for e in repo.job_events(job_id)], 10)
    assert _status(repo, job_id) == "cancelled"
    worker.request_stop()
    thread.join(15)


def test_sync_timeout_abandons_the_thread_and_retries_as_task_timeout(dsn: str, schema: str,
                                                                       repo: Repository) -> None:
    app = App()
    release = threading.Event()
    attempts: list[int] = []

    @app.task("hangs", timeout=0.5, max_attempts=2, base_delay=0.01, max_delay=0.02)
    def hangs(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        release.wait(20)

    @app.task("fine")
    def fine(ctx: JobContext) -> None:
        return None

    job_id = repo.enqueue("hangs").id
    registry = CollectorRegistry()
    worker = _worker(app, dsn, schema, registry, concurrency=1)
    thread = _start(worker)
    _wait(lambda: _status(repo, job_id) == "failed", 20)
    row = repo.get_job(job_id)
    assert row is not None and row["last_error_code"] == "task_timeout" and row["attempt_count"] == 2
    # Both slots were freed although both threads still hang: other work proceeds.
    fine_id = repo.enqueue("fine").id
    _wait(lambda: _status(repo, fine_id) == "completed", 10)
    assert worker.slots.abandoned == 1  # counted per job (both attempts of one job here)
    metrics = generate_latest(registry).decode()
    assert 'tenure_job_timeouts_total{queue="default",task="hangs"} 2.0' in metrics
    assert 'tenure_jobs_retried_total{error_code="task_timeout",queue="default",task="hangs"} 1.0' in metrics
    events = [e["event"] for e in repo.job_events(job_id)]
    assert events.count("retry_scheduled") == 1 and "dead_lettered" in events
    release.set()
    _wait(lambda: worker.slots.abandoned == 0, 10)
    worker.request_stop()
    thread.join(15)


def test_async_timeout_cancels_the_handler(dsn: str, schema: str, repo: Repository) -> None:
    app = App()
    cancelled: list[int] = []

    @app.task("slow_async", timeout=0.3, max_attempts=3, base_delay=0.01, max_delay=0.02)
    async def slow_async(ctx: JobContext) -> None:
        if ctx.attempt >= 2:
            return  # the retry finishes in time
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(ctx.attempt)
            raise

    job_id = repo.enqueue("slow_async").id
    worker = _worker(app, dsn, schema, CollectorRegistry())
    thread = _start(worker)
    _wait(lambda: _status(repo, job_id) == "completed", 20)
    assert cancelled == [1]
    retry = next(e for e in repo.job_events(job_id) if e["event"] == "retry_scheduled")
    assert retry["reason"] == "task_timeout"
    assert worker.slots.abandoned == 0
    worker.request_stop()
    thread.join(15)


def test_invalid_timeout_is_refused() -> None:
    app = App()
    for bad in (0, -1, float("nan"), "5"):
        with pytest.raises(ConfigError, match="timeout"):
            app.task("x", timeout=bad)  # type: ignore[arg-type]


def test_workers_stop_claiming_a_paused_queue_and_running_jobs_finish(dsn: str, schema: str, repo: Repository,
                                                                     conn: Connection) -> None:
    app = App()
    gate = threading.Event()
    started = threading.Event()

    @app.task("gated")
    def gated(ctx: JobContext) -> None:
        started.set()
        gate.wait(20)

    @app.task("quick")
    def quick(ctx: JobContext) -> None:
        return None

    first = repo.enqueue("gated").id
    worker = _worker(app, dsn, schema, CollectorRegistry(), concurrency=4)
    thread = _start(worker)
    assert started.wait(10)
    control.set_paused(conn, "default", True, schema=schema)
    repo.enqueue_many([JobSpec("quick") for _ in range(5)])
    time.sleep(0.5)  # several poll intervals: nothing new is claimed
    assert repo.queue_stats("default")[0].ready == 5
    gate.set()
    _wait(lambda: _status(repo, first) == "completed", 10)  # the running job finishes
    control.set_paused(conn, "default", False, schema=schema)
    _wait(lambda: repo.queue_stats("default")[0].completed == 6, 10)
    worker.request_stop()
    thread.join(15)
