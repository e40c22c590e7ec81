"""Workflows drained by `tenure worker` processes, against as many independent jobs (issue 39;
docs/workflows.md "Benchmarks").

Per run, in a fresh database each, variants interleaved, every job with a user-like payload
(``bench.payloads``, default 1 KiB) and the no-op task of ``bench.apps:async_app``:

- ``independent``: ``--steps`` plain jobs (``enqueue_many``), the baseline;
- ``fan-out``: one workflow, 1 -> ``--steps`` - 2 -> 1 (the middle all depend on the first, the
  last on all the middle ones);
- ``chains``: ``--steps`` / 10 workflows of 10 steps, each step depending on the one before;
- ``chains-idle``: ``--idle-chains`` chains of 10 (default 20), fewer than the workers' slots, so a
  released step never waits behind others: its release latency is the release and the wake-up
  alone (its jobs/s is not compared: it is latency-bound).

Everything is enqueued first; then ``--workers`` `tenure worker` processes start (``--concurrency``
each) and the clock runs, from outside, until no job is waiting, pending or running (polled every
50 ms); the workers are then stopped (SIGTERM). jobs/s = steps / that time; the ratio is to
``independent`` (target >= 0.7). Release latency: for every step with deps, its start minus the
latest completion among its deps (database clock), p50 and p99.

    .venv/bin/python -m bench.experiments.workflow_drain --runs 3
    .venv/bin/python -m bench.experiments.workflow_drain --runs 1 --steps 2000   # quick

One machine's numbers (a shared 2-core machine is noisy), never assertions.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

import tenure
from bench import payloads
from bench.console import log
from bench.server import DATADIR_DEFAULT, start_server
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository, iter_batches

VARIANTS = ("independent", "fan-out", "chains", "chains-idle")
CHAIN_LENGTH = 10
_INSTALL = ("import sys; from tenure.core.db import connect; from tenure.core.repository import Repository; "
            "c = connect(sys.argv[1]); Repository(c, 'tenure').migrate(); c.close()")
_LATENCY = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) AS p99, count(*) AS n
FROM (SELECT extract(epoch FROM s.started_at - max(p.completed_at)) AS lag
      FROM tenure.workflow_deps d
      JOIN tenure.job_history s ON s.id = d.job_id JOIN tenure.job_history p ON p.id = d.dep_id
      GROUP BY s.id, s.started_at) l
"""


def enqueue(dsn: str, variant: str, steps: int, size: int) -> None:
    """Write the variant's jobs (all before any worker starts); ``steps`` is the variant's own."""
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        if variant == "independent":
            for chunk in iter_batches((JobSpec("noop", payloads.payload(i, size)) for i in range(steps)), 1000):
                repo.enqueue_many(chunk)
        elif variant == "fan-out":
            wf = tenure.Workflow("fan-out")
            first = wf.add("noop", payloads.payload(0, size), name="first")
            middle = [wf.add("noop", payloads.payload(i, size), name=f"mid-{i}", deps=[first])
                      for i in range(1, steps - 1)]
            wf.add("noop", payloads.payload(steps - 1, size), name="last", deps=middle)
            wf.enqueue(conn)
        else:  # chains, chains-idle
            for c in range(steps // CHAIN_LENGTH):
                wf = tenure.Workflow(f"chain-{c}")
                prev = None
                for k in range(CHAIN_LENGTH):
                    prev = wf.add("noop", payloads.payload(c * CHAIN_LENGTH + k, size), name=f"s{k}",
                                  deps=[prev] if prev else [])
                wf.enqueue(conn)


def drain(dsn: str, workers: int, concurrency: int) -> float:
    """Seconds from starting the workers until no job is left unfinished."""
    env = {**os.environ, "TENURE_DATABASE_URL": dsn}
    cmd = [sys.executable, "-m", "tenure", "worker", "--app", "bench.apps:async_app",
           "--concurrency", str(concurrency)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(workers)]
        try:
            while True:
                row = conn.execute("SELECT EXISTS (SELECT 1 FROM tenure.jobs "
                                   "WHERE status IN ('waiting', 'pending', 'running'))").fetchone()
                if row is not None and not row[0]:
                    break
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a worker exited during the drain")
                time.sleep(0.05)
            return time.perf_counter() - started
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.workflow_drain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--idle-chains", type=int, default=20)
    p.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    payloads.add_argument(p)
    args = p.parse_args(argv)
    server: Any = start_server(args.datadir)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    lags: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for run in range(args.runs):
        for variant in VARIANTS:
            dsn = server.fresh_db(f"bench_workflow_{variant.replace('-', '_')}")
            subprocess.run([sys.executable, "-c", _INSTALL, dsn], check=True)
            steps = args.idle_chains * CHAIN_LENGTH if variant == "chains-idle" else args.steps
            enqueue(dsn, variant, steps, args.payload_bytes)
            seconds = drain(dsn, args.workers, args.concurrency)
            rates[variant].append(steps / seconds)
            with psycopg.connect(dsn) as conn:
                row = conn.execute(_LATENCY).fetchone()
            if row is not None and row[2]:
                lags[variant].append((float(row[0]), float(row[1])))
            tail = f", release p50 {row[0] * 1000:.1f} ms p99 {row[1] * 1000:.1f} ms" if row and row[2] else ""
            log(f"  [{variant} {run + 1}/{args.runs}] {steps / seconds:,.0f} jobs/s{tail}")
    base = statistics.median(rates["independent"])
    print(f"\n### Workflow drain, {args.steps:,} steps, {args.workers} workers x {args.concurrency}, "
          f"payloads {payloads.describe(args.payload_bytes)}, {args.runs} interleaved runs\n")
    print("| variant | jobs/s median (min–max) | ÷ independent | release p50 | release p99 |\n|---|---|---|---|---|")
    for v in VARIANTS:
        r = rates[v]
        p50 = f"{statistics.median(x for x, _ in lags[v]) * 1000:.1f} ms" if lags[v] else "–"
        p99 = f"{statistics.median(y for _, y in lags[v]) * 1000:.1f} ms" if lags[v] else "–"
        ratio = "–" if v == "chains-idle" else f"{statistics.median(r) / base:.2f}×"
        print(f"| {v} | {statistics.median(r):,.0f} ({min(r):,.0f}–{max(r):,.0f}) | {ratio} | {p50} | {p99} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
