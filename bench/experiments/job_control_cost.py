"""Cost of job control (issue 14) on the claim path: priorities and the global running limit.

1. EXPLAIN (ANALYZE, BUFFERS) of one claim of 100 on a ``--explain-rows`` backlog: the claim
   before issue 14 (bench/queries.sql ``tenure_claim_before_job_control``) and the current
   ``job_claim`` with all priorities 0, with random priorities, and after the gate statement
   of a limited queue. Each runs in a transaction that is rolled back.
2. Drain (bench.runner's ``drain_run``: worker processes, timed from outside, startup
   excluded), interleaved runs of: ``before`` (the code of ``--before-src``, e.g. main's
   ``src`` from ``git archive``; skipped without it), ``plain`` (current code, priority 0, no
   limit), ``priorities`` (random priorities in [-100, 100]) and ``limit`` (a non-binding
   max_running of 100000, so every claim takes the gate lock), with the ratio to ``plain``.

    git archive main src | tar -x -C /tmp/before
    .venv/bin/python -m bench.experiments.job_control_cost --before-src /tmp/before/src --runs 3

The figures: docs/performance.md, "Job control on the claim path (issue 14)". One machine's
numbers (shared and noisy), never assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from bench.console import log
from bench.runner import drain_run
from bench.server import DATADIR_DEFAULT, add_before_src, code_env, start_server
from bench.sqlfile import bench_queries
from bench.systems import WorkerPlan, parse_plan
from tenure.core.queries import named_queries

VARIANTS = ("before", "plain", "priorities", "limit")
_INSTALL = ("import sys; from tenure.core.db import connect; from tenure.core.repository import Repository; "
            "c = connect(sys.argv[1]); Repository(c, 'tenure').migrate(); c.close()")


def prepare(server: Any, variant: str, backlog: int, before_src: Path | None) -> str:
    dsn = server.fresh_db(f"bench_jc_{variant}")
    subprocess.run([sys.executable, "-c", _INSTALL, dsn], check=True,
                   env=code_env(before_src if variant == "before" else None))
    q = bench_queries("tenure")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(q["tenure_fill_pending"], {"n": backlog})
        if variant == "priorities":
            conn.execute(q["tenure_spread_priorities"])
        if variant == "limit":
            conn.execute(q["tenure_set_limit"], {"n": 100_000})
        conn.execute(q["tenure_vacuum"])
    return dsn


def explain(server: Any, rows: int) -> dict[str, str]:
    plans: dict[str, str] = {}
    named = named_queries("tenure")
    q = bench_queries("tenure")
    params = {"queues": ["default"], "limit": 100, "lease": 30.0, "worker_id": "bench", "aging": 300.0,
              "gated": False}
    for variant in ("plain", "priorities", "limit"):
        dsn = prepare(server, variant, rows, None)
        with psycopg.connect(dsn) as conn:
            cases = [("current job_claim", named["job_claim"])]
            if variant == "plain":
                cases.insert(0, ("claim before issue 14", q["tenure_claim_before_job_control"]))
            for label, sql in cases:
                with conn.transaction(force_rollback=True):
                    if variant == "limit":  # a limited queue is claimed gated (see Repository.claim)
                        conn.execute(named["queue_claim_gate"], params)
                    out = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql,
                                       {**params, "gated": variant == "limit"}).fetchall()
                plans[f"{label}, {variant}"] = "\n".join(r[0] for r in out)
    return plans


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.job_control_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backlog", type=int, default=50_000)
    p.add_argument("--explain-rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--plan", type=parse_plan, default=WorkerPlan(2, 200, 100, "async"))
    add_before_src(p, "the tenure sources to compare against (the 'before' variant; skipped without it)")
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    p.add_argument("--skip-explain", action="store_true")
    args = p.parse_args(argv)
    server = start_server(args.datadir)
    if not args.skip_explain:
        for label, plan in explain(server, args.explain_rows).items():
            print(f"\n### EXPLAIN (ANALYZE, BUFFERS) {label}, {args.explain_rows:,} pending\n\n{plan}", flush=True)
    variants = [v for v in VARIANTS if v != "before" or args.before_src is not None]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    saved = os.environ.get("PYTHONPATH")
    for run in range(args.runs):
        for variant in variants:
            dsn = prepare(server, variant, args.backlog, args.before_src)
            if variant == "before":  # drain_run's workers inherit this environment's PYTHONPATH
                os.environ["PYTHONPATH"] = code_env(args.before_src)["PYTHONPATH"]
            try:
                r = drain_run(server, "tenure", args.plan, backlog=args.backlog, max_seconds=args.max_seconds,
                              label=f"[{variant} {run + 1}/{args.runs}] ", dsn=dsn)
            finally:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
            rates[variant].append(r.rate)
            log(f"  {variant} run {run + 1}: {r.rate:,.0f} jobs/s over {r.jobs:,} jobs")
    base = statistics.median(rates["plain"])
    print(f"\n### Drain, backlog {args.backlog:,}, plan {args.plan.describe('tenure')}, {args.runs} interleaved runs\n")
    print("| variant | jobs/s median (min–max) | ÷ plain |\n|---|---|---|")
    for v in variants:
        med = statistics.median(rates[v])
        print(f"| {v} | {med:,.0f} ({min(rates[v]):,.0f}–{max(rates[v]):,.0f}) | {med / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
