"""What one request costs `tenure sqs` itself: server CPU µs per request, with a client that
costs almost nothing (one raw keep-alive socket, requests built once), so the figure is the
server's alone. ``--before-src SRC`` runs a second server from another copy of the package
source (``git archive REV src | tar -x -C /tmp/before``), measured alternately in the same run.

    .venv/bin/python -m bench.experiments.sqs_server_cost --requests 2000 --runs 3 --before-src /tmp/before/src

Two requests: an empty-queue ReceiveMessage(10) (HTTP, parsing, the thread hop and one pipelined
database round trip: expiry, claim, first receives) and an unknown action (HTTP and the error
reply only, no database). The figures: docs/sqs.md, "Where the CPU goes, and why 0.5 is out of
reach beside boto3 on 2 cores". One machine's numbers (shared and noisy), never assertions.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics

import psutil

from bench.experiments.sqs_roundtrip import start_servers
from bench.server import add_before_src, processes_cpu
from tenure.core.db import connect

REQUESTS = {
    "ReceiveMessage (empty queue)": ("ReceiveMessage", {"QueueUrl": "http://x/000000000000/cost",
                                                        "MaxNumberOfMessages": 10}),
    "unknown action (no database)": ("NoSuchAction", {}),
}


def _calls(port: int, action: str, body: dict[str, object], count: int) -> None:
    """``count`` requests, one after another, on one keep-alive connection."""
    data = json.dumps(body).encode()
    request = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Amz-Target: AmazonSQS.{action}\r\n"
               f"Content-Type: application/x-amz-json-1.0\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as replies:
        for _ in range(count):
            sock.sendall(request)
            length = 0
            while (line := replies.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            replies.read(length)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.sqs_server_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    ap.add_argument("--runs", type=int, default=3)
    add_before_src(ap, "also a second `tenure sqs` from these tenure sources, measured alternately")
    args = ap.parse_args()
    dsn, schema, _, procs, urls = start_servers("bench_sqs_cost", args.before_src)
    servers = {kind: (proc, int(urls[kind].rsplit(":", 1)[1])) for kind, proc in procs.items()}
    try:
        for _, port in servers.values():
            _calls(port, "CreateQueue", {"QueueName": "cost"}, 1)
        for label, (action, body) in REQUESTS.items():
            cpu: dict[str, list[float]] = {k: [] for k in servers}
            for run in range(args.runs):
                order = list(servers) if run % 2 == 0 else list(servers)[::-1]
                for kind in order:
                    proc, port = servers[kind]
                    _calls(port, action, body, args.requests // 10)  # warm: connections, prepared statements
                    before = processes_cpu([psutil.Process(proc.pid)])
                    _calls(port, action, body, args.requests)
                    cpu[kind].append((processes_cpu([psutil.Process(proc.pid)]) - before) / args.requests * 1e6)
            print(f"{label}: " + ", ".join(
                f"{k} {statistics.median(v):.0f} µs server CPU/request (runs {', '.join(f'{x:.0f}' for x in v)})"
                for k, v in cpu.items()), flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
