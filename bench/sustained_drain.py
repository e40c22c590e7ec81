"""A long drain under two autovacuum cadences: does vacuuming the jobs table more often pay?

``python -m bench.sustained_drain [--jobs N] [--naptime S]...``: for each ``autovacuum_naptime``
given (default 60 s, PostgreSQL's default, and 10 s), a fresh database with ``N`` ready no-op
jobs (analyzed), drained by 2 ``tenure worker --burst --concurrency 200 --claim-batch 100``
processes. Prints the drain rate per 10 s window, overall, and how often autovacuum processed the
jobs table during the drain. Each claim steps over the index entries of rows claimed since the
last vacuum (``bench.dead_prefix``), so a longer drain between two vacuums slows down; vacuuming
more often costs CPU of its own. The naptime is a server setting: it is set with ``ALTER SYSTEM``
on the bench's own embedded server and reset afterwards. One machine's numbers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psycopg

from tenure.core.db import connect

WINDOW_SECONDS = 10.0
POLL_SECONDS = 2.0
VACUUMS = "SELECT autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relid = 'tenure.jobs'::regclass"


def drain(server: object, jobs: int, naptime: int) -> None:
    from bench.compare import ROOT, prepare, remaining_sql
    admin_dsn: str = server.fresh_db("bench_sustained_admin")  # type: ignore[attr-defined]
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"ALTER SYSTEM SET autovacuum_naptime = '{int(naptime)}s'")
        admin.execute("SELECT pg_reload_conf()")
    try:
        dsn = prepare(server, "tenure", jobs)
        with connect(dsn) as conn:
            conn.execute("ANALYZE tenure.jobs")
        argv = [sys.executable, "-m", "tenure.cli", "--database-url", dsn, "worker", "--app",
                "bench.apps:async_app", "--burst", "--concurrency", "200", "--claim-batch", "100"]
        with psycopg.connect(dsn, autocommit=True, options="-c max_parallel_workers_per_gather=0") as probe:
            v0 = probe.execute(VACUUMS).fetchone() or (0, 0)
            t0 = time.monotonic()
            workers = [subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL) for _ in range(2)]
            windows: list[float] = []
            window_start, done_at_start = t0, 0
            next_sample = t0 + POLL_SECONDS
            while any(w.poll() is None for w in workers):
                time.sleep(0.05)
                now = time.monotonic()
                if now < next_sample:
                    continue
                next_sample = now + POLL_SECONDS
                row = probe.execute(remaining_sql("tenure")).fetchone()
                done = jobs - (int(row[0]) if row else 0)
                if now - window_start >= WINDOW_SECONDS:
                    windows.append((done - done_at_start) / (now - window_start))
                    window_start, done_at_start = now, done
            elapsed = time.monotonic() - t0
            if elapsed > window_start - t0 + 0.5:  # the last, partial window
                windows.append((jobs - done_at_start) / (t0 + elapsed - window_start))
            v1 = probe.execute(VACUUMS).fetchone() or (0, 0)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM RESET autovacuum_naptime")
            admin.execute("SELECT pg_reload_conf()")
    rates = ", ".join(f"{r / 1000:.1f}k" for r in windows)
    print(f"naptime {naptime:>3} s: {jobs:,} jobs in {elapsed:.1f} s ({jobs / elapsed:,.0f}/s); "
          f"per {WINDOW_SECONDS:.0f} s window: {rates}; autovacuums of jobs during the drain: "
          f"{int(v1[0]) - int(v0[0])} (analyzes {int(v1[1]) - int(v0[1])})")


def main(argv: list[str] | None = None) -> int:
    from bench.runner import DATADIR_DEFAULT, start_server
    parser = argparse.ArgumentParser(prog="python -m bench.sustained_drain")
    parser.add_argument("--jobs", type=int, default=1_500_000)
    parser.add_argument("--naptime", type=int, action="append", help="seconds (repeatable; default 60 and 10)")
    args = parser.parse_args(argv)
    server = start_server(DATADIR_DEFAULT)
    for naptime in args.naptime or [60, 10]:
        drain(server, args.jobs, naptime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
