"""A burst that meets workers already running: does the claim slow down until autovacuum analyzes?

``python -m bench.experiments.burst_running [--jobs N] [--runs R]``: a fresh database with tenure's schema and
no jobs, then 2 ``tenure worker --concurrency 200 --claim-batch 100`` processes (not burst mode)
that start on the empty queue and wait. Then one ``enqueue_many`` statement adds ``N`` no-op jobs
(no analyze after it), and the drain is timed from the end of that statement until no job is
left unfinished. A starting worker refreshes stale statistics itself
(``Repository.refresh_stale_claim_statistics``); this measures the other case, workers whose claim
was planned while the table was empty. Prints the drain rate and whether anything analyzed the
table during the run. The figures: docs/performance.md, "2026-12-01, afternoon: the worker's CPU
per job, a fairer probe, and the budget". Timings are one machine's numbers (the machine may be
shared and noisy).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psycopg

from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository

ANALYZED = ("SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relid = 'tenure.jobs'::regclass")


def one_run(server: object, jobs: int) -> tuple[float, bool]:
    from bench.compare import ROOT, remaining_sql
    from bench.systems import install
    dsn: str = server.fresh_db("bench_burst_running")  # type: ignore[attr-defined]
    install("tenure", dsn)
    argv = [sys.executable, "-m", "tenure.cli", "--database-url", dsn, "worker", "--app",
            "bench.apps:async_app", "--concurrency", "200", "--claim-batch", "100"]
    workers = [subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        time.sleep(3.0)  # both are serving the empty queue (their claims planned on it)
        with connect(dsn) as conn:
            Repository(conn, "tenure").enqueue_many([JobSpec("noop", {})] * jobs)
        enqueued = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as probe:
            while (row := probe.execute(remaining_sql("tenure")).fetchone()) is not None and row[0] > 0:
                time.sleep(0.05)
            drained = time.monotonic() - enqueued
            analyzed = bool((probe.execute(ANALYZED).fetchone() or (False,))[0])
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=60)
    return drained, analyzed


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, start_server
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.burst_running",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    server = start_server(DATADIR_DEFAULT)
    for i in range(args.runs):
        seconds, analyzed = one_run(server, args.jobs)
        print(f"run {i + 1}: {args.jobs:,} jobs drained {seconds:.2f} s after the enqueue "
              f"({args.jobs / seconds:,.0f}/s); table analyzed during the run: {'yes' if analyzed else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
