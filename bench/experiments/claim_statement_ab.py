"""What the hot claim statement costs, this checkout's against an older revision's (issue 38).

``python -m bench.experiments.claim_statement_ab [--before REV] [--jobs N] [--claims C]``: a fresh
database at this checkout's schema with ``N`` ready jobs (order-like payloads, analyzed), then
``C`` claims of 100 with each statement, alternating which goes first, each followed by marking
its jobs completed in place so the next claim finds fresh rows. The older ``job_claim`` comes
from ``git show REV:src/tenure/core/sql/queries/lease.sql`` (default ``6328691``, main before
flow control) and runs against the same tables (it returns one column fewer). Prints the median,
p90 and mean milliseconds of each statement as the client saw it. It measures one statement on
one connection, planning included; the drain benches (``python -m bench``) measure what a user
sees. Timings are one machine's numbers.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

BEFORE_DEFAULT = "6328691"
CLAIM_LIMIT = 100


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, start_server
    from tenure.core.queries import parse_named_queries, quote_ident
    from tenure.core.repository import Repository
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.claim_statement_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE_DEFAULT, help=f"the older revision (default {BEFORE_DEFAULT})")
    parser.add_argument("--jobs", type=int, default=200_000, help="ready jobs (default 200,000)")
    parser.add_argument("--claims", type=int, default=600, help="claims of each statement (default 600)")
    args = parser.parse_args(argv)
    if args.jobs < 2 * CLAIM_LIMIT * args.claims:
        parser.error(f"--jobs must cover every claim: at least {2 * CLAIM_LIMIT * args.claims}")
    root = Path(__file__).resolve().parents[2]
    shown = subprocess.run(["git", "-C", str(root), "show", f"{args.before}:src/tenure/core/sql/queries/lease.sql"],
                           capture_output=True, text=True)
    if shown.returncode != 0:
        parser.error(f"cannot read the older statement: {shown.stderr.strip()}")
    server = start_server(DATADIR_DEFAULT)
    dsn = server.fresh_db("bench_claim_ab")
    with psycopg.connect(dsn, autocommit=True) as conn:
        repo = Repository(conn, "tenure")
        repo.migrate()
        conn.execute("""INSERT INTO tenure.jobs (queue_name, task, payload)
                        SELECT 'default', 'noop', jsonb_build_object('i', g, 'customer_id', 'cus_' || md5(g::text),
                               'amount_cents', g %% 100000, 'currency', 'EUR')
                        FROM generate_series(1, %s) g""", (args.jobs,))
        conn.execute("ANALYZE tenure.jobs")
        statements = {"before": parse_named_queries(shown.stdout)["job_claim"][1].replace("{schema}", quote_ident("tenure")),
                      "now": repo._q["job_claim"]}
        params = {"queues": ["default"], "limit": CLAIM_LIMIT, "lease": 30.0, "worker_id": "bench", "aging": 300.0,
                  "gated": False}
        times: dict[str, list[float]] = {name: [] for name in statements}
        for k in range(args.claims):
            for name in (("before", "now") if k % 2 else ("now", "before")):
                started = time.perf_counter()
                rows = conn.execute(statements[name], params).fetchall()
                times[name].append(time.perf_counter() - started)
                if len(rows) != CLAIM_LIMIT:
                    raise SystemExit(f"{name}: claimed {len(rows)}, expected {CLAIM_LIMIT}")
                conn.execute("UPDATE tenure.jobs SET status = 'completed', completed_at = now(), lock_token = NULL, "
                             "locked_by = NULL, lease_expires_at = NULL WHERE status = 'running'")
        print(f"{args.jobs:,} jobs, {args.claims} claims of {CLAIM_LIMIT} each, alternating")
        for name, values in times.items():
            ordered = sorted(values)
            print(f"{name:>6} ({args.before if name == 'before' else 'this checkout'}): "
                  f"median {1000 * statistics.median(ordered):.2f} ms, p90 {1000 * ordered[int(0.9 * len(ordered))]:.2f} ms, "
                  f"mean {1000 * statistics.mean(ordered):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
