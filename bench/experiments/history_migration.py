"""Migration 0009 on an existing installation, under load: ``python -m bench.experiments.history_migration --jobs 5000000``.

Issue 23 asks for an online migration: an installation with millions of finished jobs moves to
``job_history`` without a long lock, in batches. This bench measures that from outside:

1. **A pre-0009 installation.** The code before 0009 (``git archive main src`` into
   ``--before-src``, default /tmp/before-0009) seeds ``--jobs`` jobs with bench/experiments/ui_seed.py's
   seeder (bench/experiments/ui_scale.sql ``seed_jobs``: 91% completed, 3% failed, 2% cancelled, ~4%
   pending, 300 running, 20% idempotency keys, one audit trail in five), so the schema is at
   version 8 and every completed job sits in ``jobs``. The seed is a database of the bench's
   embedded server (``tenure_history_seed_<N>``), made once and reused (``--reseed`` redoes it);
   each run copies it (``CREATE DATABASE … TEMPLATE … STRATEGY file_copy``).
2. **A workload on it.** A producer (``--rate`` enqueues/s, one job per call, one in ten with an
   idempotency key) and two workers (claim up to 10, complete them in one call), separate
   processes on the ``Repository`` of the code they run, each timing every call. The old
   code's workload runs while the new code's ``tenure migrate`` runs (the rolling upgrade: old
   workers keep completing jobs in ``jobs`` on the version-9 schema), then it is replaced by
   the new code's workload ("the deploy"), and ``tenure history move`` runs under that.
3. **Timed from outside.** The wall time of ``tenure migrate`` and ``tenure history move``
   (CLI subprocesses of the new code), the move's rate, and per phase (``--window`` seconds
   before, during, after) the workload's enqueue and completion rates and each call's p50,
   p99 and worst latency: a call overlapping a phase counts in it, so a call blocked by a lock
   shows as that phase's worst.
4. **Correctness.** Jobs over ``jobs`` + ``job_history`` equal the seed plus what the workload
   created; no completed row is left in ``jobs``; every key held before the upgrade is in
   ``job_keys``; ``tenure jobs show`` prints moved jobs; and one batch of the move is
   ``EXPLAIN (ANALYZE, BUFFERS)``-ed beforehand (rolled back) to show where its time goes.

Limits: one shared 2-core machine (other sessions' load shows in the figures); the seed's rows
were inserted in their final state (a perfectly id-ordered heap, no dead tuples); no reaper
runs (a reaper moves one batch per cycle as well); the workload's handlers do nothing.

The figures: docs/performance.md, "Moving an existing installation (0009)".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from bench.console import log
from bench.server import ROOT, add_before_src, code_env

NEW_SRC = ROOT / "src"
RESULTS_DIR = ROOT / "bench" / "results"
BEFORE_SRC_DEFAULT = Path("/tmp/before-0009")
SCHEMA = "tenure"
QUEUE = "history-bench"
TASK = "noop"
CLAIM_BATCH = 10
KEY_EVERY = 10
"""One enqueue in ``KEY_EVERY`` carries an idempotency key."""
RUN_DATABASE = "tenure_history_run"
MOVE_OUTPUT = re.compile(r"moved (\d+) completed job\(s\) into job_history in (\d+) batch\(es\), ([\d.]+) s")


# -- pure helpers (tests/unit/test_bench_history.py) --------------------------------------------
@dataclass(frozen=True)
class Call:
    """One timed call of the workload: when it started (wall clock), what, how long, how many jobs."""

    at: float
    op: str
    seconds: float
    jobs: int

    @property
    def end(self) -> float:
        return self.at + self.seconds


@dataclass(frozen=True)
class OpStats:
    """One operation over one phase: calls overlapping it, jobs finished in it and their rate,
    and the latency of the overlapping calls (ms)."""

    calls: int
    jobs: int
    per_second: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass(frozen=True)
class Phase:
    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of non-empty ``values``."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(min(rank, len(ordered))) - 1]


def phase_stats(calls: Sequence[Call], phase: Phase, op: str) -> OpStats:
    """``op``'s figures over ``phase``: latencies of the calls overlapping it (one blocked across
    the phase's start counts), jobs of the calls that ended in it for the rate."""
    mine = [c for c in calls if c.op == op and c.at < phase.end and c.end >= phase.start]
    ended = [c for c in mine if phase.start <= c.end < phase.end]
    jobs = sum(c.jobs for c in ended)
    rate = jobs / phase.seconds if phase.seconds > 0 else 0.0
    lat = [c.seconds * 1000.0 for c in mine]
    if not lat:
        return OpStats(0, jobs, rate, None, None, None)
    return OpStats(len(mine), jobs, rate, percentile(lat, 50), percentile(lat, 99), max(lat))


def parse_move_output(text: str) -> tuple[int, int, float] | None:
    """``(moved, batches, seconds)`` from ``tenure history move``'s last line; None if absent."""
    match = MOVE_OUTPUT.search(text)
    return (int(match.group(1)), int(match.group(2)), float(match.group(3))) if match else None


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.1f}")


# -- SQL and subprocesses -----------------------------------------------------------------------
@lru_cache(maxsize=None)
def queries(schema: str = SCHEMA) -> dict[str, str]:
    from tenure.core.queries import parse_named_queries, quote_ident
    text = Path(__file__).with_name("history_migration.sql").read_text(encoding="utf-8")
    quoted = quote_ident(schema)
    return {name: sql.replace("{schema}", quoted) for name, (_, sql) in parse_named_queries(text).items()}


def src_env(src: Path) -> dict[str, str]:
    """The environment of a subprocess running the tenure in ``src`` (and this checkout's bench)."""
    return code_env(src, TENURE_LOG_LEVEL="WARNING")


def tenure_cli(src: Path, dsn: str, *argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``tenure ARGV`` of the code in ``src``; its wall time and result (raises on failure)."""
    cmd = [sys.executable, "-m", "tenure.cli", "--database-url", dsn, "--schema", SCHEMA, *argv]
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=src_env(src), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise RuntimeError(f"tenure {' '.join(argv)} failed ({res.returncode}): {res.stderr[-1500:]}")
    return wall, res


def before_source(given: Path | None) -> Path:
    """The ``src`` directory of the code before 0009 (extracted from ``main`` unless given)."""
    base = given or BEFORE_SRC_DEFAULT
    src = base / "src" if (base / "src" / "tenure").is_dir() else base
    if not (src / "tenure").is_dir():
        if given is not None:
            raise SystemExit(f"--before-src {given}: no tenure package under it (or its src/)")
        base.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "main", "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        src = base / "src"
        log(f"extracted main's src into {src}")
    migrations = sorted((src / "tenure" / "core" / "sql" / "migrations").glob("*.sql"))
    if any(m.name.startswith("0009") for m in migrations):
        raise SystemExit(f"{src} already has migration 0009: pass the code before it as --before-src")
    return src


# -- the workload (one process per role) ----------------------------------------------------------
class _Stop:
    flag = False


def _on_term(signum: int, frame: Any) -> None:
    _Stop.flag = True


def workload_main(args: argparse.Namespace) -> int:
    """``workload produce|work``: enqueue at ``--rate``, or claim and complete, until SIGTERM; every
    call timed, written as JSON to ``--out`` at exit (with how many jobs the producer created)."""
    from tenure.core.db import connect
    from tenure.core.repository import Repository
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    calls: list[tuple[float, str, float, int]] = []
    created = 0
    errors: list[str] = []
    conn = connect(args.dsn, application_name=f"bench-history-{args.role}")
    repo = Repository(conn, SCHEMA)
    worker_id = f"bench-history-{args.tag}-{os.getpid()}"
    print("READY", flush=True)
    clock, perf = time.time, time.perf_counter
    i = 0
    next_at = perf()
    try:
        while not _Stop.flag:
            if args.role == "produce":
                now = perf()
                if now < next_at:
                    time.sleep(next_at - now)
                    continue
                next_at = max(next_at + 1.0 / args.rate, now - 1.0)  # catch up at most 1 s behind
                i += 1
                key = f"hb-{args.tag}-{os.getpid()}-{i}" if i % KEY_EVERY == 0 else None
                at, t0 = clock(), perf()
                result = repo.enqueue(TASK, {"i": i}, queue=QUEUE, idempotency_key=key)
                calls.append((at, "enqueue", perf() - t0, 1))
                created += int(result.created)
            else:
                at, t0 = clock(), perf()
                jobs = repo.claim(worker_id, [QUEUE], CLAIM_BATCH, 60.0)
                calls.append((at, "claim", perf() - t0, len(jobs)))
                if not jobs:
                    time.sleep(0.02)
                    continue
                at, t0 = clock(), perf()
                done = repo.complete_many(worker_id, [(j.id, j.lock_token) for j in jobs])
                calls.append((at, "complete", perf() - t0, sum(done.values())))
    except Exception as exc:  # noqa: BLE001 - reported by the parent, which fails the run
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
        Path(args.out).write_text(json.dumps({"calls": calls, "created": created, "errors": errors}))
    return 1 if errors else 0


class Workload:
    """A producer and two workers of the code in ``src``, started together, stopped together."""

    def __init__(self, src: Path, dsn: str, tag: str, rate: float, out_dir: Path) -> None:
        self.outs = [out_dir / f"{tag}-{role}{n}.json" for role, n in (("produce", 0), ("work", 1), ("work", 2))]
        self.procs = []
        for out in self.outs:
            role = "produce" if "produce" in out.name else "work"
            cmd = [sys.executable, "-m", "bench.experiments.history_migration", "workload", role, "--dsn", dsn,
                   "--out", str(out), "--tag", tag, "--rate", str(rate)]
            self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=src_env(src), stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True))
        for p in self.procs:
            assert p.stdout is not None
            if "READY" not in p.stdout.readline():
                raise RuntimeError(f"workload process failed to start: {p.stderr.read() if p.stderr else ''}")

    def stop(self, roles: tuple[str, ...] = ("produce", "work")) -> None:
        for p, out in zip(self.procs, self.outs):
            if any(r in out.name for r in roles) and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, out in zip(self.procs, self.outs):
            if any(r in out.name for r in roles):
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def results(self) -> tuple[list[Call], int, list[str]]:
        calls: list[Call] = []
        created = 0
        errors: list[str] = []
        for p, out in zip(self.procs, self.outs):
            if not out.exists():
                errors.append(f"{out.name}: no results (exit {p.returncode}): "
                              f"{p.stderr.read()[-800:] if p.stderr else ''}")
                continue
            data = json.loads(out.read_text())
            calls += [Call(float(a), str(o), float(s), int(n)) for a, o, s, n in data["calls"]]
            created += int(data["created"])
            errors += [f"{out.name}: {e}" for e in data["errors"]]
        return calls, created, errors


# -- the seed ---------------------------------------------------------------------------------
def seed_main(args: argparse.Namespace) -> int:
    """``seed``: bench/experiments/ui_seed.py's seed with the tenure on PYTHONPATH (the code before 0009)."""
    from bench.experiments.ui_seed import seed
    result = seed(args.dsn, SCHEMA, args.jobs, reuse=not args.reseed)
    print(json.dumps({"seeded_now": result.seeded_now, "seconds": result.seconds, "counts": result.counts}))
    return 0


def seed_database(server: Any, before: Path, jobs: int, reseed: bool) -> str:
    """The name of a database holding a finished pre-0009 seed of ``jobs`` jobs (made if needed)."""
    import psycopg

    from bench.experiments.ui_seed import ensure_database
    name = f"tenure_history_seed_{jobs}"
    dsn = ensure_database(server.admin_dsn, name)
    done, version = False, 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            row = conn.execute(queries()["seed_done"], {"total": jobs}).fetchone()
            done, version = bool(row and row[0]), int(row[1]) if row else 0
        except psycopg.errors.UndefinedTable:
            pass
    if done and version == 8 and not reseed:
        log(f"reusing the pre-0009 seed of {jobs:,} jobs in database {name}")
        return name
    log(f"seeding {jobs:,} jobs into database {name} with the code before 0009 ({before})")
    cmd = [sys.executable, "-m", "bench.experiments.history_migration", "seed", "--dsn", dsn, "--jobs", str(jobs),
           *(["--reseed"] if reseed or (done and version != 8) else [])]
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, env=src_env(before), check=True, stdout=sys.stderr)
    log(f"seeded in {time.monotonic() - t0:.0f} s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(queries()["seed_done"], {"total": jobs}).fetchone()
    if not row or not row[0] or int(row[1]) != 8:
        raise RuntimeError(f"the seed in {name} is not a finished version-8 schema: {row}")
    return name


def copy_database(server: Any, template: str, name: str) -> tuple[str, float]:
    import psycopg

    from tenure.core.queries import quote_ident
    t0 = time.monotonic()
    with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {quote_ident(name)} TEMPLATE {quote_ident(template)} STRATEGY file_copy")
    return str(server.dsn(name)), time.monotonic() - t0


# -- the run ----------------------------------------------------------------------------------
def explain_batch(dsn: str, batch: int) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the move's first batch (span, partitions, move), rolled back."""
    from tenure.core.db import connect
    from tenure.core.queries import named_queries
    q = named_queries(SCHEMA)
    lines: list[str] = []
    with connect(dsn, autocommit=False) as conn:
        span = conn.execute(q["job_history_move_span"], {"after_id": 0, "batch": batch}).fetchone()
        if span is None:
            return ["nothing to move"]
        steps = (("job_history_move_span", {"after_id": 0, "batch": batch}),
                 ("job_history_ensure_days", {"schema": SCHEMA, "first_day": span["first_day"],
                                              "last_day": span["last_day"]}),
                 ("job_history_move_batch", {"after_id": 0, "last_id": span["last_id"]}))
        for name, params in steps:
            lines.append(f"-- {name} {json.dumps(params, default=str)}")
            lines += [str(r["QUERY PLAN"]) for r in
                      conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + q[name], params).fetchall()]
        conn.rollback()
    return lines


def run(args: argparse.Namespace) -> int:
    import psycopg

    from bench.server import DATADIR_DEFAULT, start_server
    before = before_source(args.before_src)
    server = start_server(args.datadir or DATADIR_DEFAULT)
    seed_name = seed_database(server, before, args.jobs, args.reseed)
    dsn, copy_s = copy_database(server, seed_name, RUN_DATABASE)
    log(f"copied the seed into {RUN_DATABASE} in {copy_s:.1f} s")
    q = queries()
    report: dict[str, Any] = {"jobs": args.jobs, "rate": args.rate, "window_s": args.window, "batch": args.batch,
                              "copy_seconds": copy_s, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "load_average_start": os.getloadavg()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute(q["schema_version"]).fetchone()
        before_counts = {str(r[0]): int(r[1]) for r in conn.execute(q["status_counts"]).fetchall()}
        conn.execute(q["keys_snapshot"])
        sample = [int(r[0]) for r in conn.execute(q["completed_sample"], {"total": args.jobs}).fetchall()]
        size = conn.execute(q["database_size"]).fetchone()
    assert version is not None and size is not None
    total_before = sum(before_counts.values())
    report.update(schema_before=int(version[0]), counts_before=before_counts, database_bytes=int(size[0]))
    log(f"installation at schema version {version[0]}: {total_before:,} jobs {before_counts}, "
        f"{int(size[0]) / 2**30:.1f} GiB")
    out_dir = RESULTS_DIR / f"history-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    phases: list[Phase] = []

    def window(name: str, seconds: float) -> None:
        t0 = time.time()
        time.sleep(seconds)
        phases.append(Phase(name, t0, time.time()))
        log(f"  phase {name}: {seconds:.0f} s")

    old = Workload(before, dsn, "old", args.rate, out_dir)
    new: Workload | None = None
    try:
        time.sleep(args.warmup)
        window("before migrate (old code)", args.window)
        t0 = time.time()
        migrate_s, res = tenure_cli(NEW_SRC, dsn, "migrate")
        phases.append(Phase("during migrate (old code)", t0, time.time()))
        report["migrate"] = {"seconds": migrate_s, "output": res.stdout.strip()}
        log(f"tenure migrate: {migrate_s:.2f} s: {res.stdout.strip()}")
        window("after migrate (old code)", args.window)
        old.stop()
        explain = explain_batch(dsn, args.batch)
        report["explain"] = explain
        new = Workload(NEW_SRC, dsn, "new", args.rate, out_dir)
        time.sleep(args.warmup)
        window("before move (new code)", args.window)
        t0 = time.time()
        move_s, res = tenure_cli(NEW_SRC, dsn, "history", "move", "--batch", str(args.batch))
        phases.append(Phase("during move (new code)", t0, time.time()))
        parsed = parse_move_output(res.stdout)
        report["move"] = {"seconds": move_s, "output": res.stdout.strip(), "moved": parsed[0] if parsed else None,
                          "batches": parsed[1] if parsed else None,
                          "rows_per_second": parsed[0] / move_s if parsed else None}
        log(f"tenure history move: {move_s:.1f} s wall: {res.stdout.strip()}")
        window("after move (new code)", args.window)
        new.stop(("produce",))
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while (row := conn.execute(q["workload_left"], {"queue": QUEUE}).fetchone()) and row[0] > 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the workload's {row[0]} jobs were not finished within 60 s")
                time.sleep(0.2)
        new.stop()
    finally:
        old.stop()
        if new is not None:
            new.stop()
    calls, created, errors = old.results()
    if new is not None:
        c2, n2, e2 = new.results()
        calls, created, errors = calls + c2, created + n2, errors + e2
    report["workload_errors"] = errors
    report["phases"] = {p.name: {"seconds": p.seconds, **{op: phase_stats(calls, p, op).__dict__
                                                          for op in ("enqueue", "claim", "complete")}}
                        for p in phases}
    report["checks"] = checks(dsn, args, total_before, created, sample)
    report["load_average_end"] = os.getloadavg()
    print_report(report)
    out = out_dir / "report.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    log(f"results written to {out}")
    failed = [k for k, v in report["checks"].items() if isinstance(v, dict) and v.get("ok") is False]
    return 1 if failed or errors else 0


def checks(dsn: str, args: argparse.Namespace, total_before: int, created: int, sample: list[int]) -> dict[str, Any]:
    import psycopg
    q = queries()
    with psycopg.connect(dsn, autocommit=True) as conn:
        t = conn.execute(q["totals_after"]).fetchone()
        missing = conn.execute(q["keys_missing"]).fetchone()
        workload = [tuple(r) for r in conn.execute(q["workload_counts"], {"queue": QUEUE}).fetchall()]
        parts = conn.execute(q["partition_count"]).fetchone()
        version = conn.execute(q["schema_version"]).fetchone()
    assert t is not None and missing is not None and parts is not None and version is not None
    hot, history, completed_hot, in_default, keys = (int(x) for x in t)
    out: dict[str, Any] = {
        "schema_after": {"version": int(version[0]), "ok": int(version[0]) == 9},
        "job_count": {"hot": hot, "history": history, "expected": total_before + created,
                      "ok": hot + history == total_before + created},
        "completed_left_in_jobs": {"n": completed_hot, "ok": completed_hot == 0},
        "pre_existing_keys_missing": {"n": int(missing[0]), "ok": int(missing[0]) == 0},
        "history_default_partition_rows": in_default,
        "history_partitions": int(parts[0]),
        "job_keys_rows": keys,
        "workload_jobs": [{"status": s, "n": n, "keyed": k, "keys_missing_from_job_keys": m}
                          for s, n, k, m in workload],
    }
    tenure_cli(NEW_SRC, dsn, "jobs", "show", str(sample[0]))  # the text form too (raises on failure)
    shows = []
    for job_id in sample:
        _, res = tenure_cli(NEW_SRC, dsn, "jobs", "show", str(job_id), "--json")
        doc = json.loads(res.stdout)
        job = doc.get("job", doc)
        shows.append({"id": job_id, "status": job.get("status"), "events": len(doc.get("events", []))})
    out["jobs_show_moved"] = {"jobs": shows, "ok": bool(shows) and all(s["status"] == "completed" and s["events"] > 0
                                                                       for s in shows)}
    return out


def print_report(report: dict[str, Any]) -> None:
    from bench import stats
    mv = report["move"]
    print(f"\n## Migration 0009 on {report['jobs']:,} jobs (workload {report['rate']:.0f} enqueues/s, "
          f"2 workers claiming {CLAIM_BATCH})")
    print(f"tenure migrate: {report['migrate']['seconds']:.2f} s wall ({report['migrate']['output']})")
    rate = f"{mv['rows_per_second']:,.0f} rows/s" if mv["rows_per_second"] else "-"
    print(f"tenure history move --batch {report['batch']}: {mv['seconds']:.1f} s wall, {mv['moved']:,} rows in "
          f"{mv['batches']} batches, {rate}")
    rows = []
    for name, p in report["phases"].items():
        e, c, d = p["enqueue"], p["claim"], p["complete"]
        rows.append([name, f"{p['seconds']:.1f}", f"{e['per_second']:.0f}", f"{d['per_second']:.0f}",
                     f"{fmt_ms(e['p50_ms'])} / {fmt_ms(e['p99_ms'])} / {fmt_ms(e['max_ms'])}",
                     f"{fmt_ms(c['p50_ms'])} / {fmt_ms(c['p99_ms'])} / {fmt_ms(c['max_ms'])}",
                     f"{fmt_ms(d['p50_ms'])} / {fmt_ms(d['p99_ms'])} / {fmt_ms(d['max_ms'])}"])
    print(stats.table(["phase", "s", "enqueued/s", "completed/s", "enqueue ms p50/p99/max",
                       "claim ms p50/p99/max", "complete ms p50/p99/max"], rows))
    print("\nchecks:")
    for name, value in report["checks"].items():
        print(f"  {name}: {json.dumps(value, default=str)}")
    print("\nEXPLAIN (ANALYZE, BUFFERS) of the move's first batch (rolled back):")
    print("\n".join("    " + line for line in report["explain"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.history_migration",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    wl = sub.add_parser("workload", help="(internal) one workload process")
    wl.add_argument("role", choices=["produce", "work"])
    wl.add_argument("--dsn", required=True)
    wl.add_argument("--out", required=True)
    wl.add_argument("--tag", default="run")
    wl.add_argument("--rate", type=float, default=100.0)
    sd = sub.add_parser("seed", help="(internal) seed with the tenure on PYTHONPATH")
    sd.add_argument("--dsn", required=True)
    sd.add_argument("--jobs", type=int, required=True)
    sd.add_argument("--reseed", action="store_true")
    parser.add_argument("--jobs", type=int, default=5_000_000)
    add_before_src(parser, f"the tenure sources before 0009 (default: main's, extracted into {BEFORE_SRC_DEFAULT})")
    parser.add_argument("--reseed", action="store_true", help="redo the seed even if a finished one exists")
    parser.add_argument("--rate", type=float, default=50.0, help="workload enqueues per second (default 50)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each before/after phase (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds after a workload starts (default 3)")
    parser.add_argument("--batch", type=int, default=10_000, help="tenure history move --batch (default 10000)")
    parser.add_argument("--datadir", type=Path, default=None,
                        help="the embedded server's data directory (default: the bench's, bench/server.py)")
    args = parser.parse_args(argv)
    if args.command == "workload":
        return workload_main(args)
    if args.command == "seed":
        return seed_main(args)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
