"""A FIFO consumer for test_sqs_fifo.py: receive one message at a time, log ``start``/``done`` with
the wall clock, delete it. With ``hold`` it logs ``hold`` for its first message and then sleeps
(the test kills it with SIGKILL, mid-message). Usage: ENDPOINT QUEUE_URL LOG [hold]."""

from __future__ import annotations

import sys
import time

import boto3


def main() -> None:
    endpoint, url, log = sys.argv[1:4]
    hold = len(sys.argv) > 4 and sys.argv[4] == "hold"
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="t",
                       aws_secret_access_key="t")
    idle_until = time.monotonic() + 8
    while time.monotonic() < idle_until:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=1).get("Messages", [])
        if not got:
            continue
        idle_until = time.monotonic() + 8
        m = got[0]
        with open(log, "a") as out:
            out.write(f"{'hold' if hold else 'start'} {m['Body']} {time.time():.6f}\n")
        if hold:
            time.sleep(3600)
        time.sleep(0.05)
        with open(log, "a") as out:
            out.write(f"done {m['Body']} {time.time():.6f}\n")
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


if __name__ == "__main__":
    main()
