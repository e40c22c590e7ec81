"""A boto3 SQS consumer for the kind suite's rolling restart of tenure-sqs (e2e/kind/test_kind.py).

Long-polls one queue through the Service, works on each message for ``SQS_PACE`` seconds, deletes
it, and prints one JSON line per event on stdout, which the test reads with ``kubectl logs``:
``receive`` (a successful ReceiveMessage: how many messages, when it returned), ``done`` (a message
deleted: its id, its body's ``n``, when), ``error`` (any exception of a call: its type and text).
Retries are off (one attempt per call), so every failed request is seen here, not hidden by the
SDK. Exits 0 once ``SQS_EXPECTED`` distinct messages are deleted, 1 at ``SQS_DEADLINE`` seconds.
"""

from __future__ import annotations

import json
import os
import time

import boto3
from botocore.config import Config

WAIT = int(os.environ.get("SQS_WAIT", "10"))
PACE = float(os.environ.get("SQS_PACE", "0.1"))
EXPECTED = int(os.environ["SQS_EXPECTED"])
DEADLINE = time.time() + float(os.environ.get("SQS_DEADLINE", "900"))


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": round(time.time(), 3), **fields}), flush=True)


def main() -> int:
    sqs = boto3.client(
        "sqs", endpoint_url=os.environ["SQS_ENDPOINT"], region_name=os.environ.get("SQS_REGION", "us-east-1"),
        aws_access_key_id=os.environ["SQS_KEY"], aws_secret_access_key=os.environ["SQS_SECRET"],
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5,
                      read_timeout=WAIT + 20))
    queue_url = ""
    while not queue_url:
        try:
            queue_url = sqs.get_queue_url(QueueName=os.environ["SQS_QUEUE"])["QueueUrl"]
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none ends the loop
            emit("error", call="GetQueueUrl", type=type(exc).__name__, error=str(exc)[:300])
            time.sleep(1)
    emit("start", queue_url=queue_url)
    done: set[str] = set()
    while len(done) < EXPECTED:
        if time.time() > DEADLINE:
            emit("deadline", done=len(done))
            return 1
        try:
            messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=WAIT,
                                           VisibilityTimeout=60).get("Messages", [])
        except Exception as exc:  # noqa: BLE001
            emit("error", call="ReceiveMessage", type=type(exc).__name__, error=str(exc)[:300])
            time.sleep(0.5)
            continue
        emit("receive", n=len(messages))
        for message in messages:
            time.sleep(PACE)  # the work
            try:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            except Exception as exc:  # noqa: BLE001
                emit("error", call="DeleteMessage", type=type(exc).__name__, error=str(exc)[:300],
                     id=message["MessageId"])
                continue
            done.add(message["MessageId"])
            try:
                n = json.loads(message["Body"])["n"]
            except (ValueError, TypeError, KeyError):
                n = None  # not one of the test's messages: the test fails on it
            emit("done", id=message["MessageId"], n=n)
    emit("finished", done=len(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
