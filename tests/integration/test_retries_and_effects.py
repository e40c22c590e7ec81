"""Retries, error classes, the DLQ and the execution store with an in-process worker (R10–R16)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tenure import AmbiguousError, App, JobContext, PermanentError, RetryableError
from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.redaction import Redaction
from tenure.core.repository import JobSpec, Repository
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.runtime import Worker, WorkerConfig

pytestmark = pytest.mark.integration


def run_burst(app: App, dsn: str, schema: str, **overrides: Any) -> Worker:
    config = WorkerConfig(**{"concurrency": 4, "poll_interval": 0.05, "burst": True,
                             "heartbeat": HeartbeatConfig(lease=5, interval=1), **overrides})
    worker = Worker(app, config, dsn=dsn, schema=schema, registry=CollectorRegistry())
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "burst worker did not finish"
    return worker


def test_poison_job_reaches_dlq_after_max_attempts_and_never_blocks_others(dsn: str, schema: str,
                                                                          repo: Repository) -> None:
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=3))
    calls: list[int] = []

    @app.task("poison")
    def poison(ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        raise ValueError("always broken")

    @app.task("fine")
    def fine(ctx: JobContext) -> None:
        return None

    poison_id = repo.enqueue("poison", {"password": "hunter2", "n": 1}, max_attempts=3).id
    repo.enqueue_many([JobSpec("fine") for _ in range(50)])
    run_burst(app, dsn, schema)
    row = repo.get_job(poison_id)
    assert row is not None and row["status"] == "failed" and row["attempt_count"] == 3
    assert calls == [1, 2, 3]
    assert row["last_error_code"] == "handler_error" and "attempts exhausted (3)" in row["last_error"]
    assert row["payload"] == {"password": "***", "n": 1}, "the DLQ keeps a sanitised payload"
    assert row["first_failed_at"] <= row["last_failed_at"]
    [s] = repo.queue_stats("default")
    assert (s.completed, s.failed, s.ready) == (50, 1, 0)
    events = [e["event"] for e in repo.job_events(poison_id)]
    assert events.count("retry_scheduled") == 2 and events[-1] == "dead_lettered"


def test_error_classes_route_failures(dsn: str, schema: str, repo: Repository) -> None:
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5))

    @app.task("permanent")
    def permanent(ctx: JobContext) -> None:
        raise PermanentError("bad credentials", code="bad_credentials")

    @app.task("ambiguous_unguarded")
    def ambiguous_unguarded(ctx: JobContext) -> None:
        raise AmbiguousError("timeout after send", code="timeout_after_send")

    in_doubt_seen: list[bool] = []

    @app.task("ambiguous_guarded")
    def ambiguous_guarded(ctx: JobContext) -> None:
        # The provider deduplicates the key itself, so reconcile may answer "send again" (None).
        with ctx.effect(f"pay:{ctx.job_id}:v1", reconcile=lambda key: None) as eff:
            if ctx.attempt == 1:
                raise AmbiguousError("timeout after send")
            in_doubt_seen.append(eff.in_doubt)
            eff.succeeded("ok")

    @app.task("ambiguous_guarded_unreconciled")
    def ambiguous_guarded_unreconciled(ctx: JobContext) -> None:
        # Issue 22, item 7: the request may have been applied, so the key is in doubt, and
        # without reconcile the next attempt dead-letters instead of re-running the body.
        with ctx.effect(f"pay:{ctx.job_id}:v1") as eff:
            if ctx.attempt == 1:
                raise AmbiguousError("timeout after send")
            eff.succeeded("ok")

    @app.task("rate_limited")
    def rate_limited(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RetryableError("429", code="rate_limited", retry_after=0.3)

    @app.task("timeout")
    def timeout(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise TimeoutError("upstream slow")

    @app.task("validated", validate=lambda p: None if isinstance(p.get("n"), int) else (_ for _ in ()).throw(
        ValueError("n must be int")))
    def validated(ctx: JobContext) -> None:
        return None

    ids = {name: repo.enqueue(name, {"n": "x"} if name == "validated" else {}).id
           for name in ("permanent", "ambiguous_unguarded", "ambiguous_guarded", "ambiguous_guarded_unreconciled",
                        "rate_limited", "timeout", "validated")}
    run_burst(app, dsn, schema)
    status = {name: repo.get_job(i) for name, i in ids.items()}
    assert status["permanent"]["status"] == "failed" and status["permanent"]["attempt_count"] == 1  # type: ignore[index]
    assert status["permanent"]["last_error_code"] == "bad_credentials"  # type: ignore[index]
    assert status["ambiguous_unguarded"]["last_error_code"] == "ambiguous_unguarded"  # type: ignore[index]
    assert status["ambiguous_guarded"]["status"] == "completed"  # type: ignore[index]
    assert in_doubt_seen == [True]
    assert status["ambiguous_guarded_unreconciled"]["last_error_code"] == "effect_in_doubt"  # type: ignore[index]
    assert status["rate_limited"]["status"] == "completed"  # type: ignore[index]
    retry = [e for e in repo.job_events(ids["rate_limited"]) if e["event"] == "retry_scheduled"]
    assert retry[0]["detail"]["delay_seconds"] == pytest.approx(0.3) and retry[0]["reason"] == "rate_limited"
    timeout_events = [e for e in repo.job_events(ids["timeout"]) if e["event"] == "retry_scheduled"]
    assert timeout_events[0]["reason"] == "timeout"
    assert status["validated"]["last_error_code"] == "invalid_payload"  # type: ignore[index]
    assert status["validated"]["attempt_count"] == 1  # type: ignore[index]


def test_effect_store_runs_the_body_once_when_two_attempts_hold_the_key(dsn: str, schema: str,
                                                                        repo: Repository) -> None:
    """Forced by an expired lease: A and B both hold the job's key; the body runs once."""
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5))
    bodies: list[str] = []
    a_inside, release_a = threading.Event(), threading.Event()

    @app.task("charge")
    def charge(ctx: JobContext) -> None:
        with ctx.effect("order:7:charge:v1") as eff:
            if eff.already_succeeded:
                return
            bodies.append(ctx.worker_id)
            if ctx.worker_id == "A":
                a_inside.set()
                release_a.wait(10)
            eff.succeeded(f"charge-by-{ctx.worker_id}")

    job_id = repo.enqueue("charge").id
    cfg = WorkerConfig(concurrency=1, poll_interval=0.05, heartbeat=HeartbeatConfig(
        lease=0.6, interval=0.2, max_lease_total=0.6, max_effect_hold=30))
    a_metrics = CollectorRegistry()
    a = Worker(app, cfg, dsn=dsn, schema=schema, registry=a_metrics, worker_id="A")
    a_thread = threading.Thread(target=a.run, daemon=True)
    a_thread.start()
    assert a_inside.wait(10)
    time.sleep(1.0)  # A's lease hits its max total and expires while A is inside the effect
    reaped = repo.reap("r", grace=0.0, batch=10, decide=lambda c: __import__("tenure.core.repository",
                       fromlist=["ReapDecision"]).ReapDecision(False, 0.0))
    assert [r.id for r in reaped] == [job_id]
    b_metrics = CollectorRegistry()
    b = Worker(app, WorkerConfig(concurrency=1, poll_interval=0.05, burst=True,
                                 heartbeat=HeartbeatConfig(lease=5, interval=1)),
               dsn=dsn, schema=schema, registry=b_metrics, worker_id="B")
    b_thread = threading.Thread(target=b.run, daemon=True)
    b_thread.start()
    time.sleep(1.5)  # B sees leased_by_other_worker (A's effect lease is still valid) and defers
    release_a.set()
    b_thread.join(30)
    a.request_stop()
    a_thread.join(30)  # A's acknowledgements (and their counters) are done
    assert bodies == ["A"], "the effect body ran once"
    execution = repo.execution_get("order:7:charge:v1")
    assert execution is not None and execution["status"] == "succeeded" and execution["result_ref"] == "charge-by-A"
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "completed"
    events = [e["event"] for e in repo.job_events(job_id)]
    assert events.count("completed") == 1 and "deferred" in events
    # A deferral is counted as one, never as a shutdown release (docs/metrics.md).
    labels = {"queue": "default", "task": "charge"}
    registries = (a_metrics, b_metrics)
    assert sum(r.get_sample_value("tenure_jobs_deferred_total", labels) or 0 for r in registries) \
        == events.count("deferred")
    assert [r.get_sample_value("tenure_jobs_released_total", labels) or 0.0 for r in registries] == [0.0, 0.0]


def test_redaction_masks_keys_and_truncates() -> None:
    r = Redaction(mask_keys=("secret",), max_error_chars=40)
    assert r.payload({"a": {"SECRET": 1, "b": [{"secret": 2}]}}) == {"a": {"SECRET": "***", "b": [{"secret": "***"}]}}
    text = r.error_text("token=abc123 failed " + "x" * 100)
    assert "abc123" not in text and len(text) <= 40 and text.endswith("[truncated]")


def test_retention_pruner_removes_old_completed_jobs(dsn: str, schema: str, repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(5)])
    jobs = repo.claim("w", ["default"], 5, 30)
    repo.complete_many("w", [(j.id, j.lock_token) for j in jobs])
    assert repo.prune_completed(3600) == 0
    time.sleep(1.1)
    assert repo.prune_completed(1.0) == 5
    assert repo.job_events(jobs[0].id) == []
    with connect(dsn) as c:
        assert c.execute(f'SELECT count(*) AS n FROM "{schema}".jobs').fetchone()["n"] == 0  # type: ignore[index]
    assert uuid
