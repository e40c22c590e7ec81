"""The in-process worker: lease-lost signalling, hung handlers, async cancellation, metrics."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tenure import App, JobContext
from tenure.core.repository import JobSpec, Repository
from tenure.reaper.reaper import ReaperConfig
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


def test_hung_handler_is_told_and_its_slot_freed_while_others_keep_running(dsn: str, schema: str,
                                                                           repo: Repository) -> None:
    """engram#1496: a handler that hangs with a live heartbeat loses its job at max total lease."""
    app = App()
    seen: dict[str, object] = {}
    release = threading.Event()

    @app.task("hang")
    def hang(ctx: JobContext) -> None:
        seen["lost"] = ctx.lease_lost.wait(10)
        seen["reason"] = ctx.lease_lost_reason
        release.wait(10)

    @app.task("fine")
    def fine(ctx: JobContext) -> None:
        return None

    hung_id = repo.enqueue("hang").id
    registry = CollectorRegistry()
    worker = Worker(app, WorkerConfig(concurrency=1, poll_interval=0.05, max_abandoned=1,
                                      heartbeat=HeartbeatConfig(lease=0.6, interval=0.2, max_lease_total=1.0),
                                      reaper=ReaperConfig(grace=0.2, interval=0.2)),
                    dsn=dsn, schema=schema, registry=registry)
    thread = _start(worker)
    _wait(lambda: seen.get("lost") is not None, 10)
    assert seen["lost"] is True and seen["reason"] == "maximum total lease reached"
    repo.enqueue_many([JobSpec("fine") for _ in range(5)])
    _wait(lambda: (s := repo.queue_stats("default")) and s[0].completed >= 5, 10)
    assert worker.healthz()[0] is False, "an abandoned handler thread makes /healthz fail"
    _wait(lambda: any(e["event"].startswith("reaped") for e in repo.job_events(hung_id)), 10)
    metrics = generate_latest(registry).decode()
    assert 'tenure_leases_lost_total{queue="default",task="hang"} 1.0' in metrics
    release.set()
    worker.request_stop()
    thread.join(15)
    assert not thread.is_alive()


def test_async_handler_is_cancelled_when_its_lease_is_lost(dsn: str, schema: str, repo: Repository) -> None:
    app = App()
    state: dict[str, bool] = {}

    @app.task("slow_async")
    async def slow_async(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    job_id = repo.enqueue("slow_async").id
    worker = Worker(app, WorkerConfig(concurrency=2, poll_interval=0.05,
                                      heartbeat=HeartbeatConfig(lease=0.6, interval=0.2, max_lease_total=0.8)),
                    dsn=dsn, schema=schema, registry=CollectorRegistry())
    thread = _start(worker)
    _wait(lambda: state.get("cancelled"), 10)
    worker.request_stop()
    thread.join(15)
    row = repo.get_job(job_id)
    # The loss was judged locally (the capped lease's deadline passed): the attempt is handed
    # back by a token CAS as `lease_lost`, never completed.
    assert row is not None and row["status"] == "pending" and row["last_error_code"] == "lease_lost", row
    assert not any(e["event"] == "completed" for e in repo.job_events(job_id))


def test_worker_metrics_count_claims_completions_and_runtime(dsn: str, schema: str, repo: Repository) -> None:
    app = App()

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    repo.enqueue_many([JobSpec("noop") for _ in range(30)])
    registry = CollectorRegistry()
    worker = Worker(app, WorkerConfig(concurrency=8, poll_interval=0.05, burst=True), dsn=dsn, schema=schema,
                    registry=registry)
    worker.run()
    text = generate_latest(registry).decode()
    assert 'tenure_jobs_claimed_total{queue="default",task="noop"} 30.0' in text
    assert 'tenure_jobs_completed_total{queue="default",task="noop"} 30.0' in text
    assert 'tenure_job_runtime_seconds_count{queue="default",task="noop"} 30.0' in text
    assert 'tenure_jobs_in_flight{queue="default",task="noop"} 0.0' in text
    workers = repo.worker_list()
    assert len(workers) == 1 and workers[0]["stopped_at"] is not None
