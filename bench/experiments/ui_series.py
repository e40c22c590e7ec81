"""The job browser's chart endpoints at scale (issue 36 item 5): ``GET /api/v1/series`` and
``GET /api/v1/charts`` timed from outside, as bench/experiments/ui_scale.py times the other pages.

``python -m bench.experiments.ui_series [--jobs 5000000] [--requests 30] [--schema tenure_series]``:

1. seeds (or reuses) the job browser bench's database (bench/experiments/ui_seed.py: ``--jobs``
   mostly finished jobs over 30 days, one audit trail in five) in its own schema;
2. moves the completed jobs into job_history's day partitions, where completions go since 0009
   (``history_move_batch``, as ``tenure history move`` does), and writes 8 days of depth samples
   (one per queue and minute, as the reapers would have), once;
3. starts a real ``tenure ui`` and, for each window (1h, 24h, 7d) of every queue and of the
   biggest queue, sends one warm-up and ``--requests`` timed requests of each endpoint over one
   keep-alive connection, and prints p50/p95/max (target: p95 < 300 ms).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import stats
from bench.console import log
from bench.experiments.ui_scale import HOME_DEFAULT, PAGE_TARGET_MS, UiProcess
from bench.experiments.ui_seed import DATABASE_DEFAULT, ensure_database, seed
from tenure.core.db import connect
from tenure.core.queries import quote_ident
from tenure.core.repository import Repository


def prepare(dsn: str, schema: str) -> None:
    """Completed jobs into job_history, 8 days of depth samples (both once), then VACUUM (ANALYZE): the move leaves jobs with dead tuples, which the reaper's vacuum would clear."""
    with connect(dsn, application_name="tenure-bench-series") as conn:
        repo = Repository(conn, schema)
        repo.migrate()
        after, moved, t0 = 0, 0, time.monotonic()
        while True:
            n, last = repo.history_move_batch(50_000, after_id=after)
            moved += n
            if last == after:
                break
            after = last
            if moved and moved % 500_000 < 50_000:
                log(f"  moved {moved:,} completed jobs into job_history ({time.monotonic() - t0:.0f}s)")
        s = quote_ident(schema)
        conn.execute(f"INSERT INTO {s}.queue_depth_samples (sampled_at, queue_name, ready, blocked, running) "
                     "SELECT m, q, (abs(hashtext(q || m::text)) % 2000), 0, (abs(hashtext(m::text || q)) % 60) "
                     "FROM generate_series(date_trunc('minute', now()) - interval '8 days', now(), interval '1 minute') m, "
                     "unnest(ARRAY['default', 'emails', 'reports', 'webhooks', 'legacy']) q ON CONFLICT DO NOTHING")
        for table in ("jobs", "job_history", "queue_depth_samples", "job_events"):
            conn.execute(f"VACUUM (ANALYZE) {s}.{table}")
        log(f"moved {moved:,} completed jobs into job_history; depth samples written")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.ui_series", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5_000_000)
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--schema", default="tenure_series")
    p.add_argument("--home", type=Path, default=HOME_DEFAULT)
    p.add_argument("--database-url", default=None)
    args = p.parse_args(argv)
    if args.database_url:
        dsn = args.database_url
    else:
        from tenure.core.embedded import ensure_server
        dsn = ensure_database(ensure_server(args.home / "pgdata").dsn, DATABASE_DEFAULT)
    made = seed(dsn, args.schema, args.jobs)
    log(f"jobs by status: {made.counts} (seeded now: {made.seeded_now}, {made.seconds:.0f}s)")
    prepare(dsn, args.schema)
    ui = UiProcess(dsn, args.schema)
    rows = []
    try:
        for endpoint in ("series", "charts"):
            for queue in ("", "default"):
                for window in ("1h", "24h", "7d"):
                    params = {"window": window, **({"queue": queue} if queue else {})}
                    first, status, doc = ui.get(f"/api/v1/{endpoint}", params)
                    times = [ui.get(f"/api/v1/{endpoint}", params)[0] for _ in range(args.requests)]
                    total = doc.get("totals", {}).get("completed") if isinstance(doc, dict) else None
                    p95 = stats.percentile(times, 95)
                    rows.append((f"{endpoint} window={window} queue={queue or '(all)'}", first, stats.percentile(times, 50),
                                 p95, max(times), f"HTTP {status}, {total} completed",
                                 stats.verdict(p95, PAGE_TARGET_MS, higher_is_better=False)))
                    log(f"  {rows[-1][0]}: p50 {rows[-1][2]:.1f} ms, p95 {p95:.1f} ms")
    finally:
        ui.stop()
    print(f"\nGET series/charts over {sum(made.counts.values()):,} jobs {made.counts}; "
          f"{args.requests} requests per row after one warm-up\n")
    print("| request | first ms | p50 ms | p95 ms | max ms | answer | target |\n|---|---|---|---|---|---|---|")
    for label, first, p50, p95, mx, answer, verdict in rows:
        print(f"| {label} | {first:.1f} | {p50:.1f} | {p95:.1f} | {mx:.1f} | {answer} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
