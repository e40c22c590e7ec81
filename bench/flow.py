"""Latency under a steady flow: does enqueue→start latency stay flat over many minutes?

``python -m bench --scenario flow [--flow-minutes M] [--flow-load F | --flow-rate R]``: for
tenure and pgqueuer, first a short drain of the ``compare`` scenario's best contender (its steady
rate is the system's *capacity*), then a fresh database, 2 worker processes of the system's own
command line in continuous mode (``tenure worker --concurrency 200 --claim-batch 100``, no
``--burst``; pgqueuer's ``run`` in continuous mode, batch 100) and one producer process
(``bench.worker SYSTEM produce``: the same schedule for both, a batch every 10 ms) enqueueing at
``F`` × the system's own capacity (default 0.7; or ``R`` jobs/s for both) for ``M`` minutes
(default 10, 2 with ``--quick``).

Every job's payload carries the producer's wall clock just before its enqueue statement (field
``t``, padded to ``--payload-bytes`` with the fields of ``bench.payloads``, the same for both); each
worker's handler notes its own start time next to it (``bench.apps.LatencyLog``, one file per
process), the same code for both systems. Reported per minute of arrival: p50 and p99 of
start − enqueue, and last-minute p99 ÷ first-minute p99 (target ≤ 1.2). The remaining count is
polled from the database every ``DEPTH_POLL`` seconds (queue depth: a growing depth means the
arrival rate is above what the system sustains with the producer beside it).

Limits: the producer, the workers and the server share the machine's 2 cores, so the capacity
measured by a drain (no producer) overstates what the system sustains while enqueueing; the
arrival rate is rounded to a multiple of 100 jobs/s (whole jobs per 10 ms tick).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import stats
from bench.apps import FLUSH_SECONDS
from bench.compare import (
    CONTENDERS,
    QUICK_BACKLOG,
    ROOT,
    compile_sources,
    db_cpu,
    pgq_cli,
    remaining_sql,
    run_one,
    tenure_cli,
)
from bench.console import log
from bench.payloads import describe
from bench.server import processes_cpu
from bench.sqlfile import bench_queries
from bench.systems import install, producer_cmd

LOAD = 0.7
BUCKET_SECONDS = 60.0
DEPTH_POLL = 5.0
DRAIN_TIMEOUT = 120.0
FULL_MINUTES = 10.0
QUICK_MINUTES = 2.0
P99_TARGET = 1.2
OVERLOAD_SECONDS = 10.0


def worker_argv(system: str) -> tuple[str, ...]:
    if system == "tenure":
        return tenure_cli("--concurrency", "200", "--claim-batch", "100", app="bench.apps:flow_app", burst=False)
    return pgq_cli("--batch-size", "100", mode="continuous")


DESCRIBE = {"tenure": "2 × tenure worker --concurrency 200 --claim-batch 100, async handler",
            "pgqueuer": "2 × pgqueuer.run(--mode continuous --batch-size 100)"}


@dataclass
class FlowResult:
    system: str
    rate: float
    """Arrival rate asked of the producer (jobs/s)."""
    capacity: float | None
    minutes: float
    sent: int
    produced_seconds: float
    """How long the producer took for its schedule (longer than planned: it fell behind)."""
    started: int
    buckets: list[stats.Bucket | None]
    depth: list[tuple[float, int]] = field(default_factory=list)
    worker_cpu_per_job_us: float = float("nan")
    db_cpu_per_job_us: float = float("nan")

    @property
    def max_depth(self) -> int:
        return max((d for _, d in self.depth), default=0)

    @property
    def overloaded(self) -> bool:
        """More than ``OVERLOAD_SECONDS`` of arrivals queued at some poll: the latency then
        measures a growing backlog, not the cost per job."""
        return self.max_depth > self.rate * OVERLOAD_SECONDS

    @property
    def p99_ratio(self) -> float | None:
        first, last = self.buckets[0], self.buckets[-1]
        return last.p99 / first.p99 if first and last and first.p99 > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system, "config": DESCRIBE[self.system], "rate": self.rate,
                "capacity": self.capacity, "minutes": self.minutes, "sent": self.sent,
                "produced_seconds": self.produced_seconds, "started": self.started,
                "per_minute": [b.as_dict() if b else None for b in self.buckets],
                "last_over_first_p99": self.p99_ratio, "max_depth": self.max_depth, "overloaded": self.overloaded,
                "depth": self.depth, "worker_cpu_per_job_us": self.worker_cpu_per_job_us,
                "db_cpu_per_job_us": self.db_cpu_per_job_us}


def _read_latencies(directory: Path) -> tuple[array[float], list[float]]:
    """Arrival times and enqueue→start latencies (ms) of every recorded job."""
    pairs = array("d")
    for path in sorted(directory.glob("lat-*.bin")):
        with open(path, "rb") as fh:
            pairs.frombytes(fh.read())
    arrivals, started = pairs[0::2], pairs[1::2]
    return arrivals, [(s - t) * 1000.0 for t, s in zip(arrivals, started)]


def _remaining(probe: psycopg.Connection[Any], sql: str) -> int:
    row = probe.execute(sql).fetchone()
    return int(row[0]) if row else 0


def flow_run(server: Any, system: str, rate: float, minutes: float, capacity: float | None = None, *,
             payload_bytes: int = 0) -> FlowResult:
    """2 workers of ``system`` serve a producer enqueueing ``rate`` jobs/s of ``payload_bytes``
    payloads for ``minutes``."""
    q = bench_queries()
    dsn: str = server.fresh_db(f"bench_flow_{system}")
    install(system, dsn)
    seconds = minutes * 60.0
    sql = remaining_sql(system)
    with tempfile.TemporaryDirectory(prefix="bench-flow-") as tmp, \
            psycopg.connect(dsn, autocommit=True, options="-c max_parallel_workers_per_gather=0") as probe:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "BENCH_DSN": dsn, "BENCH_LATENCY_DIR": tmp}
        env.pop("TENURE_DATABASE_URL", None)
        argv = [a.replace("{dsn}", dsn) for a in worker_argv(system)]
        workers = []
        for i in range(2):
            with open(Path(tmp) / f"w{i}.log", "wb") as out:
                workers.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        ps = [psutil.Process(w.pid) for w in workers]

        def check_workers() -> None:
            for i, w in enumerate(workers):
                if w.poll() is not None:
                    text = (Path(tmp) / f"w{i}.log").read_text(errors="replace")[-800:]
                    raise RuntimeError(f"{system} worker exited ({w.returncode}): {text}")

        try:
            deadline = time.monotonic() + 60
            while _remaining(probe, q["db_backends"]) < len(workers):  # both workers connected
                check_workers()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{system} workers did not connect within 60 s")
                time.sleep(0.2)
            time.sleep(2.0)
            log(f"    [flow] {system}: producing {rate:,.0f} jobs/s for {minutes:g} min")
            cpu0, db0 = processes_cpu(ps), db_cpu(server.postmaster_pid)
            with open(Path(tmp) / "producer.log", "wb") as err:
                prod = subprocess.Popen(producer_cmd(system, dsn, rate, seconds, payload_bytes=payload_bytes),
                                        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err)
            t0 = time.monotonic()
            depth: list[tuple[float, int]] = []
            next_poll = t0
            while prod.poll() is None:
                now = time.monotonic()
                if now >= next_poll:
                    depth.append((now - t0, _remaining(probe, sql)))
                    next_poll = now + DEPTH_POLL
                    if len(depth) % 12 == 0:
                        log(f"    [flow] {system}: {now - t0:.0f} s, queue depth {depth[-1][1]:,}")
                check_workers()
                time.sleep(0.2)
            out_text = prod.stdout.read().decode() if prod.stdout else ""
            if prod.returncode != 0:
                raise RuntimeError(f"{system} producer failed: {(Path(tmp) / 'producer.log').read_text()[-800:]}")
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while (left := _remaining(probe, sql)) > 0:
                if time.monotonic() > deadline:
                    log(f"    [flow] {system}: {left:,} jobs still queued {DRAIN_TIMEOUT:.0f} s after the producer")
                    break
                time.sleep(0.5)
            depth.append((time.monotonic() - t0, left))
            cpu1, db1 = processes_cpu(ps), db_cpu(server.postmaster_pid)
            time.sleep(4 * FLUSH_SECONDS)  # the handlers' last notes reach their files
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
            for w in workers:
                try:
                    w.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.kill()
                    w.wait()
        arrivals, latencies = _read_latencies(Path(tmp))
    produced = json.loads(out_text.strip().splitlines()[-1])
    sent = int(produced["sent"])
    buckets = max(1, math.ceil(minutes * 60.0 / BUCKET_SECONDS - 1e-9))
    start = min(arrivals) if arrivals else 0.0
    per_min = stats.bucket_latencies(arrivals, latencies, start=start, width=BUCKET_SECONDS, buckets=buckets)
    n = len(latencies)
    return FlowResult(system, rate, capacity, minutes, sent, float(produced["seconds"]), n, per_min, depth,
                      (cpu1 - cpu0) / n * 1e6 if n else float("nan"), (db1 - db0) / n * 1e6 if n else float("nan"))


def _ms(b: stats.Bucket | None, attr: str) -> str:
    return stats.fmt_num(getattr(b, attr), " ms") if b else "-"


def report(results: dict[str, FlowResult], load: float | None) -> tuple[str, dict[str, Any]]:
    """The summary and per-minute tables, and their JSON form."""
    rows = []
    for key, r in results.items():
        basis = (f"{load:.0%} of {stats.fmt_num(r.capacity, '/s')}" if r.capacity and load else "as given")
        rows.append([key, DESCRIBE[key], f"{r.rate:,.0f}/s ({basis})",
                     f"{r.sent:,} in {r.produced_seconds:.0f} s "
                     f"({stats.fmt_num(stats.throughput(r.sent, r.produced_seconds), '/s')})", f"{r.started:,}",
                     f"{r.max_depth:,}" + (" (overloaded)" if r.overloaded else ""),
                     f"{r.worker_cpu_per_job_us:.0f} + {r.db_cpu_per_job_us:.0f} µs",
                     _ms(r.buckets[0], "p99"), _ms(r.buckets[-1], "p99"),
                     f"{stats.fmt_ratio(r.p99_ratio)} {stats.verdict(r.p99_ratio, P99_TARGET + 1e-9, False)}"])
    text = stats.table(["system", "config", "arrival rate", "enqueued", "started", "max queue depth",
                        "CPU/job worker + DB (+ producer's inserts)", "p99 first minute", "p99 last minute",
                        f"last ÷ first p99 (≤ {P99_TARGET:.1f})"], rows)
    keys = list(results)
    width = max((len(r.buckets) for r in results.values()), default=0)
    minute_rows = []
    for i in range(width):
        row = [str(i + 1)]
        for key in keys:
            b = results[key].buckets[i] if i < len(results[key].buckets) else None
            row += [f"{b.jobs:,}" if b else "-", _ms(b, "p50"), _ms(b, "p99")]
        minute_rows.append(row)
    headers = ["minute", *[f"{k} {h}" for k in keys for h in ("jobs", "p50", "p99")]]
    text += "\n\nEnqueue→start latency per minute of arrival:\n\n" + stats.table(headers, minute_rows)
    return text, {"load": load, "systems": {k: r.as_dict() for k, r in results.items()}}


def scenario_flow(server: Any, args: Any, rep: Any) -> None:
    """Capacity first, then a steady flow at a share of it (see the module docstring)."""
    compile_sources()
    minutes = args.flow_minutes or (QUICK_MINUTES if args.quick else FULL_MINUTES)
    keys = [k for k in ("tenure", "pgqueuer") if k in args.systems]
    load = None if args.flow_rate else args.flow_load
    capacity: dict[str, float | None] = {}
    for key in keys:
        if args.flow_rate:
            capacity[key] = None
            continue
        cap = run_one(server, CONTENDERS[key], QUICK_BACKLOG, payload_bytes=args.payload_bytes).steady_rate
        capacity[key] = cap
        log(f"  [flow] {key}: capacity {cap:,.0f}/s (steady rate of a {QUICK_BACKLOG:,}-job drain)")
    results: dict[str, FlowResult] = {}
    for key in keys:
        rate = args.flow_rate or args.flow_load * (capacity[key] or 0.0)
        r = flow_run(server, key, rate, minutes, capacity=capacity[key], payload_bytes=args.payload_bytes)
        results[key] = r
        log(f"  [flow] {key}: {r.started:,}/{r.sent:,} jobs started; p99 first minute {_ms(r.buckets[0], 'p99')}, "
            f"last {_ms(r.buckets[-1], 'p99')} ({stats.fmt_ratio(r.p99_ratio)})")
    text, data = report(results, load)
    data["payload_bytes"] = args.payload_bytes
    rep.data["flow"] = data
    rep.add(f"Flow: enqueue→start latency at a steady arrival rate for {minutes:g} min, "
            f"{describe(args.payload_bytes)}, one run each", text)
