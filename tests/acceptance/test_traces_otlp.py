"""Traces end to end (issue 26): `tenure enqueue`, `tenure worker --burst` and `tenure reaper
--once` as subprocesses, configured only by the standard OTEL_* environment, export over
OTLP/HTTP to a real receiver (protobuf ExportTraceServiceRequest, decoded with
opentelemetry-proto). One job fails, then succeeds with an effect; another is reaped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from support.otlp_receiver import OtlpReceiver, ReceivedSpan
from support.processes import run_cli, tenure_env, wait_for
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

HERE = Path(__file__).parent
SPAN_KIND_INTERNAL, SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER = 1, 4, 5
STATUS_OK, STATUS_ERROR = 1, 2


def _otel_env(dsn: str, schema: str, endpoint: str, service: str | None = None) -> dict[str, str]:
    env = tenure_env(dsn, schema, HERE)
    env.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200"})
    env.pop("OTEL_SERVICE_NAME", None)
    if service:
        env["OTEL_SERVICE_NAME"] = service
    return env


def test_enqueue_attempts_effect_and_reap_reach_a_real_otlp_receiver(dsn: str, schema: str, repo: Repository) -> None:
    with OtlpReceiver() as receiver:
        producer_env = _otel_env(dsn, schema, receiver.endpoint, service="shop")
        enqueued = run_cli(producer_env, "enqueue", "traced_flaky", "--payload", '{"order": 7}')
        assert enqueued.returncode == 0, enqueued.stderr
        job_id = int(enqueued.stdout.split()[0])
        worker = run_cli(_otel_env(dsn, schema, receiver.endpoint), "worker", "--app", "acceptance_tasks:app",
                         "--burst", "--poll-interval", "0.1", "--backoff-base", "0", "--backoff-max", "0")
        assert worker.returncode == 0, worker.stderr
        assert repo.get_job(job_id)["status"] == "completed"  # type: ignore[index]

        # A second job, claimed by an owner that vanished, then reaped by `tenure reaper --once`.
        reaped_id = int(run_cli(producer_env, "enqueue", "noop", "--queue", "lost").stdout.split()[0])
        [claimed] = repo.claim("w-vanished", ["lost"], 1, 0.2)
        time.sleep(0.4)
        reaper = run_cli(_otel_env(dsn, schema, receiver.endpoint), "reaper", "--once", "--grace", "0",
                         "--heartbeat", "0.1")
        assert reaper.returncode == 0, reaper.stderr

        wait_for(lambda: receiver.named("tenure.reap"), 10, "the reaper's span")
        spans = list(receiver.spans)

    def one(name: str) -> ReceivedSpan:
        found = [s for s in spans if s.name == name]
        assert len(found) == 1, (name, [s.name for s in spans])
        return found[0]

    producer = one("send default")
    assert producer.kind == SPAN_KIND_PRODUCER and producer.service == "shop"
    assert _subset(producer.attributes, {"messaging.system": "tenure", "messaging.destination.name": "default",
                                         "messaging.message.id": str(job_id), "messaging.operation.type": "send"})
    attempts = sorted((s for s in spans if s.name == "process default"), key=lambda s: s.attributes["tenure.attempt"])
    assert [a.attributes["tenure.attempt"] for a in attempts] == [1, 2]
    for attempt in attempts:
        assert attempt.kind == SPAN_KIND_CONSUMER and attempt.service == "tenure-worker"
        assert attempt.trace_id == producer.trace_id and attempt.parent_span_id == producer.span_id
        assert _subset(attempt.attributes, {"messaging.system": "tenure", "messaging.operation.type": "process",
                                            "messaging.message.id": str(job_id), "tenure.task": "traced_flaky"})
        assert isinstance(attempt.attributes["tenure.fencing_token"], int)
    failed, succeeded = attempts
    assert failed.status_code == STATUS_ERROR and "exception" in failed.events
    assert succeeded.status_code == STATUS_OK
    effect = one("tenure.effect")
    assert effect.parent_span_id == succeeded.span_id and effect.trace_id == producer.trace_id
    assert effect.attributes == {"tenure.effect.key": f"traced:{job_id}:effect", "tenure.effect.outcome": "ran"}

    lost_producer = one("send lost")
    reap = one("tenure.reap")
    assert reap.service == "tenure-reaper" and reap.trace_id == lost_producer.trace_id
    assert reap.parent_span_id == lost_producer.span_id
    assert _subset(reap.attributes, {"messaging.message.id": str(reaped_id), "tenure.attempt": 1,
                                     "tenure.fencing_token": claimed.fence})


def _subset(attributes: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(attributes.get(k) == v for k, v in expected.items())
