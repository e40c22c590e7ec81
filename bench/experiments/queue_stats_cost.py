"""Cost of the `queue_stats` query (exporter, `tenure stats`, operator scaler) at a million rows.

Starts a throw-away embedded PostgreSQL (or uses --database-url), migrates a fresh schema,
fills it with ``--rows`` jobs (mostly completed; some pending, running and failed) plus one
audit event per job, VACUUM ANALYZEs it, prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the real
named query, and times it (median of ``--repeat`` runs, warm cache). It also times the
completed-count and reaped-count parts alone, since they are the parts that grow with history.

    .venv/bin/python -m bench.experiments.queue_stats_cost            # 1,000,000 rows, median of 5
    .venv/bin/python -m bench.experiments.queue_stats_cost --rows 200000 --keep

The figures: docs/observability.md, "Cost at 1M rows". Timings are one machine's numbers, not
assertions (the machine may be shared and noisy).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tenure.core.db import connect
from tenure.core.embedded import ensure_server
from tenure.core.queries import named_queries, parse_named_queries, quote_ident
from tenure.core.repository import Repository

HERE = Path(__file__).parent


def bench_queries(schema: str) -> dict[str, str]:
    text = (HERE / "queue_stats_cost.sql").read_text(encoding="utf-8")
    return {name: sql.replace("{schema}", quote_ident(schema)) for name, (_, sql) in parse_named_queries(text).items()}


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def fmt(ms: list[float]) -> str:
    return f"median {statistics.median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f}; {len(ms)} runs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.queue_stats_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", default=None, help="use this server instead of an embedded one")
    parser.add_argument("--keep", action="store_true", help="keep the schema (and embedded server) afterwards")
    args = parser.parse_args(argv)

    home = None
    server = None
    if args.database_url:
        dsn = args.database_url
    else:
        home = Path(tempfile.mkdtemp(prefix="tenure-bench-"))
        server = ensure_server(home / "data")
        dsn = server.dsn
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    try:
        with connect(dsn, application_name="tenure-bench") as conn:
            repo = Repository(conn, schema)
            repo.migrate()
            q = bench_queries(schema)
            params = {"total": args.rows, "queues": args.queues, "pending_per_mille": 10,
                      "running_per_mille": 2, "failed_per_mille": 8, "schema_name": schema}
            started = time.perf_counter()
            conn.execute(q["bench_fill_jobs"], params)
            conn.execute(q["bench_fill_events"], params)
            conn.execute(q["bench_fill_workers"], params)
            fill = time.perf_counter() - started
            started = time.perf_counter()
            conn.execute(f"VACUUM (ANALYZE) {quote_ident(schema)}.jobs")
            conn.execute(f"VACUUM (ANALYZE) {quote_ident(schema)}.job_events")
            conn.execute(f"VACUUM (ANALYZE) {quote_ident(schema)}.workers")
            vacuum = time.perf_counter() - started
            version = conn.execute(q["bench_server_version"]).fetchone()
            counts: dict[str, int] = {str(r["status"]): int(str(r["n"]))
                                      for r in conn.execute(q["bench_status_counts"]).fetchall()}
            print(f"server: {version['version'] if version else '?'}")
            print(f"rows: {sum(counts.values()):,} jobs {counts}, {sum(counts.values()):,} job_events, "
                  f"{args.queues} queues, 50 workers; fill {fill:.1f}s, vacuum analyze {vacuum:.1f}s")

            sql = named_queries(schema)["queue_stats"]
            repo.queue_stats()  # warm the cache
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, {"queue": None}).fetchall()
            print("\nEXPLAIN (ANALYZE, BUFFERS) queue_stats:")
            for row in plan:
                print(f"  {next(iter(row.values()))}")

            scrape = timed(lambda: repo.queue_stats(completed=False), args.repeat)
            one_queue = timed(lambda: repo.queue_stats("q1", completed=False), args.repeat)
            completed = timed(repo.completed_counts, args.repeat)
            full = timed(repo.queue_stats, args.repeat)
            reaped = timed(lambda: conn.execute(q["bench_reaped_count"]).fetchall(), args.repeat)
            estimate = timed(lambda: conn.execute(q["bench_completed_estimate"], params).fetchall(), args.repeat)
            print("\ntimings (warm):")
            print(f"  per scrape: queue_stats, all queues   {fmt(scrape)}")
            print(f"  per scrape: queue_stats, one queue    {fmt(one_queue)}")
            print(f"  queue_completed_counts (once a minute) {fmt(completed)}")
            print(f"  tenure stats (both)                   {fmt(full)}")
            print(f"  reaped count part alone               {fmt(reaped)}")
            print(f"  completed estimate (pg_class)         {fmt(estimate)}")
            if not args.keep:
                conn.execute(f"DROP SCHEMA {quote_ident(schema)} CASCADE")
    finally:
        if server is not None and not args.keep:
            server.stop("fast")
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)
    if args.keep:
        print(f"\nkept schema {schema} at {dsn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
