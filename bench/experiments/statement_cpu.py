"""Backend CPU per job of the claim and completion statements, and of variants of them.

``python -m bench.experiments.statement_cpu [VARIANTS.sql] [--rounds N]``: a fresh database with 120k ready
jobs, 400 of them held (two workers at concurrency 200), then N rounds that claim 100 and
complete 100 with every statement named ``*claim*`` / ``*complete*`` in VARIANTS.sql (same
format as src/tenure/core/sql/queries/*.sql; ``setup_*`` statements run once first) next to tenure's own. The figure is
the backend process's own CPU time (psutil on ``pg_backend_pid()``, 10 ms ticks, hence summed
over all rounds) divided by the jobs: independent of client-side noise, not of other load.
The variants used for docs/performance.md are in bench/experiments/variants/; the figures are in
its "After job control (issue 14)", "Changes over time" and "2026-12-01, afternoon" sections.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import psutil
import psycopg
from psycopg.rows import dict_row

from tenure.core.queries import named_queries, parse_named_queries


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, start_server
    from bench.systems import fill, install
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.statement_cpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="?", type=Path,
                        help="statements to measure next to tenure's "
                             "(e.g. bench/experiments/variants/complete_any.sql)")
    parser.add_argument("--rounds", type=int, default=80)
    args = parser.parse_args(argv)
    server = start_server(DATADIR_DEFAULT)
    dsn = server.fresh_db("bench_statement_cpu")
    install("tenure", dsn)
    fill("tenure", dsn, 120_000, fast=True)
    q = named_queries("tenure")
    extra = {}
    if args.variants:
        extra = {n: sql.replace("{schema}", '"tenure"')
                 for n, (_, sql) in parse_named_queries(args.variants.read_text()).items()}
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)
    for name in [n for n in extra if n.startswith("setup_")]:
        conn.execute(extra.pop(name))
    conn.execute("CHECKPOINT")
    row = conn.execute("SELECT pg_backend_pid() AS p").fetchone()
    assert row is not None
    backend = psutil.Process(int(row["p"]))

    def cpu() -> float:
        t = backend.cpu_times()
        return float(t.user + t.system)

    claim_p = {"queues": ["default"], "limit": 100, "lease": 30.0, "worker_id": "w1", "aging": 300.0, "gated": False}
    every = {**q, **extra}
    claims = [n for n in ["job_claim", *extra] if "claim" in n]
    completes = [n for n in ["job_complete_many", *extra] if "complete" in n]
    held = [conn.execute(q["job_claim"], claim_p, prepare=True).fetchall() for _ in range(4)]
    spent = {n: [0.0, 0] for n in claims + completes}
    for _ in range(args.rounds):
        for i in range(max(len(claims), len(completes))):
            name = claims[i % len(claims)]
            c0 = cpu()
            rows = conn.execute(every[name], claim_p, prepare=True).fetchall()
            spent[name][0] += cpu() - c0
            spent[name][1] += len(rows)
            held.append(rows)
        for name in completes:
            rows = held.pop(0)
            params = {"ids": [r["id"] for r in rows], "tokens": [r["lock_token"] for r in rows], "worker_id": "w1"}
            c0 = cpu()
            out = conn.execute(every[name], params, prepare=True).fetchall()
            spent[name][0] += cpu() - c0
            spent[name][1] += len(rows)
            if not all(r["accepted"] for r in out):
                raise RuntimeError(f"{name} rejected a current token")
    for name, (seconds, jobs) in spent.items():
        print(f"{name:32s} backend CPU per job: {seconds / jobs * 1e6:6.1f} µs over {jobs:,} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
