"""`tenure sqs` against tenure's own Python API on the same database (issue 25, docs/sqs.md).

1. Throughput: ``--clients`` processes each run ``--rounds`` of SendMessageBatch(10),
   ReceiveMessage(10), DeleteMessageBatch through boto3 and a real `tenure sqs` subprocess; the
   same number of processes run the direct path (``Repository.enqueue_many`` of 10, ``claim``
   of 10, ``complete_many``), each on its own queue. Jobs/s = messages deleted / wall time,
   timed from outside the client processes (their start-up excluded: each waits for a go file).
2. Long-poll wake-up: a ReceiveMessage with WaitTimeSeconds=10 is waiting when a SendMessage
   is sent; the time from the send's return to the receive's return, ``--wakeups`` samples, p50.

    .venv/bin/python -m bench.sqs_roundtrip --clients 2 --rounds 200

One machine's numbers (shared and noisy), never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tenure.core.db import connect, resolve_dsn
from tenure.core.repository import JobSpec, Repository


def _client(kind: str, target: str, schema: str, queue: str, rounds: int, go: str) -> None:
    while not os.path.exists(go):
        time.sleep(0.005)
    done = 0
    if kind == "sqs":
        import boto3
        sqs = boto3.client("sqs", endpoint_url=target, region_name="us-east-1", aws_access_key_id="b",
                           aws_secret_access_key="b")
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        for r in range(rounds):
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{r}-{i}"} for i in range(10)])
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if got:
                res = sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
                done += len(res["Successful"])
    else:
        with connect(target) as conn:
            repo = Repository(conn, schema)
            for r in range(rounds):
                repo.enqueue_many([JobSpec("bench", {"body": f"m{r}-{i}"}, queue) for i in range(10)])
                jobs = repo.claim("bench-direct", [queue], 10, 30.0)
                done += sum(repo.complete_many("bench-direct", [(j.id, j.lock_token) for j in jobs]).values())
    print(json.dumps({"done": done}), flush=True)


def _run(kind: str, target: str, schema: str, clients: int, rounds: int, tmp: Path) -> float:
    go = tmp / f"go-{kind}-{uuid.uuid4().hex}"
    procs = [subprocess.Popen([sys.executable, "-m", "bench.sqs_roundtrip", "--client", kind, target, schema,
                               f"{kind}-{i}", str(rounds), str(go)], stdout=subprocess.PIPE, text=True)
             for i in range(clients)]
    time.sleep(3.0)  # imports and connections before the clock starts
    started = time.monotonic()
    go.touch()
    outs = [p.communicate()[0] for p in procs]
    wall = time.monotonic() - started
    done = sum(json.loads(o.strip().splitlines()[-1])["done"] for o in outs)
    return done / wall


def _wakeups(url: str, samples: int) -> list[float]:
    import boto3
    sqs = boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="b",
                       aws_secret_access_key="b")
    queue = sqs.create_queue(QueueName="wakeup")["QueueUrl"]
    out: list[float] = []
    for _ in range(samples):
        got: list[float] = []
        waiter = threading.Thread(target=lambda: (sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=10),
                                                  got.append(time.monotonic())))
        waiter.start()
        time.sleep(0.3)
        sqs.send_message(QueueUrl=queue, MessageBody="wake")
        sent = time.monotonic()
        waiter.join()
        out.append(got[0] - sent)
        sqs.purge_queue(QueueUrl=queue)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _client(*sys.argv[2:6], int(sys.argv[6]), sys.argv[7])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--wakeups", type=int, default=30)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    dsn, schema = resolve_dsn(None), f"bench_sqs_{uuid.uuid4().hex[:8]}"
    with connect(dsn) as conn:
        Repository(conn, schema).migrate()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sqs-"))
    log = tmp / "sqs.log"
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "tenure.cli", "sqs", "--no-auth", "--bind", "127.0.0.1:0"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = ""
        while not url:
            match = re.search(r"sqs listening on (http://\S+)", log.read_text())
            url = match.group(1) if match else ""
            time.sleep(0.05)
        import boto3
        sqs: Any = boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="b",
                                aws_secret_access_key="b")
        for i in range(args.clients):
            sqs.create_queue(QueueName=f"sqs-{i}")
        for run in range(args.runs):
            direct = _run("direct", dsn, schema, args.clients, args.rounds, tmp)
            via_sqs = _run("sqs", url, schema, args.clients, args.rounds, tmp)
            print(f"run {run + 1}: direct {direct:.0f} jobs/s, sqs {via_sqs:.0f} jobs/s, "
                  f"ratio {via_sqs / direct:.2f}", flush=True)
        wakes = sorted(_wakeups(url, args.wakeups))
        print(f"long-poll wake-up after a send: p50 {statistics.median(wakes) * 1000:.1f} ms, "
              f"max {wakes[-1] * 1000:.1f} ms ({len(wakes)} samples)", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
