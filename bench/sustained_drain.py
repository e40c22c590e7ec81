"""Long drains: does a queue slow down as it works through a large backlog?

One traced drain (``traced_drain``) serves two entry points:

- ``python -m bench --scenario sustained [--sustained-jobs N]``: tenure and pgqueuer, each on a
  fresh database holding the identical backlog (default 1.5M no-op jobs with ``--payload-bytes``
  payloads, enqueued through each system's own batch API, then ``CHECKPOINT`` and ``ANALYZE``),
  drained by the ``compare`` scenario's best contenders (2 × ``tenure worker --burst
  --concurrency 200 --claim-batch 100``; 2 × pgqueuer drain mode, batch 100) on the server's
  defaults. Reports the rate per 10 s window, from the first finished job to the last, over the
  first and the last 10 % of the jobs and their ratio ("flatness", target ≥ 0.8), the end-to-end
  rate and the tenure ÷ pgqueuer ratio of the whole-drain rates (target ≥ 2.0).
- ``python -m bench.sustained_drain [--jobs N] [--naptime S]... [--payload-bytes N]``: tenure
  alone, once per ``autovacuum_naptime`` given (default 60 s, PostgreSQL's default, and 10 s).
  Each claim steps over the index entries of rows claimed since the last vacuum
  (``bench.experiments.dead_prefix``), so a longer drain between two vacuums slows down; vacuuming more often
  costs CPU of its own. The naptime is a server setting: it is set with ``ALTER SYSTEM`` on the
  bench's own embedded server and reset afterwards.

Progress is the remaining count polled from the database (``compare.remaining_sql``, pending +
running for tenure), at most every ``POLL_FLOOR`` seconds or ``POLL_COST_FACTOR`` times the last
count's own duration, whichever is longer; a rate between two job counts interpolates the moments
between polls, and every rate starts at the first poll that saw finished jobs (start-up left
out). The count scans what is left (≈ 300 ms at 1.5M jobs, a few ms near the end), so the probe
takes up to ≈ 9 % of one core at the start of a drain and almost nothing at its end: flatness is,
if anything, flattered by a few per cent. One machine's numbers.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from bench import payloads, stats
from bench.compare import CONTENDERS, compile_sources, prepare, run_one
from bench.console import log
from bench.payloads import describe
from bench.sqlfile import bench_queries

WINDOW_SECONDS = 10.0
POLL_FLOOR = 0.2
POLL_COST_FACTOR = 10.0
FRACTION = 0.1
FULL_JOBS = 1_500_000
HELD_SAMPLE_SECONDS = 0.5
QUICK_JOBS = 200_000
TABLES = {"tenure": "tenure.jobs", "pgqueuer": "pgqueuer"}


@dataclass
class SustainedResult:
    key: str
    jobs: int
    shape: stats.DrainShape
    e2e_rate: float
    e2e_seconds: float
    steady_rate: float
    """The compare scenario's steady rate (10 % → 90 % of the jobs)."""
    worker_cpu_per_job_us: float
    db_cpu_per_job_us: float
    autovacuums: int
    autoanalyzes: int
    client_vacuums: int
    """VACUUMs a client ran (tenure's workers vacuum the jobs table, reaper/vacuum.py)."""
    samples: list[tuple[float, int]]
    held_max: int | None = None
    """tenure: the most jobs one worker held at a sample (running in the database: handlers in
    flight plus finished jobs whose outcome is not yet written), against its concurrency."""
    completion_calls: int | None = None
    completion_max_ms: float | None = None
    """tenure: calls of the completion statement and its longest one (pg_stat_statements)."""
    slowest: list[dict[str, Any]] = field(default_factory=list)
    """The statements with the longest single call during the drain."""
    budget: list[dict[str, Any]] = field(default_factory=list)
    """The statements that took the most time in total during the drain (with their calls)."""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shape"] = self.shape.as_dict()
        return out


def _vacuums(dsn: str, system: str) -> tuple[int, int, int]:
    """(autovacuums, autoanalyzes, client vacuums) of the system's table so far."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(bench_queries()["table_vacuums"], {"rel": TABLES[system]}).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def traced_drain(server: Any, key: str, jobs: int, *, payload_bytes: int = 0) -> SustainedResult:
    """Fill a fresh database with ``jobs`` no-op jobs (``payload_bytes`` payloads), analyze it,
    drain it with the ``compare`` contender ``key`` and trace the remaining count all the way."""
    c = CONTENDERS[key]
    log(f"    [sustained] {key}: filling {jobs:,} jobs, {describe(payload_bytes)}")
    dsn = prepare(server, c.system, jobs, payload_bytes=payload_bytes)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(bench_queries()["db_analyze"])
    v0 = _vacuums(dsn, c.system)
    q = bench_queries()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(q["statements_reset"])
    log(f"    [sustained] {key}: draining with {c.describe}")
    held = _HeldSampler(dsn) if c.system == "tenure" else None
    try:
        r = run_one(server, c, jobs, dsn=dsn, trace=True, poll_floor=POLL_FLOOR, poll_cost_factor=POLL_COST_FACTOR,
                    poll_share=0.0, timeout=max(600.0, jobs / 500))
    finally:
        if held is not None:
            held.stop()
    v1 = _vacuums(dsn, c.system)
    samples: list[tuple[float, int]] = r.extra["samples"]
    shape = stats.drain_shape(samples, jobs, window=WINDOW_SECONDS, fraction=FRACTION)
    result = SustainedResult(key, jobs, shape, r.e2e_rate, r.e2e_seconds, r.steady_rate, r.worker_cpu_per_job_us,
                             r.db_cpu_per_job_us, v1[0] - v0[0], v1[1] - v0[1], v1[2] - v0[2], samples)
    with psycopg.connect(dsn, autocommit=True) as conn:
        statements = [dict(zip(("calls", "total_ms", "mean_ms", "max_ms", "query"), row))
                      for row in conn.execute(q["statements_top"]).fetchall()]
        result.slowest = sorted(statements, key=lambda s: -s["max_ms"])[:5]
        result.budget = sorted(statements, key=lambda s: -s["total_ms"])[:6]
        if c.system == "tenure":
            row = conn.execute(q["tenure_completion_longest"], {}).fetchone()
            if row is not None:
                result.completion_calls, result.completion_max_ms = int(row[0]), float(row[1])
    if held is not None:
        result.held_max = held.most
    return result


class _HeldSampler:
    """Samples, every ``HELD_SAMPLE_SECONDS`` on its own connection, the most jobs any one tenure
    worker holds (``tenure_held_per_worker``): a worker claims only while its jobs in flight plus
    its unwritten outcomes stay under its concurrency, and both are still ``running`` rows, so
    this is that bound seen from outside. One cheap scan of the running rows per sample."""

    def __init__(self, dsn: str) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._thread = threading.Thread(target=self._run, name="held-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sql = bench_queries()["tenure_held_per_worker"]
        while not self._stop.wait(HELD_SAMPLE_SECONDS):
            row = self._conn.execute(sql).fetchone()
            self.most = max(self.most, int(row[0]) if row else 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._conn.close()


def _windows(shape: stats.DrainShape) -> str:
    return ", ".join(stats.fmt_num(rate) + (f" ({secs:.0f} s)" if secs < WINDOW_SECONDS - 0.5 else "")
                     for secs, rate in shape.windows)


def scenario_sustained(server: Any, args: Any, rep: Any) -> None:
    """tenure and pgqueuer drain the same large backlog (see the module docstring)."""
    compile_sources()
    jobs = args.sustained_jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    keys = [k for k in ("tenure", "pgqueuer") if k in args.systems]
    results: dict[str, SustainedResult] = {}
    for key in keys:
        r = traced_drain(server, key, jobs, payload_bytes=args.payload_bytes)
        results[key] = r
        log(f"  [sustained] {key}: {stats.fmt_num(r.shape.whole, '/s')} first → last job, first 10 % "
            f"{stats.fmt_num(r.shape.first, '/s')}, last 10 % {stats.fmt_num(r.shape.last, '/s')}, flatness "
            f"{stats.fmt_ratio(r.shape.flatness)}; per {WINDOW_SECONDS:.0f} s: {_windows(r.shape)}; "
            f"autovacuums {r.autovacuums}, client vacuums {r.client_vacuums}")
    rows = []
    for key, r in results.items():
        s = r.shape
        rows.append([key, CONTENDERS[key].describe, stats.fmt_num(s.whole, "/s"), stats.fmt_num(r.e2e_rate, "/s"),
                     stats.fmt_num(s.first, "/s"), stats.fmt_num(s.last, "/s"),
                     f"{stats.fmt_ratio(s.flatness)} {stats.verdict(s.flatness, 0.8, True)}",
                     f"{r.worker_cpu_per_job_us:.0f} + {r.db_cpu_per_job_us:.0f} µs",
                     f"{r.autovacuums} / {r.autoanalyzes} / {r.client_vacuums}",
                     "–" if r.completion_max_ms is None else f"{r.completion_max_ms:,.0f} ms ({r.completion_calls:,} calls)",
                     "–" if r.held_max is None else str(r.held_max)])
    text = stats.table(["system", "config", "first → last job", "end to end", "first 10 %", "last 10 %",
                        "last ÷ first (≥ 0.80)", "CPU/job worker + DB", "autovacuums / analyzes / client vacuums",
                        "longest completion (< 1,000 ms)", "most held by one worker (≤ concurrency)"], rows)
    text += "".join(f"\n\n{key} per {WINDOW_SECONDS:.0f} s window: {_windows(r.shape)}" for key, r in results.items())
    for key, r in results.items():
        text += f"\n\n{key}: the longest single calls\n" + "\n".join(
            f"- {s['max_ms']:,.1f} ms (mean {s['mean_ms']:,.2f} ms, {s['calls']:,} calls): {s['query']}" for s in r.slowest)
        text += f"\n\n{key}: database time per job, statement by statement (pg_stat_statements)\n" + "\n".join(
            f"- {1000 * s['total_ms'] / r.jobs:,.1f} µs per job ({s['calls']:,} calls, mean {s['mean_ms']:,.3f} ms): "
            f"{s['query']}" for s in r.budget)
    ratio = None
    if "tenure" in results and "pgqueuer" in results:
        a, b = results["tenure"].shape.whole, results["pgqueuer"].shape.whole
        ratio = a / b if a and b else None
        text += (f"\n\ntenure ÷ pgqueuer, first → last job: {stats.fmt_ratio(ratio)} "
                 f"(target ≥ 2.00: {stats.verdict(ratio, 2.0, True)})")
    rep.data["sustained"] = {"jobs": jobs, "payload_bytes": args.payload_bytes, "window_seconds": WINDOW_SECONDS,
                             "fraction": FRACTION, "tenure_over_pgqueuer": ratio,
                             "systems": {k: r.as_dict() for k, r in results.items()}}
    rep.add(f"Sustained drain of {jobs:,} no-op jobs, {describe(args.payload_bytes)}, PostgreSQL defaults, "
            "one run each", text)


def drain(server: Any, jobs: int, naptime: int, payload_bytes: int = 0) -> None:
    """tenure alone under one ``autovacuum_naptime`` (``python -m bench.sustained_drain``)."""
    admin_dsn: str = server.fresh_db("bench_sustained_admin")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"ALTER SYSTEM SET autovacuum_naptime = '{int(naptime)}s'")
        admin.execute("SELECT pg_reload_conf()")
    try:
        r = traced_drain(server, "tenure", jobs, payload_bytes=payload_bytes)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM RESET autovacuum_naptime")
            admin.execute("SELECT pg_reload_conf()")
    print(f"naptime {naptime:>3} s, {describe(payload_bytes)}: {jobs:,} jobs in {r.e2e_seconds:.1f} s "
          f"({r.e2e_rate:,.0f}/s end to end, "
          f"{stats.fmt_num(r.shape.whole, '/s')} first → last job); per {WINDOW_SECONDS:.0f} s window: "
          f"{_windows(r.shape)}; flatness {stats.fmt_ratio(r.shape.flatness)}; autovacuums of jobs during the "
          f"drain: {r.autovacuums} (analyzes {r.autoanalyzes}; client vacuums {r.client_vacuums})")


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, start_server
    parser = argparse.ArgumentParser(prog="python -m bench.sustained_drain")
    parser.add_argument("--jobs", type=int, default=FULL_JOBS)
    parser.add_argument("--naptime", type=int, action="append", help="seconds (repeatable; default 60 and 10)")
    payloads.add_argument(parser)
    args = parser.parse_args(argv)
    server = start_server(DATADIR_DEFAULT)
    for naptime in args.naptime or [60, 10]:
        drain(server, args.jobs, naptime, args.payload_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
