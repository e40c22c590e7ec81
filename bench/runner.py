"""The benchmark runner: ``python -m bench [--quick] [--scenario NAME]... [--runs N]``.

Starts its own embedded PostgreSQL 18 (default durability: fsync and synchronous_commit on;
pg_stat_statements preloaded for the heartbeat scenario), runs every system in the same run,
interleaved (A B C A B C …) on identical backlogs (job payloads of ``--payload-bytes``, default
about 100 bytes of JSON, the same bytes for every system: bench/payloads.py), each in a fresh
database, prints a table (median and min–max of the runs, tenure/peer ratio, peak worker RSS)
and writes JSON to bench/results/. Limits: a 2-core shared machine is noisy; figures are indicative, compare only
within one run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import payloads, stats
from bench.compare import CONTENDERS, scenario_compare
from bench.console import log
from bench.fairness import scenario_fairness
from bench.flow import scenario_flow
from bench.flow_keys import scenario_flow_keys
from bench.flow_rate import scenario_rate
from bench.payloads import describe
from bench.server import DATADIR_DEFAULT, Server, add_before_src, processes_cpu, start_server
from bench.sqlfile import FLOOR_SCRIPT, bench_queries
from bench.sustained_drain import scenario_sustained
from bench.systems import (
    BEST_DRAIN,
    SYSTEMS,
    Progress,
    WorkerPlan,
    bulk_insert,
    fill,
    install,
    parse_plan,
    producer_cmd,
    worker_cmd,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCENARIOS = ("compare", "floor", "sweep", "drain", "latency", "reaper", "scale", "heartbeat", "rss", "sustained",
             "flow", "flow-keys", "fairness", "rate")
LONG_SCENARIOS = ("sustained", "flow", "flow-keys", "fairness", "rate")
"""Run only when named with --scenario (tens of minutes at full size)."""
POLL = 0.05


# -- processes --------------------------------------------------------------------------------
class Procs:
    """Worker subprocesses with RSS sampling and a graceful stop."""

    @staticmethod
    def env() -> dict[str, str]:
        """The bench's environment for its subprocesses: this checkout first on the path."""
        return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def __init__(self, cmds: list[list[str]]) -> None:
        env = self.env()
        self.procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True) for c in cmds]
        self.ps = [psutil.Process(p.pid) for p in self.procs]
        self.peak_rss = 0

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            assert p.stdout is not None
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"worker exited early: {p.stderr.read() if p.stderr else ''}")
                line = p.stdout.readline()
                if "READY" in line:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("worker did not become ready")

    def sample(self) -> None:
        for ps in self.ps:
            try:
                self.peak_rss = max(self.peak_rss, ps.memory_info().rss)
            except psutil.Error:
                pass

    def cpu(self) -> float:
        return processes_cpu(self.ps)

    def stop(self, timeout: float = 20.0) -> list[str]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        errors = []
        for p in self.procs:
            try:
                _, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode not in (0, -signal.SIGTERM) and err:
                errors.append(err[-800:])
        return errors


# -- one drain run ----------------------------------------------------------------------------
@dataclass
class DrainResult:
    jobs: int
    seconds: float
    rate: float
    peak_rss_mb: float
    worker_cpu_s: float
    db_cpu_s: float


def drain_run(server: Server, system: str, plan: WorkerPlan, *, backlog: int, target: int | None = None,
              max_seconds: float = 60.0, label: str = "", dsn: str | None = None,
              fast_fill: bool = False, payload_bytes: int = 0) -> DrainResult:
    """Fill a backlog (``payload_bytes`` payloads), start the workers, measure from the first
    finished job until ``target`` jobs (default: all) are done or ``max_seconds`` pass; startup
    is excluded."""
    target = target or backlog
    if dsn is None:
        dsn = server.fresh_db(f"bench_{system}")
        install(system, dsn)
        fill(system, dsn, backlog, fast=fast_fill, payload_bytes=payload_bytes)
    prog = Progress(system, dsn, backlog)
    procs = Procs([worker_cmd(system, dsn, plan) for _ in range(plan.processes)])
    t_first: float | None = None
    done_first = 0
    done = 0
    last_print = time.monotonic()
    try:
        procs.wait_ready()
        start_wait = time.monotonic()
        cpu0 = db0 = 0.0
        while True:
            procs.sample()
            done = prog.done()
            now = time.monotonic()
            if t_first is None:
                if done > 0:
                    t_first, done_first = now, done
                    cpu0, db0 = procs.cpu(), server.backend_cpu()
                elif now - start_wait > 30:
                    raise RuntimeError(f"{system}: no job finished within 30 s")
            elif done >= target or now - t_first > max_seconds:
                break
            if now - last_print > 2:
                log(f"    {label}{system}: {done:,}/{target:,} done")
                last_print = now
            time.sleep(POLL)
        t_end = time.monotonic()
        cpu1, db1 = procs.cpu(), server.backend_cpu()
    finally:
        errors = procs.stop()
        prog.close()
    for e in errors:
        log(f"    {system} worker stderr: {e.strip()[-400:]}")
    assert t_first is not None
    jobs = min(done, target) - done_first
    secs = t_end - t_first
    return DrainResult(jobs, secs, stats.throughput(jobs, secs), procs.peak_rss / 2**20,
                       cpu1 - cpu0, db1 - db0)


# -- scenarios --------------------------------------------------------------------------------
@dataclass
class Report:
    sections: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, title: str, text: str) -> None:
        block = f"\n## {title}\n{text}"
        self.sections.append(block)
        print(block, flush=True)


def scenario_floor(server: Server, args: argparse.Namespace, rep: Report) -> None:
    """pgbench with the least leased-queue SQL: claim N (SKIP LOCKED) + complete by token."""
    from tenure.core.embedded import bin_dir
    dsn = server.fresh_db("bench_floor")
    q = bench_queries()
    out: dict[str, Any] = {}
    rows = []
    for batch, n in ((1, 2_000 if args.quick else 6_000), (100, 50_000 if args.quick else 200_000)):
        rates = []
        for run in range(args.runs):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(q["floor_create"])
                bulk_insert(conn, "floor_fill", n, args.payload_bytes)
                conn.execute(q["floor_vacuum"])
            clients = 2
            per_client = n // (batch * clients)
            cmd = [str(bin_dir() / "pgbench"), "-n", "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres",
                   "-c", str(clients), "-j", str(clients), "-t", str(per_client), "-D", f"batch={batch}",
                   "-f", str(FLOOR_SCRIPT), "bench_floor"]
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.monotonic() - t0
            if res.returncode != 0:
                raise RuntimeError(f"pgbench failed: {res.stderr[-800:]}")
            with psycopg.connect(dsn, autocommit=True) as conn:
                left = conn.execute(q["floor_remaining"]).fetchone()
            if left and left[0]:
                raise RuntimeError(f"pgbench floor left {left[0]} jobs (script did not complete by token)")
            tps = next((float(line.split("=")[1].split()[0]) for line in res.stdout.splitlines()
                        if line.startswith("tps")), 0.0)
            rates.append(tps * batch)
            log(f"    floor batch {batch} run {run + 1}: {tps * batch:,.0f} jobs/s (wall {wall:.1f}s)")
        s = stats.summarize(rates)
        out[f"batch_{batch}"] = s.as_dict() if s else None
        rows.append([f"batch {batch}", f"{n:,}", stats.fmt_summary(s, "/s")])
    rep.data["floor"] = out
    rep.add(f"SQL floor (pgbench, 2 clients, claim SKIP LOCKED + complete by token, {describe(args.payload_bytes)})",
            stats.table(["statement size", "jobs", "jobs/s"], rows)
            + f"\ncommand: pgbench -n -c 2 -j 2 -t N -D batch=B -f bench/floor.sql")


SWEEP_PLANS = ("1x100x100:async", "2x100x100:async", "2x200x100:async", "2x400x200:async",
               "2x200x100:sync", "2x32x32:async")


def scenario_sweep(server: Server, args: argparse.Namespace, rep: Report) -> None:
    """tenure alone: worker processes × concurrency × claim batch, one run each (how BEST_DRAIN was chosen)."""
    backlog = 10_000 if args.quick else 30_000
    rows = []
    out: dict[str, Any] = {}
    for text in SWEEP_PLANS:
        plan = parse_plan(text)
        r = drain_run(server, "tenure", plan, backlog=backlog, label=f"[sweep {text}] ",
                      payload_bytes=args.payload_bytes)
        log(f"  sweep {text}: {r.rate:,.0f} jobs/s, peak RSS {r.peak_rss_mb:.0f} MB")
        out[text] = r.__dict__
        rows.append([plan.describe("tenure"), stats.fmt_num(r.rate, "/s"), f"{r.peak_rss_mb:.0f} MB",
                     stats.fmt_num(r.worker_cpu_s / r.jobs * 1e6 if r.jobs else None, " µs"),
                     stats.fmt_num(r.db_cpu_s / r.jobs * 1e6 if r.jobs else None, " µs")])
    rep.data["sweep"] = out
    rep.add(f"tenure configuration sweep (backlog {backlog:,}, {describe(args.payload_bytes)}, one run each)",
            stats.table(["config", "jobs/s", "peak RSS", "worker CPU/job", "DB CPU/job"], rows))


def scenario_drain(server: Server, args: argparse.Namespace, rep: Report) -> None:
    backlog = 10_000 if args.quick else 50_000
    plans = {s: BEST_DRAIN[s] for s in args.systems}
    if args.tenure_plan:
        plans["tenure"] = args.tenure_plan
    results: dict[str, list[DrainResult]] = {s: [] for s in args.systems}
    for run, system in stats.interleave(list(args.systems), args.runs):
        r = drain_run(server, system, plans[system], backlog=backlog, max_seconds=args.max_seconds,
                      label=f"[drain {run + 1}/{args.runs}] ", payload_bytes=args.payload_bytes)
        results[system].append(r)
        log(f"  drain run {run + 1} {system}: {r.rate:,.0f} jobs/s over {r.jobs:,} jobs, "
            f"peak RSS {r.peak_rss_mb:.0f} MB")
    _drain_table(rep, "drain", f"No-op drain, backlog {backlog:,}, {describe(args.payload_bytes)}", plans, results)


def _drain_table(rep: Report, key: str, title: str, plans: dict[str, WorkerPlan],
                 results: dict[str, list[DrainResult]]) -> None:
    sums = {s: stats.summarize([r.rate for r in rs]) for s, rs in results.items()}
    rows = []
    data: dict[str, Any] = {}
    for s, rs in results.items():
        rss = stats.summarize([r.peak_rss_mb for r in rs])
        cpu = stats.summarize([(r.worker_cpu_s / r.jobs * 1e6) if r.jobs else float("nan") for r in rs])
        dbc = stats.summarize([(r.db_cpu_s / r.jobs * 1e6) if r.jobs else float("nan") for r in rs])
        ratio = stats.ratio(sums.get("tenure"), sums[s]) if s != "tenure" else None
        rows.append([s, plans[s].describe(s), stats.fmt_summary(sums[s], "/s"),
                     "-" if s == "tenure" else stats.fmt_ratio(ratio),
                     stats.fmt_num(rss.high if rss else None, " MB"),
                     stats.fmt_num(cpu.median if cpu else None, " µs"),
                     stats.fmt_num(dbc.median if dbc else None, " µs")])
        data[s] = {"config": plans[s].describe(s), "jobs_per_second": sums[s].as_dict() if sums[s] else None,
                   "tenure_ratio": ratio, "peak_rss_mb": rss.high if rss else None,
                   "runs": [r.__dict__ for r in rs]}
    rep.data[key] = data
    rep.add(title, stats.table(["system", "config", "jobs/s median (min–max)", "tenure ÷ this",
                                "peak worker RSS", "worker CPU/job", "DB CPU/job"], rows))


def scenario_latency(server: Server, args: argparse.Namespace, rep: Report) -> None:
    rate, duration = 1000.0, (5.0 if args.quick else args.latency_seconds)
    plans = {"tenure": WorkerPlan(1, 32, 100, "async"), "pgqueuer": WorkerPlan(1, 0, 10),
             "procrastinate": WorkerPlan(1, 10, 0)}
    p50s: dict[str, list[float]] = {s: [] for s in args.systems}
    p99s: dict[str, list[float]] = {s: [] for s in args.systems}
    db_lat: list[tuple[float, float]] = []
    counts: dict[str, list[int]] = {s: [] for s in args.systems}
    for run, system in stats.interleave(list(args.systems), args.runs):
        dsn = server.fresh_db(f"bench_{system}")
        install(system, dsn)
        with tempfile.TemporaryDirectory() as tmp:
            outs = [f"{tmp}/lat{i}.json" for i in range(plans[system].processes)]
            procs = Procs([worker_cmd(system, dsn, plans[system], record_to=o) for o in outs])
            try:
                procs.wait_ready()
                time.sleep(1.0)
                log(f"    [latency {run + 1}/{args.runs}] {system}: producing {rate:.0f}/s for {duration:.0f}s")
                prod = subprocess.run(producer_cmd(system, dsn, rate, duration, payload_bytes=args.payload_bytes),
                                      cwd=ROOT, capture_output=True, text=True, env=Procs.env())
                if prod.returncode != 0:
                    raise RuntimeError(f"producer failed: {prod.stderr[-800:]}")
                prog = Progress(system, dsn, int(rate * duration))
                deadline = time.monotonic() + 20
                while prog.done() < int(rate * duration) and time.monotonic() < deadline:
                    procs.sample()
                    time.sleep(0.1)
                prog.close()
            finally:
                procs.stop()
            lat: list[float] = []
            for o in outs:
                if Path(o).exists():
                    lat += json.loads(Path(o).read_text())
        if not lat:
            log(f"    {system}: no latencies recorded")
            continue
        p50s[system].append(stats.percentile(lat, 50))
        p99s[system].append(stats.percentile(lat, 99))
        counts[system].append(len(lat))
        extra = ""
        if system == "tenure":
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(bench_queries()["tenure_latency_db"]).fetchone()
            if row and row[0] is not None:
                db_lat.append((float(row[0]), float(row[1])))
                extra = f" (DB clock available_at→started_at: p50 {row[0]:.2f} ms, p99 {row[1]:.2f} ms)"
        log(f"  latency run {run + 1} {system}: p50 {p50s[system][-1]:.2f} ms, p99 {p99s[system][-1]:.2f} ms "
            f"over {len(lat):,} jobs{extra}")
    rows = []
    data: dict[str, Any] = {}
    for s in args.systems:
        a, b = stats.summarize(p50s[s]), stats.summarize(p99s[s])
        rows.append([s, plans[s].describe(s), stats.fmt_summary(a, " ms"), stats.fmt_summary(b, " ms"),
                     str(sum(counts[s]))])
        data[s] = {"config": plans[s].describe(s), "p50_ms": a.as_dict() if a else None,
                   "p99_ms": b.as_dict() if b else None}
    if db_lat:
        a, b = stats.summarize([x[0] for x in db_lat]), stats.summarize([x[1] for x in db_lat])
        rows.append(["tenure (DB clock)", "available_at → started_at (claim)", stats.fmt_summary(a, " ms"),
                     stats.fmt_summary(b, " ms"), "-"])
        data["tenure_db_clock"] = {"p50_ms": a.as_dict() if a else None, "p99_ms": b.as_dict() if b else None}
    rep.data["latency"] = data
    rep.add(f"Enqueue→start latency at {rate:.0f} jobs/s for {duration:.0f} s (producer: 10 jobs every 10 ms), "
            f"{describe(args.payload_bytes)}",
            stats.table(["system", "config", "p50", "p99", "jobs"], rows))


def scenario_reaper(server: Server, args: argparse.Namespace, rep: Report) -> None:
    from tenure.core.db import connect
    from tenure.core.queries import named_queries
    from tenure.core.repository import Repository
    from tenure.reaper.reaper import Reaper, ReaperConfig
    q = bench_queries()
    size = 100_000 if args.quick else 1_000_000
    expired = 10_000
    dsn = server.fresh_db("bench_reaper")
    install("tenure", dsn)
    log(f"    [reaper] filling {size:,} rows")
    with connect(dsn) as conn:
        bulk_insert(conn, "tenure_fill_completed", size - expired, args.payload_bytes)
    out: dict[str, Any] = {"table_rows": size}
    rows = []
    for batch in (500, 10_000):
        times, cycles = [], []
        for run in range(args.runs):
            with connect(dsn) as conn:
                bulk_insert(conn, "tenure_fill_expired", expired, args.payload_bytes, first=size + run * expired)
                conn.execute(q["tenure_vacuum"])
                reaper = Reaper(ReaperConfig(grace=10.0, batch=batch), dsn=dsn, schema="tenure",
                                reaper_id="bench-reaper")
                repo = Repository(conn, "tenure")
                t0 = time.perf_counter()
                n = 0
                while True:
                    got = reaper.run_once(repo)
                    if not got:
                        break
                    n += len(got)
                dt = time.perf_counter() - t0
            if n != expired:
                raise RuntimeError(f"reaper recovered {n}, expected {expired}")
            times.append(dt)
            cycles.append(reaper.cycles - 1)
            log(f"    [reaper] batch {batch} run {run + 1}: {expired:,} reaped in {dt * 1000:.0f} ms "
                f"({reaper.cycles - 1} cycles)")
        s = stats.summarize(times)
        out[f"reap_10k_batch_{batch}_s"] = s.as_dict() if s else None
        rows.append([f"reap {expired:,} expired (batch {batch}, {cycles[0]} cycles + 1 empty)",
                     stats.fmt_summary(stats.summarize([t * 1000 for t in times]), " ms"), "< 1000 ms",
                     stats.verdict(s.median if s else None, 1.0, False)])
    # Idle cycles: nothing expired, table of `size` rows; then again with healthy leases in flight.
    plans: dict[str, list[str]] = {}
    healthy = 10_000
    for label in ("nothing running", f"{healthy:,} healthy leases running"):
        with connect(dsn) as conn:
            if label != "nothing running":
                bulk_insert(conn, "tenure_fill_healthy", healthy, args.payload_bytes, first=2 * size)
            conn.execute(q["tenure_vacuum"])
            reaper = Reaper(ReaperConfig(grace=10.0), dsn=dsn, schema="tenure", reaper_id="bench-reaper")
            repo = Repository(conn, "tenure")
            idle = []
            for _ in range(50):
                t0 = time.perf_counter()
                reaper.run_once(repo)
                idle.append((time.perf_counter() - t0) * 1000)
            sql = named_queries("tenure")["job_reap_candidates"]
            with conn.transaction():
                plans[label] = [r["QUERY PLAN"] for r in conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, {"grace": 10.0, "batch": 500}).fetchall()]
            total = conn.execute("SELECT count(*) AS n FROM tenure.jobs").fetchone()
        s_idle = stats.summarize(idle)
        out[f"idle_cycle_ms ({label})"] = s_idle.as_dict() if s_idle else None
        rows.append([f"idle reaper cycle, {label} (50 cycles, persistent connection)",
                     stats.fmt_summary(s_idle, " ms"), "< 10 ms",
                     stats.verdict(s_idle.median if s_idle else None, 10.0, False)])
    seq = any("Seq Scan on jobs" in line for plan in plans.values() for line in plan)
    out["explain"] = plans
    out["seq_scan"] = seq
    out["table_rows_final"] = total["n"] if total else None
    rep.data["reaper"] = out
    rep.add(f"Reaper on a {out['table_rows_final']:,}-row jobs table, {describe(args.payload_bytes)}",
            stats.table(["measure", "median (min–max)", "target", "verdict"], rows)
            + "".join(f"\n\nEXPLAIN (ANALYZE, BUFFERS) of job_reap_candidates, {label}, nothing to reap:\n\n"
                      + "\n".join("    " + line for line in plan) for label, plan in plans.items())
            + f"\n\nsequential scan on jobs: {'YES' if seq else 'no'}")


def scenario_scale(server: Server, args: argparse.Namespace, rep: Report) -> None:
    plan = args.tenure_plan or BEST_DRAIN["tenure"]
    small, big = 10_000, (200_000 if args.quick else 1_000_000)
    window = 10_000 if args.quick else 50_000
    big_dsn = server.fresh_db("bench_big")
    install("tenure", big_dsn)
    log(f"    [scale] filling {big:,} pending jobs")
    fill("tenure", big_dsn, big, fast=True, payload_bytes=args.payload_bytes)
    res: dict[str, list[DrainResult]] = {"10k": [], "1M": []}
    for run in range(args.runs):
        r = drain_run(server, "tenure", plan, backlog=small, label=f"[scale {run + 1}/{args.runs}] 10k ",
                      payload_bytes=args.payload_bytes)
        res["10k"].append(r)
        log(f"  scale run {run + 1} backlog {small:,}: {r.rate:,.0f} jobs/s")
        r = drain_run(server, "tenure", plan, backlog=big, target=window, dsn=big_dsn,
                      label=f"[scale {run + 1}/{args.runs}] big ")
        res["1M"].append(r)
        log(f"  scale run {run + 1} backlog ~{big - run * window:,}: {r.rate:,.0f} jobs/s over {r.jobs:,}")
    a = stats.summarize([r.rate for r in res["10k"]])
    b = stats.summarize([r.rate for r in res["1M"]])
    ratio = stats.ratio(b, a)
    rep.data["scale"] = {"config": plan.describe("tenure"), "small_backlog": small, "big_backlog": big,
                         "window": window, "small": a.as_dict() if a else None,
                         "big": b.as_dict() if b else None, "ratio": ratio}
    rows = [[f"{small:,} backlog (drained fully)", stats.fmt_summary(a, "/s")],
            [f"{big:,} backlog (first {window:,} jobs of each run)", stats.fmt_summary(b, "/s")],
            ["ratio big ÷ small (target ≥ 0.80)", f"{stats.fmt_ratio(ratio)} {stats.verdict(ratio, 0.8, True)}"]]
    rep.add(f"Scale: tenure drain at {big:,} vs {small:,} backlog ({plan.describe('tenure')}, "
            f"{describe(args.payload_bytes)})",
            stats.table(["backlog", "jobs/s median (min–max)"], rows))


def scenario_heartbeat(server: Server, args: argparse.Namespace, rep: Report) -> None:
    q = bench_queries()
    held = 1000
    window = 10.0 if args.quick else 20.0
    out: dict[str, Any] = {}
    rows = []
    for interval in (5.0, 1.0):
        dsn = server.fresh_db("bench_hb")
        install("tenure", dsn)
        fill("tenure", dsn, held, payload_bytes=args.payload_bytes)
        plan = WorkerPlan(1, held, 100, "async", ("--heartbeat", str(interval)))
        procs = Procs([worker_cmd("tenure", dsn, plan, hold=True)])
        try:
            procs.wait_ready()
            with psycopg.connect(dsn, autocommit=True) as conn:
                deadline = time.monotonic() + 30
                while True:
                    row = conn.execute(q["tenure_running_count"]).fetchone()
                    if row and row[0] >= held:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError("worker did not pick up 1,000 jobs")
                    time.sleep(0.2)
                time.sleep(1.0)
                conn.execute(q["stat_statements_reset"])
                c0 = conn.execute(q["db_commits"]).fetchone()
                db0, w0, t0 = server.backend_cpu(), procs.cpu(), time.monotonic()
                log(f"    [heartbeat] holding {held} jobs, interval {interval:g}s, measuring {window:.0f}s")
                while time.monotonic() - t0 < window:
                    procs.sample()
                    time.sleep(0.5)
                c1 = conn.execute(q["db_commits"]).fetchone()
                db1, w1, t1 = server.backend_cpu(), procs.cpu(), time.monotonic()
                top = conn.execute(q["stat_statements_top"]).fetchall()
        finally:
            procs.stop()
        secs = t1 - t0
        commits = (c1[0] - c0[0]) if c0 and c1 else 0
        hb = [t for t in top if "held" in t[4]]
        mine = [t for t in top if "pg_stat" in t[4]]  # the runner's own probes
        stmt_calls = sum(t[0] for t in top) - sum(t[0] for t in mine)
        entry = {"interval_s": interval, "window_s": secs, "transactions_per_s": commits / secs,
                 "statements_per_s": stmt_calls / secs, "db_cpu_percent": (db1 - db0) / secs * 100,
                 "worker_cpu_percent": (w1 - w0) / secs * 100, "peak_rss_mb": procs.peak_rss / 2**20,
                 "heartbeat_mean_ms": hb[0][2] if hb else None,
                 "heartbeat_statements_per_s": (hb[0][0] / secs) if hb else 0.0,
                 "rows_per_heartbeat": (hb[0][3] / hb[0][0]) if hb and hb[0][0] else None,
                 "top_statements": [list(t) for t in top]}
        out[f"interval_{interval:g}"] = entry
        rows.append([f"{interval:g} s", f"{entry['heartbeat_statements_per_s']:.2f}",
                     f"{entry['statements_per_s']:.2f}", f"{entry['transactions_per_s']:.2f}",
                     stats.fmt_num(entry["heartbeat_mean_ms"], " ms"), f"{entry['db_cpu_percent']:.1f} %",
                     f"{entry['worker_cpu_percent']:.1f} %", f"{entry['peak_rss_mb']:.0f} MB"])
    rep.data["heartbeat"] = out
    rep.add(f"Heartbeat cost: one worker holding {held:,} in-flight jobs, {describe(args.payload_bytes)}",
            stats.table(["heartbeat interval", "heartbeat statements/s", "all worker statements/s", "commits/s",
                         "heartbeat statement mean", "DB CPU (all backends)", "worker CPU", "worker RSS"], rows)
            + "\n(DB CPU includes the background processes: checkpointer, walwriter, autovacuum.)")


def scenario_rss(server: Server, args: argparse.Namespace, rep: Report) -> None:
    backlog = 10_000 if args.quick else 30_000
    rows = []
    out: dict[str, Any] = {}
    for handler in ("sync", "async"):
        plan = WorkerPlan(1, 32, 32, handler)
        rs = [drain_run(server, "tenure", plan, backlog=backlog, label=f"[rss {handler}] ",
                        payload_bytes=args.payload_bytes)
              for _ in range(max(1, args.runs - 2))]
        rss = max(r.peak_rss_mb for r in rs)
        rate = stats.summarize([r.rate for r in rs])
        out[handler] = {"peak_rss_mb": rss, "jobs_per_second": rate.as_dict() if rate else None}
        rows.append([plan.describe("tenure"), f"{rss:.0f} MB", stats.verdict(rss, 80.0, False),
                     stats.fmt_summary(rate, "/s")])
    rep.data["rss"] = out
    rep.add(f"Worker RSS at concurrency 32 (one tenure process draining a backlog, {describe(args.payload_bytes)})",
            stats.table(["config", "peak RSS", "target < 80 MB", "jobs/s"], rows))


RUNNERS = {"floor": scenario_floor, "sweep": scenario_sweep, "drain": scenario_drain, "latency": scenario_latency,
           "reaper": scenario_reaper, "scale": scenario_scale, "heartbeat": scenario_heartbeat,
           "rss": scenario_rss, "compare": scenario_compare, "sustained": scenario_sustained, "flow": scenario_flow,
           "flow-keys": scenario_flow_keys, "fairness": scenario_fairness, "rate": scenario_rate}


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench`` (checks across options are in ``main``)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small backlogs, short windows (a smoke run)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS,
                        help="run only these scenarios (repeatable; default: all but the long ones, "
                             f"{', '.join(LONG_SCENARIOS)})")
    parser.add_argument("--system", dest="systems", action="append", choices=SYSTEMS,
                        help="systems to compare (repeatable; default: all three)")
    parser.add_argument("--runs", type=int, default=3, help="runs per system and scenario (default 3)")
    parser.add_argument("--tenure-plan", type=parse_plan, help="tenure worker plan PROCSxCONCxBATCH[:handler]")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="cap on one drain window; slower systems are measured over what they finish")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--backlog", type=int, default=0,
                        help="compare: jobs per run (default 40,000, also with --quick: fewer give under a second of steady state)")
    parser.add_argument("--contender", dest="contenders", action="append", choices=sorted(CONTENDERS),
                        help="compare: contenders to run (repeatable; default: tenure, pgqueuer, their "
                             "out-of-the-box configurations and the SQL floor)")
    add_before_src(parser, "compare: a directory holding an older src/tenure for the *-base contenders "
                           "(e.g. `git archive OLD src | tar -x -C DIR`, then DIR/src)", aliases=("--base-src",))
    parser.add_argument("--sustained-jobs", type=int, default=0,
                        help="sustained: backlog drained by each system (default 1,500,000; 200,000 with --quick)")
    parser.add_argument("--flow-minutes", type=float, default=0.0,
                        help="flow: minutes of steady arrivals per system (default 10; 2 with --quick)")
    parser.add_argument("--flow-load", type=float, default=0.7,
                        help="flow: arrival rate as a share of each system's measured capacity (default 0.7)")
    parser.add_argument("--flow-rate", type=float, default=0.0,
                        help="flow: one arrival rate in jobs/s for every system instead (no capacity drain)")
    parser.add_argument("--flow-keys-jobs", type=int, default=0,
                        help="flow-keys: jobs per drain (default 50,000; 10,000 with --quick)")
    parser.add_argument("--rate-jobs", type=int, default=0,
                        help="rate: jobs per drain (default 10,000; 3,000 with --quick)")
    payloads.add_argument(parser)
    parser.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    parser.add_argument("--output", type=Path, help="JSON results file (default bench/results/<time>.json)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    args.systems = tuple(args.systems or SYSTEMS)
    if args.quick and args.runs == 3 and "--runs" not in (argv or sys.argv):
        args.runs = 1
    if (args.sustained_jobs < 0 or args.flow_keys_jobs < 0 or args.rate_jobs < 0 or args.flow_minutes < 0
            or args.flow_rate < 0 or not 0 < args.flow_load <= 2):
        parser.error("--sustained-jobs, --flow-keys-jobs, --rate-jobs, --flow-minutes and --flow-rate must be "
                     ">= 0, --flow-load within (0, 2]")
    scenarios = args.scenario or [s for s in SCENARIOS if s not in LONG_SCENARIOS]
    # The reaper logs one WARNING per recovered job; with 10k of them a console handler would
    # dominate the reaper figure, so tenure's own logging is kept to errors during the bench.
    logging.getLogger("tenure").setLevel(logging.ERROR)
    server = start_server(args.datadir)
    rep = Report()
    started = time.time()
    rep.data["meta"] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:],
                        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "quick": args.quick,
                        "runs": args.runs, "payload_bytes": args.payload_bytes}
    for name in scenarios:
        log(f"== scenario {name}")
        t0 = time.monotonic()
        try:
            RUNNERS[name](server, args, rep)
        except Exception as exc:  # noqa: BLE001 - report and keep going with other scenarios
            log(f"!! scenario {name} failed: {type(exc).__name__}: {exc}")
            rep.data.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        log(f"== scenario {name} took {time.monotonic() - t0:.0f}s")
    rep.data["meta"]["seconds"] = time.time() - started
    rep.data["meta"]["load_average_end"] = os.getloadavg()
    out = args.output or RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep.data, indent=2, default=str))
    log(f"results written to {out}")
    return 1 if rep.data.get("errors") else 0
