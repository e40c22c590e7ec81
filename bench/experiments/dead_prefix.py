"""What a claim costs as the rows claimed before it pile up as dead index entries ahead of it.

``python -m bench.experiments.dead_prefix [--jobs N] [--every K]``: a fresh database with ``N`` ready no-op
jobs (filled through ``enqueue_many``, then analyzed), drained by one client that claims and
completes 100 at a time with tenure's own statements. Every ``K`` jobs it prints
``EXPLAIN (ANALYZE, BUFFERS)`` figures of one claim (rolled back): buffers touched and execution
time. No vacuum runs in between unless autovacuum does, so the buffers show the index entries of
claimed rows that each claim steps over. The figures: docs/performance.md, "What would move it
further" (item 1). Timings are one machine's numbers.
"""

from __future__ import annotations

import argparse
import re
import sys

import psycopg

from tenure.core.queries import named_queries

CLAIM_PARAMS = {"queues": ["default"], "limit": 100, "lease": 30.0, "worker_id": "bench", "aging": 300.0,
                "gated": False}


def main(argv: list[str] | None = None) -> int:
    from bench.compare import prepare
    from bench.server import DATADIR_DEFAULT, start_server
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.dead_prefix",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600_000)
    parser.add_argument("--every", type=int, default=100_000)
    args = parser.parse_args(argv)
    q = named_queries("tenure")
    server = start_server(DATADIR_DEFAULT)
    dsn = prepare(server, "tenure", args.jobs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE tenure.jobs")
        done, next_report = 0, 0
        while True:
            if done >= next_report:
                conn.execute("BEGIN")
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + q["job_claim"],
                                                            CLAIM_PARAMS).fetchall())
                conn.execute("ROLLBACK")
                buffers = re.search(r"Buffers: shared hit=(\d+)", plan)
                ms = re.search(r"Execution Time: ([\d.]+) ms", plan)
                print(f"{done:>9,} claimed: {buffers.group(1) if buffers else '?':>6} buffers, "
                      f"{ms.group(1) if ms else '?'} ms per claim of 100")
                next_report += args.every
            rows = conn.execute(q["job_claim"], CLAIM_PARAMS).fetchall()
            if not rows:
                break
            conn.execute(q["job_complete_many"], {"ids": [r[0] for r in rows], "tokens": [r[7] for r in rows],
                                                  "worker_id": "bench"})
            done += len(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
