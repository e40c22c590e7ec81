"""The job browser's chart endpoints at scale (issue 36 item 5): ``GET /api/v1/series`` and
``GET /api/v1/charts`` timed from outside, as bench/experiments/ui_scale.py times the other pages.

``python -m bench.experiments.ui_series [--jobs 5000000] [--requests 30] [--schema tenure_series]
[--no-rollup | --spread-waits N]``:

1. seeds (or reuses) the job browser bench's database (bench/experiments/ui_seed.py: ``--jobs``
   mostly finished jobs over 30 days, one audit trail in five) in its own schema; the seed is
   reused as long as the schema holds it (``--schema``), so later runs skip steps 1 and 2;
2. moves the completed jobs into job_history's day partitions, where completions go since 0009
   (``history_move_batch``, as ``tenure history move`` does), and writes 8 days of depth samples
   (one per queue and minute, as the reapers would have), once;
3. fills the last 65 minutes with completions (and their audit events) like the seed's last 65
   minutes, shifted to now, where there are none yet: the seed ends when it was taken, and the
   7-day and 24-hour windows read their current bucket from the jobs;
4. rolls up every closed hour of the last 8 days and quarter hour of the last 25 hours not
   rolled up yet, as the reapers would have (``series_rollup_period``, one statement each), and
   prints what one cost; ``--no-rollup`` deletes the rollup instead, to time the windows as they
   are read before any reaper of 0016 ran. The seed's waits all fall within 5 s of 1.44 h, one
   histogram bucket: ``--spread-waits N`` spreads each rolled-up histogram over N buckets (89 ms
   to 89 s for 60) before timing, as a spread of real waits would, and deletes the rollup after;
5. starts a real ``tenure ui`` and, for each window (1h, 24h, 7d) of every queue and of the
   biggest queue, sends one warm-up and ``--requests`` timed requests of each endpoint over one
   keep-alive connection, and prints p50/p95/max (target: p95 < 300 ms) and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from bench import stats
from bench.console import log
from bench.experiments.ui_scale import HOME_DEFAULT, PAGE_TARGET_MS, UiProcess
from bench.experiments.ui_seed import DATABASE_DEFAULT, ensure_database, seed
from tenure.core.db import Connection, connect
from tenure.core.queries import quote_ident
from tenure.core.repository import Repository
from tenure.reaper.depth import ROLLUP_LAG, ROLLUP_PERIODS, DepthSampler

RECENT_SECONDS = 65 * 60
"""The span filled with completions ending now: the current hour and the one the rollup waits on."""


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


def _columns(conn: Connection, schema: str, table: str) -> list[tuple[str, bool]]:
    """``(name, is timestamptz)`` of each column of ``table``, in order."""
    rows = conn.execute("SELECT column_name AS c, data_type = 'timestamp with time zone' AS t FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall()
    return [(str(r["c"]), bool(r["t"])) for r in rows]


def fill_recent(dsn: str, schema: str, anchor: datetime) -> tuple[int, int]:
    """Copy the completions and audit events of the seed's last :data:`RECENT_SECONDS` before
    ``anchor`` to the same span before now (new ids, every time shifted), after the newest one
    already there: ``(jobs, events)`` added."""
    with connect(dsn, application_name="tenure-bench-series") as conn:
        Repository(conn, schema).history_ensure()
        s = quote_ident(schema)
        shift = "(now() - %(anchor)s::timestamptz)"
        params = {"anchor": anchor, "span": float(RECENT_SECONDS)}

        def values(table: str, skip: set[str], override: dict[str, str]) -> tuple[str, str]:
            cols = [(c, t) for c, t in _columns(conn, schema, table) if c not in skip]
            exprs = [override.get(c, f"{c} + {shift}" if t else c) for c, t in cols]
            return ", ".join(c for c, _ in cols), ", ".join(exprs)

        names, exprs = values("job_history", set(), {"id": f"nextval(pg_get_serial_sequence('{s}.jobs', 'id'))",
                                                      "idempotency_key": "NULL"})
        jobs = conn.execute(
            f"INSERT INTO {s}.job_history ({names}) SELECT {exprs} FROM {s}.job_history "
            "WHERE status = 'completed' AND completed_at >= %(anchor)s::timestamptz - make_interval(secs => %(span)s) "
            "AND completed_at < %(anchor)s::timestamptz "
            f"AND completed_at + {shift} > (SELECT greatest(max(completed_at), now() - make_interval(secs => %(span)s)) "
            f"FROM {s}.job_history WHERE completed_at > now() - make_interval(secs => %(span)s))", params).rowcount
        names, exprs = values("job_events", {"id"}, {})
        events = conn.execute(
            f"INSERT INTO {s}.job_events ({names}) SELECT {exprs} FROM {s}.job_events "
            "WHERE created_at >= %(anchor)s::timestamptz - make_interval(secs => %(span)s) AND created_at < %(anchor)s::timestamptz "
            f"AND created_at + {shift} > (SELECT greatest(max(created_at), now() - make_interval(secs => %(span)s)) "
            f"FROM {s}.job_events WHERE created_at > now() - make_interval(secs => %(span)s))", params).rowcount
        return jobs, events


def delete_rollup(dsn: str, schema: str) -> None:
    with connect(dsn, application_name="tenure-bench-series") as conn:
        conn.execute(f"DELETE FROM {quote_ident(schema)}.queue_series_rollups")


def roll_up(dsn: str, schema: str, *, spread: int = 0) -> None:
    """Roll up every closed period not rolled up yet (as the reapers would have, one statement
    each), timing each; ``spread``: then spread each histogram over that many buckets."""
    with connect(dsn, application_name="tenure-bench-series") as conn:
        repo = Repository(conn, schema)
        for seconds, keep in ROLLUP_PERIODS.items():
            times = []
            for period in repo.series_rollup_due(seconds, keep=keep, lag=ROLLUP_LAG, limit=10_000):
                t0 = time.perf_counter()
                repo.series_rollup_period(period, seconds, lag=ROLLUP_LAG)
                times.append((time.perf_counter() - t0) * 1000)
            if times:
                log(f"rolled up {len(times)} periods of {seconds} s: p50 {stats.percentile(times, 50):.1f} ms, "
                    f"p95 {stats.percentile(times, 95):.1f} ms, max {max(times):.1f} ms each")
        assert DepthSampler().roll_up(repo) == 0
        rows = conn.execute(f"SELECT seconds, count(*) AS n FROM {quote_ident(schema)}.queue_series_rollups "
                            "GROUP BY 1 ORDER BY 1").fetchall()
        log("periods rolled up: " + ", ".join(f"{r['n']} of {r['seconds']} s" for r in rows))
        if spread:
            n = conn.execute(
                f"UPDATE {quote_ident(schema)}.queue_wait_periods SET "
                "wait_buckets = ARRAY(SELECT b::smallint FROM generate_series(40, 39 + %(n)s) b), "
                "jobs = array_fill(greatest(1, (SELECT sum(x) FROM unnest(jobs) x) / %(n)s)::int, ARRAY[%(n)s::int])",
                {"n": spread}).rowcount
            log(f"spread {n:,} rolled-up wait histograms over {spread} buckets each (--spread-waits)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.ui_series", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5_000_000)
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--schema", default="tenure_series")
    p.add_argument("--home", type=Path, default=HOME_DEFAULT)
    p.add_argument("--database-url", default=None)
    p.add_argument("--no-rollup", action="store_true", help="delete the rollup before timing (default: roll up)")
    p.add_argument("--spread-waits", type=int, default=0, metavar="N",
                   help="spread each rolled-up wait histogram over N buckets, then delete the rollup (default: 0, off)")
    args = p.parse_args(argv)
    if args.database_url:
        dsn = args.database_url
    else:
        from tenure.core.embedded import ensure_server
        dsn = ensure_database(ensure_server(args.home / "pgdata").dsn, DATABASE_DEFAULT)
    made = seed(dsn, args.schema, args.jobs)
    log(f"jobs by status: {made.counts} (seeded now: {made.seeded_now}, {made.seconds:.0f}s)")
    prepare(dsn, args.schema)
    jobs, events = fill_recent(dsn, args.schema, made.anchor)
    log(f"recent completions added: {jobs:,} jobs, {events:,} events")
    if args.no_rollup:
        delete_rollup(dsn, args.schema)
        log("rollup deleted: the windows read every job (--no-rollup)")
    else:
        roll_up(dsn, args.schema, spread=args.spread_waits)
    load = os.getloadavg()
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
        if args.spread_waits:
            delete_rollup(dsn, args.schema)
    print(f"\nGET series/charts over {sum(made.counts.values()):,} jobs {made.counts}; "
          f"{args.requests} requests per row after one warm-up; {'no rollup' if args.no_rollup else f'rollup, waits spread over {args.spread_waits} buckets' if args.spread_waits else 'rollup'}; "
          f"load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores)\n")
    print("| request | first ms | p50 ms | p95 ms | max ms | answer | target |\n|---|---|---|---|---|---|---|")
    for label, first, p50, p95, mx, answer, verdict in rows:
        print(f"| {label} | {first:.1f} | {p50:.1f} | {p95:.1f} | {mx:.1f} | {answer} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
