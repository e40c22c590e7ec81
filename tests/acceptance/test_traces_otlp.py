"""Traces end to end (issue 26): `tenure enqueue`, `tenure worker --burst` and `tenure reaper
--once` as subprocesses, configured only by the standard OTEL_* environment, export over
OTLP/HTTP to a real receiver (protobuf ExportTraceServiceRequest, decoded with
opentelemetry-proto). One job fails, then succeeds with an effect; another is reaped.
Through `tenure sqs` (issue 36): boto3's sends are PRODUCER spans parented by the message's
AWSTraceHeader or traceparent, and its receives and a worker's attempts are their children."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sqs_server import client, start_sqs
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


XRAY_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
XRAY_TRACE, XRAY_PARENT = "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8"
W3C_TRACE, W3C_PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def test_sqs_sends_are_producer_spans_parented_by_the_message_and_their_attempts_children(
        dsn: str, schema: str, tmp_path: Path) -> None:
    traceparent = {"DataType": "String", "StringValue": f"00-{W3C_TRACE}-{W3C_PARENT}-01"}
    with OtlpReceiver() as receiver:
        proc, url = start_sqs(_otel_env(dsn, schema, receiver.endpoint), tmp_path / "sqs.log", "--no-auth")
        try:
            sqs = client(url)
            xray_url = sqs.create_queue(QueueName="xray")["QueueUrl"]
            traced_url = sqs.create_queue(QueueName="traced")["QueueUrl"]
            sent = sqs.send_message(QueueUrl=xray_url, MessageBody="from x-ray", MessageSystemAttributes={
                "AWSTraceHeader": {"DataType": "String", "StringValue": XRAY_HEADER}})
            batch = sqs.send_message_batch(QueueUrl=traced_url, Entries=[
                {"Id": "w3c", "MessageBody": "w3c", "MessageAttributes": {"traceparent": traceparent}},
                {"Id": "both", "MessageBody": "both", "MessageAttributes": {"traceparent": traceparent},
                 "MessageSystemAttributes": {"AWSTraceHeader": {"DataType": "String", "StringValue": XRAY_HEADER}}},
                {"Id": "malformed", "MessageBody": "malformed", "MessageSystemAttributes": {
                    "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-nothex;Parent=zz;Sampled=1"}},
                 "MessageAttributes": {"traceparent": {"DataType": "String", "StringValue": "00-zz-zz-01"}}},
                {"Id": "plain", "MessageBody": "plain"}])
            assert not batch.get("Failed") and len(batch["Successful"]) == 4
            fifo_url = sqs.create_queue(QueueName="orders.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
            fifo = [sqs.send_message(QueueUrl=fifo_url, MessageBody="f", MessageGroupId="g",
                                     MessageDeduplicationId="d", MessageAttributes={"traceparent": traceparent})
                    for _ in range(2)]
            assert fifo[0]["MessageId"] == fifo[1]["MessageId"]
            [message] = sqs.receive_message(QueueUrl=xray_url, MessageSystemAttributeNames=["AWSTraceHeader"],
                                            WaitTimeSeconds=1)["Messages"]
            assert message["Attributes"]["AWSTraceHeader"] == XRAY_HEADER  # handed on unchanged
            sqs.delete_message(QueueUrl=xray_url, ReceiptHandle=message["ReceiptHandle"])
        finally:
            proc.terminate()
            proc.wait(timeout=15)
        worker = run_cli(_otel_env(dsn, schema, receiver.endpoint), "worker", "--app", "sqs_traced_tasks:app",
                         "--burst", "--poll-interval", "0.1")
        assert worker.returncode == 0, worker.stderr
        wait_for(lambda: len(receiver.named("process traced")) >= 4, 10, "the worker's attempts")
        spans = list(receiver.spans)

    def message_id(reply: dict[str, Any]) -> str:
        return str(int(reply["MessageId"].replace("-", ""), 16))

    sends = {s.attributes["messaging.message.id"]: s for s in spans
             if s.name.startswith("send ") and s.name != "send orders.fifo"}
    ids = {e["Id"]: message_id(e) for e in batch["Successful"]}
    assert set(sends) == {message_id(sent), *ids.values()}  # one PRODUCER span per message, batch included
    for send in sends.values():
        assert send.kind == SPAN_KIND_PRODUCER and send.service == "tenure-sqs"
        assert _subset(send.attributes, {"messaging.system": "tenure", "messaging.operation.type": "send",
                                         "tenure.task": "sqs.message"})

    xray = sends[message_id(sent)]
    assert (xray.name, xray.trace_id, xray.parent_span_id) == ("send xray", XRAY_TRACE, XRAY_PARENT)
    for entry in ("w3c", "both"):  # a traceparent message attribute wins over an AWSTraceHeader
        assert (sends[ids[entry]].trace_id, sends[ids[entry]].parent_span_id) == (W3C_TRACE, W3C_PARENT)
    for entry in ("malformed", "plain"):  # a malformed carrier is ignored: a trace of its own
        assert sends[ids[entry]].parent_span_id == ""
        assert sends[ids[entry]].trace_id not in (W3C_TRACE, XRAY_TRACE)

    fifo_sends = [s for s in spans if s.name == "send orders.fifo"]  # a FIFO duplicate has its span too
    assert [s.attributes["messaging.message.id"] for s in fifo_sends] == [message_id(fifo[0])] * 2
    assert sorted(bool(s.attributes.get("tenure.deduplicated")) for s in fifo_sends) == [False, True]
    assert all((s.trace_id, s.parent_span_id) == (W3C_TRACE, W3C_PARENT) for s in fifo_sends)

    [receive] = [s for s in spans if s.name == "receive xray"]
    assert receive.kind == SPAN_KIND_CONSUMER and receive.service == "tenure-sqs"
    assert (receive.trace_id, receive.parent_span_id) == (XRAY_TRACE, xray.span_id)
    assert _subset(receive.attributes, {"messaging.operation.type": "receive", "tenure.attempt": 1,
                                        "messaging.message.id": message_id(sent)})

    attempts = {s.attributes["messaging.message.id"]: s for s in spans if s.name == "process traced"}
    assert set(attempts) == set(ids.values())
    for job_id, attempt in attempts.items():
        assert attempt.service == "tenure-worker" and attempt.status_code == STATUS_OK
        assert (attempt.trace_id, attempt.parent_span_id) == (sends[job_id].trace_id, sends[job_id].span_id)
