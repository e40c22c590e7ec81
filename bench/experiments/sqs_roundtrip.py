"""`tenure sqs` against tenure's own Python API on the same database (issue 25, docs/sqs.md).

1. Throughput: ``--clients`` processes each run ``--rounds`` of SendMessageBatch(10),
   ReceiveMessage(10), DeleteMessageBatch through boto3 and a real `tenure sqs` subprocess; the
   same number of processes run the direct path (``Repository.enqueue_many`` of 10, ``claim``
   of 10, ``complete_many``), each on its own queue. Jobs/s = messages deleted / wall time,
   timed from outside the client processes (their start-up excluded: each waits for a go file).
   Each run also gives where the CPU went, in µs per job: the client processes (their own
   count from the go file on), the `tenure sqs` process and PostgreSQL's processes, over the
   same window. ``--sdk js`` (repeatable with ``--sdk boto3``) runs the SQS clients with the
   AWS SDK for JavaScript v3 instead (``bench/experiments/sqs_js``, npm-installed on first use): on 2
   cores the clients share the CPU with the server and the database, so a client's own cost
   is part of the ratio; the ``bound`` line is the ratio a server costing nothing would reach
   beside these clients.
2. Long-poll wake-up: a ReceiveMessage with WaitTimeSeconds=10 is waiting when a SendMessage
   is sent; the time from the send's return to the receive's return, ``--wakeups`` samples, p50.
3. ``--fifo-cost``: what the FIFO lane costs standard queues (issue 25: it must not slow them).
   The same SQS round trips on ``--clients`` standard queues, each run twice while as many
   neighbour clients run the same round trips on other queues of the same server and database:
   once on standard queues, once on FIFO queues (10 message groups, deduplication ids). The
   standard queues' jobs/s with FIFO neighbours over their jobs/s with standard neighbours is
   the lane's cost (1.0: none); both neighbours load the machine alike, so the CPU they take is
   not counted against the lane, and which of the two goes first alternates run by run (tables
   grow and dead index entries pile up during a run: what is measured later is slower). A standard queue's own receive never enters the FIFO lane (no
   advisory lock, no group scan): what could slow it is sharing tables and the server with FIFO
   traffic, which this measures.

    .venv/bin/python -m bench.experiments.sqs_roundtrip --clients 2 --rounds 200
    .venv/bin/python -m bench.experiments.sqs_roundtrip --clients 2 --rounds 300 --runs 4 --sdk boto3 --sdk js
    .venv/bin/python -m bench.experiments.sqs_roundtrip --clients 2 --rounds 150 --runs 4 --fifo-cost

``--before-src DIR`` adds a second `tenure sqs` from the tenure sources in ``DIR``, measured in the
same runs. The figures: docs/sqs.md, "Performance" and "Where the CPU goes, and why 0.5 is out of
reach beside boto3 on 2 cores". One machine's numbers (shared and noisy), never assertions.
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.server import add_before_src, code_env, processes_cpu
from tenure.core.db import connect, resolve_dsn
from tenure.core.repository import JobSpec, Repository

JS_CLIENT = Path(__file__).parent / "sqs_js"


def _entries(queue: str, r: int) -> list[dict[str, str]]:
    entries = [{"Id": str(i), "MessageBody": f"m{r}-{i}"} for i in range(10)]
    if queue.endswith(".fifo"):
        for i, e in enumerate(entries):
            e.update(MessageGroupId=f"g{i}", MessageDeduplicationId=f"{r}-{i}-{uuid.uuid4().hex}")
    return entries


def _client(kind: str, target: str, schema: str, queue: str, rounds: int, go: str) -> None:
    """``rounds`` round trips (0: until the file ``go``.stop exists, a neighbour's load)."""
    done = 0
    stop = f"{go}.stop"
    if kind == "sqs":
        import boto3
        sqs = boto3.client("sqs", endpoint_url=target, region_name="us-east-1", aws_access_key_id="b",
                           aws_secret_access_key="b")
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        while not os.path.exists(go):
            time.sleep(0.005)
        cpu = time.process_time()
        r = 0
        while r < rounds if rounds else not os.path.exists(stop):
            r += 1
            sqs.send_message_batch(QueueUrl=url, Entries=_entries(queue, r))
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if got:
                res = sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
                done += len(res["Successful"])
    else:
        conn = connect(target)  # open until the end: the harness reads its backend's CPU first
        repo = Repository(conn, schema)
        while not os.path.exists(go):
            time.sleep(0.005)
        cpu = time.process_time()
        for r in range(rounds):
            repo.enqueue_many([JobSpec("bench", {"body": f"m{r}-{i}"}, queue) for i in range(10)])
            jobs = repo.claim("bench-direct", [queue], 10, 30.0)
            done += sum(repo.complete_many("bench-direct", [(j.id, j.lock_token) for j in jobs]).values())
    print(json.dumps({"done": done, "cpu": time.process_time() - cpu}), flush=True)
    while not os.path.exists(stop):  # connections stay open until the CPU of their backends is read
        time.sleep(0.005)
    if kind != "sqs":
        conn.close()


def _js_sdk() -> None:
    """``@aws-sdk/client-sqs`` in bench/experiments/sqs_js/node_modules (npm install on first use)."""
    if (JS_CLIENT / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        return
    out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_CLIENT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"npm install @aws-sdk/client-sqs failed: {(out.stderr or out.stdout).strip()[-300:]}")


def _spawn(kind: str, target: str, schema: str, queue: str, rounds: int, go: Path,
           sdk: str = "boto3") -> subprocess.Popen[str]:
    if kind == "sqs" and sdk == "js":
        return subprocess.Popen(["node", str(JS_CLIENT / "roundtrip.mjs"), target, queue, str(rounds), str(go)],
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "NODE_NO_WARNINGS": "1"})  # the SDK's Node 22 notice
    return subprocess.Popen([sys.executable, "-m", "bench.experiments.sqs_roundtrip", "--client", kind, target, schema, queue,
                             str(rounds), str(go)], stdout=subprocess.PIPE, text=True)


@dataclass(frozen=True)
class Rate:
    """One variant's run: jobs/s, and CPU µs per job of its clients, the server and PostgreSQL."""

    jobs_s: float
    clients_us: float
    server_us: float
    postgres_us: float

    @property
    def total_us(self) -> float:
        return self.clients_us + self.server_us + self.postgres_us

    def cpu(self) -> str:
        server = f", server {self.server_us:.0f}" if self.server_us else ""
        return (f"µs/job: clients {self.clients_us:.0f}{server}, postgres {self.postgres_us:.0f}, "
                f"total {self.total_us:.0f}")


def _line(proc: subprocess.Popen[str]) -> str:
    """A client's one result line (it then waits for the stop file before it exits)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a client exited without a result (exit code {proc.wait()})")
    return line


def _postgres_cpu() -> dict[int, float]:
    """CPU seconds of each PostgreSQL process now, by pid."""
    found = {}
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "postgres":
            found[proc.pid] = processes_cpu([proc])
    return found


def _postgres_spent(before: dict[int, float]) -> float:
    """PostgreSQL's CPU seconds since ``before``: the processes alive now (one started since
    counts whole); one that exited in between (an autovacuum worker) is not counted."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in _postgres_cpu().items())


def _run(kind: str, target: str, schema: str, clients: int, rounds: int, tmp: Path,
         neighbours: Sequence[str] = (), prefix: str | None = None, sdk: str = "boto3",
         server: psutil.Process | None = None) -> Rate:
    """Jobs/s of ``clients`` processes on queues ``{prefix or kind}-i``, while SQS clients run on
    the ``neighbours`` queues (until the measured ones finish), and the CPU it took."""
    go = tmp / f"go-{kind}-{uuid.uuid4().hex}"
    procs = [_spawn(kind, target, schema, f"{prefix or kind}-{i}", rounds, go, sdk) for i in range(clients)]
    others = [_spawn("sqs", target, schema, queue, 0, go) for queue in neighbours]
    time.sleep(3.0 + 0.5 * len(others))  # imports and connections before the clock starts
    postgres = _postgres_cpu()
    server_cpu = processes_cpu([server] if server else [])
    started = time.monotonic()
    go.touch()
    outs = [_line(p) for p in procs]
    wall = time.monotonic() - started
    postgres_spent = _postgres_spent(postgres)
    server_spent = processes_cpu([server] if server else []) - server_cpu
    Path(f"{go}.stop").touch()
    for p in procs:
        p.communicate()
    neighbours_done = sum(json.loads(p.communicate()[0].strip().splitlines()[-1])["done"] for p in others)
    if others and not neighbours_done:
        raise RuntimeError("the neighbour clients deleted nothing")
    results = [json.loads(o) for o in outs]
    done = sum(r["done"] for r in results)
    per_job = 1e6 / max(done, 1)
    return Rate(done / wall, sum(r["cpu"] for r in results) * per_job, server_spent * per_job,
                postgres_spent * per_job)


def _fifo_cost(url: str, schema: str, args: argparse.Namespace, tmp: Path, sqs: Any) -> None:
    """Standard queues' jobs/s with standard neighbours, then with FIFO neighbours, per run."""
    standard = [f"nb-{i}" for i in range(args.clients)]
    fifo = [f"nb-{i}.fifo" for i in range(args.clients)]
    for name in [*standard, *fifo]:
        sqs.create_queue(QueueName=name)
    ratios = []
    for run in range(args.runs):
        pair = [("standard", standard), ("fifo", fifo)]
        rates = {name: _run("sqs", url, schema, args.clients, args.rounds, tmp, queues).jobs_s
                 for name, queues in (pair if run % 2 == 0 else pair[::-1])}  # alternate which goes first
        with_standard, with_fifo = rates["standard"], rates["fifo"]
        ratios.append(with_fifo / with_standard)
        print(f"fifo-cost run {run + 1}: standard queues {with_standard:.0f} jobs/s beside standard neighbours, "
              f"{with_fifo:.0f} jobs/s beside FIFO neighbours, ratio {ratios[-1]:.2f}", flush=True)
    print(f"fifo-cost: median ratio {statistics.median(ratios):.2f} over {len(ratios)} runs (1.00: no cost)",
          flush=True)


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
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.sqs_roundtrip", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--wakeups", type=int, default=30)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--fifo-cost", action="store_true", help="instead: the FIFO lane's cost to standard queues")
    add_before_src(ap, "also a second `tenure sqs` from these tenure sources (the code before a change), "
                       "measured in the same runs")
    ap.add_argument("--sdk", action="append", choices=("boto3", "js"),
                    help="the SQS clients: boto3 (the default) or the AWS SDK for JavaScript v3; repeat for both")
    args = ap.parse_args()
    sdks = args.sdk or ["boto3"]
    if "js" in sdks:
        _js_sdk()
    dsn, schema, tmp, servers, urls = start_servers("bench_sqs", args.before_src)
    try:
        url = urls["sqs"]
        import boto3
        sqs: Any = boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="b",
                                aws_secret_access_key="b")
        variants = {(server if sdk == "boto3" else f"{server}-{sdk}"): (server, sdk) for server in urls for sdk in sdks}
        for variant in variants:
            for i in range(args.clients):
                sqs.create_queue(QueueName=f"{variant}-{i}")
        if args.fifo_cost:
            _fifo_cost(url, schema, args, tmp, sqs)
            return
        kinds = ["direct", *variants]
        ratios: dict[str, list[float]] = {k: [] for k in variants}
        bounds: dict[str, list[float]] = {k: [] for k in variants}
        for run in range(args.runs):
            order = kinds[run % len(kinds):] + kinds[:run % len(kinds)]  # rotated: no variant always first
            rates = {k: (_run("direct", dsn, schema, args.clients, args.rounds, tmp, prefix=k) if k == "direct" else
                         _run("sqs", urls[variants[k][0]], schema, args.clients, args.rounds, tmp, prefix=k,
                              sdk=variants[k][1], server=psutil.Process(servers[variants[k][0]].pid)))
                     for k in order}
            direct = rates["direct"]
            for k in variants:
                ratios[k].append(rates[k].jobs_s / direct.jobs_s)
                bounds[k].append(direct.total_us / (rates[k].clients_us + rates[k].postgres_us))
            print(f"run {run + 1}: direct {direct.jobs_s:.0f} jobs/s ({direct.cpu()})", flush=True)
            for k in variants:
                print(f"  {k} {rates[k].jobs_s:.0f} jobs/s, ratio {ratios[k][-1]:.2f} ({rates[k].cpu()}); "
                      f"bound {bounds[k][-1]:.2f}", flush=True)
        if args.runs > 1:
            print("median ratio: " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in ratios.items()),
                  flush=True)
            print("median bound (a server costing nothing, beside these clients): "
                  + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in bounds.items()), flush=True)
        if args.wakeups:
            wakes = sorted(_wakeups(url, args.wakeups))
            print(f"long-poll wake-up after a send: p50 {statistics.median(wakes) * 1000:.1f} ms, "
                  f"max {wakes[-1] * 1000:.1f} ms ({len(wakes)} samples)", flush=True)
    finally:
        for server in servers.values():
            server.terminate()
            server.wait(timeout=10)
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_servers(prefix: str, before_src: Path | None) -> tuple[
        str, str, Path, dict[str, subprocess.Popen[bytes]], dict[str, str]]:
    """A fresh schema ``PREFIX_xxxxxxxx`` on the default database, and a `tenure sqs` on it
    (``sqs``), plus one from ``before_src`` (``sqs-before``): dsn, schema, a temporary
    directory, the server processes and their URLs."""
    dsn, schema = resolve_dsn(None), f"{prefix}_{uuid.uuid4().hex[:8]}"
    with connect(dsn) as conn:
        Repository(conn, schema).migrate()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sqs-"))
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    servers = {"sqs": _server(env, tmp / "sqs.log")}
    if before_src is not None:
        servers["sqs-before"] = _server(code_env(before_src, base=env), tmp / "before.log")
    urls = {kind: _url(proc, tmp / ("sqs.log" if kind == "sqs" else "before.log")) for kind, proc in servers.items()}
    return dsn, schema, tmp, servers, urls


def _server(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "tenure.cli", "sqs", "--no-auth", "--bind", "127.0.0.1:0"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def _url(server: subprocess.Popen[bytes], log: Path) -> str:
    while server.poll() is None:
        match = re.search(r"sqs listening on (http://\S+)", log.read_text())
        if match:
            return match.group(1)
        time.sleep(0.05)
    raise RuntimeError(f"tenure sqs exited: {log.read_text()[-2000:]}")

if __name__ == "__main__":
    main()
