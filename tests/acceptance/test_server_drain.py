"""SIGTERM to `tenure sqs` and `tenure ui` drains instead of dropping connections (issue 36):
readiness fails first, each SQS long poll in flight is answered at once with no messages (JSON
and query protocols), each event stream ends with a ``retry:`` hint, the process exits 0 within
2 s with no traceback, and a consumer moved to a second server mid-stream never sees an error."""

from __future__ import annotations

import http.client
import signal
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sqs_server import client, start_sqs
from support.processes import wait_for
from ui_server import start_ui

pytestmark = pytest.mark.acceptance

EXIT_SECONDS = 2.0
"""From the drain to the process's exit (and to the answer of a long poll in flight)."""


def _get(url: str, path: str) -> tuple[int, str, dict[str, str]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def _long_polls_waiting(url: str) -> int:
    text = _get(url, "/metrics")[1]
    (line,) = [x for x in text.splitlines() if x.startswith("tenure_sqs_long_polls_waiting ")]
    return int(float(line.split()[1]))


def _unready(url: str) -> tuple[int, str, dict[str, str]] | None:
    """The answer of /healthz if it is 503, else None."""
    answer = _get(url, "/healthz")
    return answer if answer[0] == 503 else None


def _exited_cleanly(proc: subprocess.Popen[bytes], log: Path, within: float) -> float:
    """Seconds the process took to exit (at most ``within``); it exited 0 with no traceback."""
    started = time.monotonic()
    try:
        code = proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running {within}s after the drain: {log.read_text()}") from None
    text = log.read_text(errors="replace")
    assert code == 0, text
    assert "Traceback" not in text and "graceful shutdown exceeded" not in text, text
    return time.monotonic() - started


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_sigterm_answers_sqs_long_polls_empty_after_failing_readiness(cli_env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    log = tmp_path / "sqs.log"
    delay = 1.5
    proc, url = start_sqs(cli_env, log, "--no-auth", "--shutdown-delay", f"{delay}s")
    try:
        sqs = client(url)
        queue_url = sqs.create_queue(QueueName="drain")["QueueUrl"]
        answers: dict[str, Any] = {}

        def json_poll() -> None:  # boto3: the AWS JSON protocol
            try:
                answers["json"] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20)
            except Exception as exc:
                answers["json"] = exc
            answers["json_at"] = time.monotonic()

        def query_poll() -> None:  # the query protocol: a form POST to the queue URL, XML back
            parts = urlsplit(queue_url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            try:
                conn.request("POST", parts.path, body="Action=ReceiveMessage&WaitTimeSeconds=20&Version=2012-11-05",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
                resp = conn.getresponse()
                answers["query"] = (resp.status, resp.read().decode(), resp.getheader("connection"))
            except Exception as exc:
                answers["query"] = exc
            finally:
                conn.close()
            answers["query_at"] = time.monotonic()

        polls = [threading.Thread(target=json_poll), threading.Thread(target=query_poll)]
        for t in polls:
            t.start()
        wait_for(lambda: _long_polls_waiting(url) == 2, 10, "two long polls waiting")
        assert _get(url, "/healthz")[0] == 200
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # The delay: readiness fails and responses close their connection, the long polls wait on.
        status, body, headers = wait_for(lambda: _unready(url), delay, "/healthz 503")
        assert body == "stopping\n" and headers["connection"] == "close"
        assert time.monotonic() - stopped < delay and "json" not in answers and "query" not in answers
        for t in polls:
            t.join(timeout=delay + EXIT_SECONDS)
        assert isinstance(answers["json"], dict) and "Messages" not in answers["json"], answers["json"]
        status, xml, connection = answers["query"]
        assert status == 200 and connection == "close", xml
        root = ET.fromstring(xml)
        ns = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}
        assert root.tag.endswith("ReceiveMessageResponse") and root.find("sqs:ReceiveMessageResult", ns) is not None
        assert root.find(".//sqs:Message", ns) is None, xml
        for key in ("json_at", "query_at"):
            assert delay - 0.2 < answers[key] - stopped < delay + 1.0, (key, answers[key] - stopped)
        _exited_cleanly(proc, log, delay + EXIT_SECONDS - (time.monotonic() - stopped))
    finally:
        _stop(proc)


def test_sigterm_ends_ui_event_streams_with_a_retry_hint(cli_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "ui.log"
    proc, url = start_ui(cli_env, log)
    try:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request("GET", f"{parts.path}/api/v1/events")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("content-type", "").startswith("text/event-stream")
        assert b"event: hello" in resp.readline() + resp.readline() + resp.readline()
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = resp.read().decode()  # to the end of the stream: the server ends it
        ended = time.monotonic() - stopped
        conn.close()
        assert ended < EXIT_SECONDS, ended
        lines = [line for line in rest.splitlines() if line]
        assert lines and lines[-1].startswith("retry: ") and lines[-1][7:].isdigit(), rest
        _exited_cleanly(proc, log, EXIT_SECONDS - (time.monotonic() - stopped))
    finally:
        _stop(proc)


def test_a_consumer_moved_to_a_second_server_mid_stream_sees_no_error(cli_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """A rolling update in small: the new server is up, the old one gets SIGTERM while a boto3
    consumer is mid-stream on it, the endpoint moves to the new one (the Service would, during
    the shutdown delay): every message is done exactly once and no call fails."""
    total = 500
    old, old_url = start_sqs(cli_env, tmp_path / "old.log", "--no-auth", "--shutdown-delay", "1s")
    new, new_url = start_sqs(cli_env, tmp_path / "new.log", "--no-auth")
    try:
        producer = client(old_url)
        old_queue = producer.create_queue(QueueName="rolling")["QueueUrl"]
        for start in range(0, total, 10):
            producer.send_message_batch(QueueUrl=old_queue, Entries=[
                {"Id": str(i), "MessageBody": f"m-{i}"} for i in range(start, start + 10)])
        endpoint = [(client(old_url), old_queue)]
        done: list[str] = []
        errors: list[BaseException] = []

        def consume() -> None:
            try:
                while len(done) < total:
                    sqs, queue_url = endpoint[0]
                    got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=20)
                    messages = got.get("Messages", [])
                    if messages:
                        time.sleep(0.02)  # the work; then the delete, through wherever the endpoint is now
                        sqs, queue_url = endpoint[0]
                        sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
                        done.extend(m["Body"] for m in messages)
            except BaseException as exc:
                errors.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        wait_for(lambda: len(done) >= total // 2 or errors, 20, "half the messages done")
        assert len(done) < total, "the consumer finished before the update"
        moved = client(new_url)
        endpoint[0] = (moved, moved.get_queue_url(QueueName="rolling")["QueueUrl"])
        stopped = time.monotonic()
        old.send_signal(signal.SIGTERM)
        consumer.join(timeout=25)
        assert not errors, errors
        assert not consumer.is_alive() and sorted(done) == sorted(f"m-{i}" for i in range(total))
        assert len(set(done)) == total
        _exited_cleanly(old, tmp_path / "old.log", 1.0 + EXIT_SECONDS - (time.monotonic() - stopped))
        attrs = moved.get_queue_attributes(QueueUrl=endpoint[0][1], AttributeNames=["All"])["Attributes"]
        assert attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    finally:
        _stop(old)
        new.terminate()
        new.wait(timeout=10)
