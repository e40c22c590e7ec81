"""Traces (issue 26) with the OpenTelemetry SDK's in-memory exporter and a real PostgreSQL: the
enqueue's PRODUCER span, each attempt's CONSUMER span as its child, the effect's span, the
span events of a lost lease, a reap in the job's trace, and trace ids in JSON logs."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from support.workers import run_burst_worker
from tenure import App, JobContext
from tenure.core import tracing
from tenure.core.backoff import RetryPolicy
from tenure.core.repository import JobSpec, Repository
from tenure.observability.logs import JsonFormatter
from tenure.reaper.reaper import Reaper, ReaperConfig

pytestmark = pytest.mark.integration


def _reset_globals() -> None:
    """Forget the global tracer provider (what OpenTelemetry's own test helpers do), so the rest
    of the session runs with traces off, as without a provider."""
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # noqa: SLF001 - the SDK's set-once guard


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_globals()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset_globals()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_enqueue_is_a_producer_span_whose_context_travels_with_the_job(
        spans: InMemorySpanExporter, repo: Repository, schema: str) -> None:
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("checkout") as parent:
        job = repo.enqueue("mail.send", {"to": "a@example.com"}, queue="mail")
    [producer] = _named(spans, "send mail")
    assert producer.kind is SpanKind.PRODUCER
    assert producer.parent is not None and producer.parent.span_id == parent.get_span_context().span_id
    assert dict(producer.attributes or {}).items() >= {
        "messaging.system": "tenure", "messaging.destination.name": "mail",
        "messaging.message.id": str(job.id), "messaging.operation.type": "send"}.items()
    row = repo.conn.execute(f'SELECT trace_context FROM "{schema}".jobs WHERE id = %s', (job.id,)).fetchone()
    assert row is not None
    version, trace_id, span_id, flags = row["trace_context"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{producer.context.trace_id:032x}", f"{producer.context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


def test_a_batch_names_each_job_on_its_own_span(spans: InMemorySpanExporter, repo: Repository, schema: str) -> None:
    inserted = repo.enqueue_many([JobSpec("t", {"n": n}, "batch", idempotency_key=f"k{n % 2}") for n in range(3)])
    assert inserted == 2  # the third is a duplicate of the first key
    producers = _named(spans, "send batch")
    assert len(producers) == 3
    ids = {r["id"] for r in repo.conn.execute(f'SELECT id FROM "{schema}".jobs').fetchall()}
    named = [p for p in producers if not (p.attributes or {}).get("tenure.deduplicated")]
    assert {int(str((p.attributes or {})["messaging.message.id"])) for p in named} == ids
    assert sum(1 for p in producers if (p.attributes or {}).get("tenure.deduplicated")) == 1


def test_a_failing_then_succeeding_job_reads_as_one_trace(
        spans: InMemorySpanExporter, dsn: str, schema: str, repo: Repository) -> None:
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=3))
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(JsonFormatter().format(record))

    handler_log = logging.getLogger("app.invoices")
    capture = Capture()
    handler_log.addHandler(capture)

    @app.task("invoice")
    def invoice(ctx: JobContext) -> None:
        handler_log.warning("attempt %d", ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("provider timed out")
        with ctx.effect(f"invoice:{ctx.job_id}:email") as eff:
            eff.succeeded("msg-1")

    try:
        job = repo.enqueue("invoice", {"n": 1})
        run_burst_worker(app, dsn, schema)
    finally:
        handler_log.removeHandler(capture)
    assert repo.get_job(job.id)["status"] == "completed"  # type: ignore[index]
    [producer] = _named(spans, "send default")
    attempts = sorted(_named(spans, "process default"), key=lambda s: (s.attributes or {})["tenure.attempt"])
    assert [(s.attributes or {})["tenure.attempt"] for s in attempts] == [1, 2]
    for span in attempts:
        attrs = dict(span.attributes or {})
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == producer.context.trace_id
        assert span.parent is not None and span.parent.span_id == producer.context.span_id
        assert attrs["messaging.operation.type"] == "process" and attrs["messaging.message.id"] == str(job.id)
        assert attrs["tenure.task"] == "invoice" and isinstance(attrs["tenure.fencing_token"], int)
    first, second = attempts
    assert first.status.status_code is StatusCode.ERROR
    assert [e.name for e in first.events] == ["exception"]
    assert first.events[0].attributes is not None and first.events[0].attributes["exception.type"] == "ValueError"
    assert second.status.status_code is StatusCode.OK
    assert (first.attributes or {})["tenure.fencing_token"] < (second.attributes or {})["tenure.fencing_token"]
    [effect] = _named(spans, "tenure.effect")
    assert effect.parent is not None and effect.parent.span_id == second.context.span_id
    assert dict(effect.attributes or {}) == {"tenure.effect.key": f"invoice:{job.id}:email",
                                             "tenure.effect.outcome": "ran"}
    logged = [json.loads(line) for line in lines]
    assert [(d["trace_id"], d["span_id"]) for d in logged] == [
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in attempts]


def test_an_effect_that_already_succeeded_says_so(
        spans: InMemorySpanExporter, dsn: str, schema: str, repo: Repository) -> None:
    app = App()

    @app.task("twice")
    def twice(ctx: JobContext) -> None:
        with ctx.effect("shared-key") as eff:
            if not eff.already_succeeded:
                eff.succeeded("ref")

    repo.enqueue("twice")
    repo.enqueue("twice")
    run_burst_worker(app, dsn, schema)
    outcomes = sorted(str((s.attributes or {})["tenure.effect.outcome"]) for s in _named(spans, "tenure.effect"))
    # Run at once, the second may first find the key held by the first: deferred, then done.
    assert outcomes.count("ran") == 1 and outcomes.count("already_succeeded") == 1
    assert set(outcomes) <= {"ran", "already_succeeded", "deferred"}


def test_a_lost_lease_is_an_event_and_the_reap_joins_the_trace(
        spans: InMemorySpanExporter, dsn: str, schema: str, repo: Repository) -> None:
    job = repo.enqueue("slow", queue="slow")
    [claimed] = repo.claim("w-gone", ["slow"], 1, 0.2)
    assert claimed.trace_context is not None
    time.sleep(0.3)
    reaped = Reaper(ReaperConfig(grace=0.0, retry=RetryPolicy(60, 60, 5)), dsn=dsn, schema=schema,
                    rng=random.Random(1)).run_once()
    assert [r.id for r in reaped] == [job.id]
    [producer] = _named(spans, "send slow")
    [reap] = _named(spans, "tenure.reap")
    assert reap.context.trace_id == producer.context.trace_id
    assert reap.parent is not None and reap.parent.span_id == producer.context.span_id
    attrs: dict[str, Any] = dict(reap.attributes or {})
    assert attrs["messaging.message.id"] == str(job.id)
    assert (attrs["tenure.attempt"], attrs["tenure.fencing_token"]) == (1, claimed.fence)


def test_a_cancelled_lease_is_an_event_on_the_attempt(spans: InMemorySpanExporter, repo: Repository) -> None:
    job = repo.enqueue("t", queue="events")
    [claimed] = repo.claim("w", ["events"], 1, 30)
    span = tracing.start_attempt(queue="events", task="t", job_id=job.id, attempt=1, fence=claimed.fence,
                                 trace_context=claimed.trace_context, worker_id="w")
    span.event("tenure.cancel", {"tenure.reason": "job cancelled: token revoked"})
    span.stale_write("heartbeat", queue="events", job_id=job.id, trace_context=claimed.trace_context,
                     fence=claimed.fence)
    span.finish("release")
    span.stale_write("complete", queue="events", job_id=job.id, trace_context=claimed.trace_context,
                     fence=claimed.fence)
    [attempt] = _named(spans, "process events")
    assert [e.name for e in attempt.events] == ["tenure.cancel", "tenure.stale_write"]
    assert attempt.status.status_code is StatusCode.UNSET
    [late] = _named(spans, "tenure.stale_write")  # after the attempt ended: a short span linked to it
    assert [link.context.span_id for link in late.links] == [attempt.context.span_id]
    assert (late.attributes or {})["tenure.operation"] == "complete"


def test_without_a_provider_nothing_is_traced(repo: Repository, schema: str) -> None:
    _reset_globals()
    assert not tracing.enabled()
    job = repo.enqueue("t")
    row = repo.conn.execute(f'SELECT trace_context FROM "{schema}".jobs WHERE id = %s', (job.id,)).fetchone()
    assert row is not None and row["trace_context"] is None
