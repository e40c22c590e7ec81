"""What a user sees: whole worker processes from each system's own CLI, timed from outside.

One *contender* is a system plus a configuration, run as N worker processes of its command
line (``tenure worker --burst …``, ``pgq run … --mode drain``) against a fresh database holding
an identical backlog of no-op jobs (job ``i`` carries ``bench.payloads.payload(i, --payload-bytes)``,
the same bytes for every contender, the floor's table included). The runner interleaves
contenders (A B C A B C …) and for each run reports, measured from outside the workers:

- **steady state**: jobs finished between 10 % and 90 % of the backlog, divided by the time
  between those two moments, polled from the database every ``POLL`` seconds (or every 0.5 % of
  the elapsed time, whichever is longer);
- **end to end**: the backlog divided by the time from spawning the processes to the last
  one exiting (imports, connecting, schema checks, ramp-up, the tail and the exit included);
- **CPU per job**: worker CPU (``wait4`` rusage of every process, all threads) plus database
  CPU (the postmaster, its live children and its reaped children), over the whole run and over
  the steady window (psutil samples at 10 % and 90 %).

The "floor" contender is pgbench running ``bench/floor.sql`` (claim 100 with SKIP LOCKED, complete
by token; no Python, no audit, no lease) on the same backlog size: the physical limit here.

Limits: the progress probe itself costs the database a little (one count over a shrinking
partial index or table per poll, the same for every system); on a shared 2-core machine only
ratios from the same run mean anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import stats
from bench.console import log
from bench.payloads import describe
from bench.server import code_env, processes_cpu
from bench.sqlfile import FLOOR_SCRIPT, bench_queries

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
POLL = 0.02
QUICK_BACKLOG = 40_000
FULL_BACKLOG = 40_000


@dataclass(frozen=True)
class Contender:
    """A system and a configuration; ``argv`` is one process's command line (``{dsn}`` filled in)."""

    key: str
    system: str  # tenure | pgqueuer | floor
    processes: int
    argv: tuple[str, ...]
    describe: str
    stop_when_done: bool = False
    """Send SIGTERM once the backlog is done (for workers without a drain/burst mode)."""
    base: bool = False
    """Run the tenure sources given by ``--before-src`` (formerly ``--base-src``; an older checkout) instead of this one."""


def tenure_cli(*extra: str, app: str = "bench.apps:async_app", burst: bool = True) -> tuple[str, ...]:
    exe = BIN / "tenure"
    head = (str(exe),) if exe.exists() else (sys.executable, "-m", "tenure.cli")
    return (*head, "--database-url", "{dsn}", "worker", "--app", app, *(("--burst",) if burst else ()), *extra)


def pgq_cli(*extra: str, mode: str = "drain") -> tuple[str, ...]:
    # `pgq run bench.apps:pgqueuer_factory --mode drain …` minus its broken log setup (bench/apps.py).
    return (sys.executable, "-m", "bench.apps", "pgqueuer", "--mode", mode, *extra)


CONTENDERS: dict[str, Contender] = {c.key: c for c in (
    Contender("tenure", "tenure", 2, tenure_cli("--concurrency", "200", "--claim-batch", "100"),
              "2 × tenure worker --burst --concurrency 200 --claim-batch 100, async handler"),
    Contender("pgqueuer", "pgqueuer", 2, pgq_cli("--batch-size", "100"),
              "2 × pgqueuer.run(--mode drain --batch-size 100), as `pgq run` (PgQueuer over asyncpg, uvloop)"),
    Contender("tenure-oob", "tenure", 1, tenure_cli(app="bench.apps:sync_app"),
              "1 × tenure worker --burst, defaults, sync handler"),
    Contender("pgqueuer-oob", "pgqueuer", 1, pgq_cli(),
              "1 × pgqueuer.run(--mode drain), defaults (batch 10; async handler: pgqueuer has no sync ones)"),
    # The previous harness's processes, kept to show where the two harnesses differ.
    Contender("tenure-lib", "tenure", 2,
              (sys.executable, "-m", "bench.worker", "tenure", "work", "--dsn", "{dsn}", "--concurrency", "200",
               "--batch", "100", "--handler", "async"),
              "old harness: 2 × bench.worker (Worker in-process, uvloop, logging at ERROR)", stop_when_done=True),
    Contender("pgqueuer-qm", "pgqueuer", 2,
              (sys.executable, "-m", "bench.worker", "pgqueuer", "work", "--dsn", "{dsn}", "--batch", "100"),
              "old harness: 2 × QueueManager.run(batch_size=100), continuous mode", stop_when_done=True),
    Contender("tenure-base", "tenure", 2,
              (sys.executable, "-m", "tenure.cli", "--database-url", "{dsn}", "worker", "--app",
               "bench.apps:async_app", "--burst", "--concurrency", "200", "--claim-batch", "100"),
              "as `tenure`, with the sources of --before-src (before/after in one run)", base=True),
    Contender("tenure-oob-base", "tenure", 1,
              (sys.executable, "-m", "tenure.cli", "--database-url", "{dsn}", "worker", "--app",
               "bench.apps:sync_app", "--burst"),
              "as `tenure-oob`, with the sources of --before-src", base=True),
    Contender("floor", "floor", 2, (), "pgbench, 2 clients, claim 100 SKIP LOCKED + complete by token"),
)}
BEST = ("tenure", "pgqueuer")
OUT_OF_THE_BOX = ("tenure-oob", "pgqueuer-oob")
DEFAULT_SET = ("tenure", "pgqueuer", "tenure-oob", "pgqueuer-oob", "floor")
PAIRS = (("tenure", "pgqueuer"), ("tenure-oob", "pgqueuer-oob"), ("tenure-lib", "pgqueuer-qm"),
         ("tenure", "floor"), ("tenure", "tenure-base"), ("tenure-base", "pgqueuer"),
         ("tenure-oob", "tenure-oob-base"), ("tenure-oob-base", "pgqueuer-oob"), ("tenure", "tenure-lib"),
         ("pgqueuer", "pgqueuer-qm"))


@dataclass
class CompareResult:
    key: str
    jobs: int
    steady_rate: float
    e2e_rate: float
    e2e_seconds: float
    first_done_seconds: float
    """Spawn to the first finished job (start-up as a user sees it)."""
    tail_seconds: float
    """Last job finished to the last process exiting."""
    worker_cpu_per_job_us: float
    db_cpu_per_job_us: float
    steady_worker_cpu_per_job_us: float
    steady_db_cpu_per_job_us: float
    load_average: float
    extra: dict[str, Any] = field(default_factory=dict)


def db_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: postmaster, live children, and children it reaped."""
    total = 0.0
    try:
        root = psutil.Process(postmaster)
        t = root.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
        total += processes_cpu(root.children(recursive=False))
    except psutil.Error:
        pass
    return total


class _Waiter(threading.Thread):
    """Reaps one child with wait4: its exit time and its total CPU (all threads)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.ended: float | None = None
        self.cpu = 0.0
        self.status = 0

    def run(self) -> None:
        _, status, ru = os.wait4(self.proc.pid, 0)
        self.ended = time.monotonic()
        self.cpu = ru.ru_utime + ru.ru_stime
        self.status = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.status


def prepare(server: Any, system: str, n: int, *, base_src: Path | None = None, payload_bytes: int = 0) -> str:
    """A fresh database with ``n`` no-op jobs enqueued through the system's own batch API
    (``base_src``: tenure's schema and fill from those older sources, as its workers expect);
    job ``i`` carries ``payloads.payload(i, payload_bytes)`` (0: empty, as before)."""
    from bench.systems import bulk_insert, fill, install
    dsn: str = server.fresh_db(f"bench_cmp_{system}")
    if base_src is not None and system == "tenure":
        env = code_env(base_src)
        subprocess.run([sys.executable, "-c", "import sys; from bench.systems import fill, install; "
                        "install('tenure', sys.argv[1]); "
                        "fill('tenure', sys.argv[1], int(sys.argv[2]), payload_bytes=int(sys.argv[3]))",
                        dsn, str(n), str(payload_bytes)],
                       check=True, cwd=ROOT, env=env)
    elif system == "floor":
        q = bench_queries()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(q["floor_create"])
            bulk_insert(conn, "floor_fill", n, payload_bytes)
            conn.execute(q["floor_vacuum"])
    else:
        install(system, dsn)
        fill(system, dsn, n, payload_bytes=payload_bytes)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the fill's dirty pages are not written during the run
    return dsn


def remaining_sql(system: str) -> str:
    q = bench_queries("tenure")
    return {"tenure": q["tenure_remaining"], "pgqueuer": q["pgqueuer_remaining"],
            "floor": q["floor_remaining"]}[system]


def run_one(server: Any, c: Contender, n: int, *, timeout: float = 300.0, base_src: Path | None = None,
            dsn: str | None = None, trace: bool = False, poll_floor: float = POLL,
            poll_cost_factor: float = 0.0, poll_share: float = 0.005, payload_bytes: int = 0) -> CompareResult:
    """One run of contender ``c`` on a fresh backlog of ``n`` jobs of ``payload_bytes`` payloads
    (``prepare``; or on ``dsn``, already holding them). ``trace``: keep every poll as ``(seconds
    since spawn, jobs done)`` in ``extra["samples"]`` (the time is taken before the count, whose
    snapshot is the statement's start). ``poll_floor``:
    the shortest interval between polls once the first job is done (before it, ``POLL``);
    ``poll_cost_factor``: wait at least that many times the last poll's own duration (the count
    costs ~300 ms at 1.5M remaining jobs: 10 keeps the probe under 10 % of one core);
    ``poll_share``: and at least that share of the time elapsed since the spawn."""
    if c.base and base_src is None:
        raise RuntimeError(f"{c.key} needs --before-src (a directory holding an older src/tenure)")
    dsn = dsn or prepare(server, c.system, n, base_src=base_src if c.base else None,
                         payload_bytes=payload_bytes)
    # The probe's count scans the whole table at a large backlog (5-15 ms per poll at 200k, as a
    # parallel scan with two more processes): one process only, and its CPU is taken out of the
    # database's figure below, so that figure is the contender's own.
    probe = psycopg.connect(dsn, autocommit=True, options="-c max_parallel_workers_per_gather=0")
    probe_row = probe.execute("SELECT pg_backend_pid()").fetchone()
    assert probe_row is not None
    probe_backend = psutil.Process(int(probe_row[0]))

    def contender_db_cpu() -> float:
        return db_cpu(server.postmaster_pid) - processes_cpu([probe_backend])
    sql = remaining_sql(c.system)
    # base_src is set for a *-base contender: checked before the backlog was prepared
    env = code_env(base_src if c.base else None, BENCH_DSN=dsn)
    env.pop("TENURE_DATABASE_URL", None)
    if c.system == "floor":
        from tenure.core.embedded import bin_dir
        # One spare transaction per client: near the end SKIP LOCKED can hand a claim fewer than
        # 100 rows, and the spare ones (claiming nothing) make sure the whole backlog drains.
        per_client = n // (100 * c.processes) + 1
        argv = [str(bin_dir() / "pgbench"), "-n", "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres",
                "-c", str(c.processes), "-j", str(c.processes), "-t", str(per_client), "-D", "batch=100",
                "-f", str(FLOOR_SCRIPT), dsn.rsplit("/", 1)[1]]
        cmds = [argv]
    else:
        cmds = [[a.replace("{dsn}", dsn) for a in c.argv] for _ in range(c.processes)]
    logs = tempfile.TemporaryDirectory(prefix="bench-cmp-")
    db0 = contender_db_cpu()
    t0 = time.monotonic()
    procs = []
    for i, cmd in enumerate(cmds):
        out = open(Path(logs.name) / f"p{i}.log", "wb")
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        out.close()
    waiters = [_Waiter(p) for p in procs]
    for w in waiters:
        w.start()
    ps = [psutil.Process(p.pid) for p in procs]

    def worker_cpu_live() -> float:
        return processes_cpu(ps)

    marks: dict[str, tuple[float, int, float, float]] = {}
    first_done: float | None = None
    last_done: float | None = None
    done = 0
    stopped = False
    samples: list[tuple[float, int]] = []
    try:
        while True:
            before = time.monotonic()
            row = probe.execute(sql).fetchone()
            now = time.monotonic()
            done = n - int(row[0] if row else 0)
            if trace:
                samples.append((before - t0, done))
            if first_done is None and done > 0:
                first_done = now
            for name, frac in (("p10", 0.1), ("p90", 0.9)):
                if name not in marks and done >= frac * n:
                    marks[name] = (now, done, worker_cpu_live(), contender_db_cpu())
            if done >= n and last_done is None:
                last_done = now
                if c.stop_when_done and not stopped:
                    for p in procs:
                        p.terminate()
                    stopped = True
            if all(w.ended is not None for w in waiters):
                break
            if now - t0 > timeout:
                raise RuntimeError(f"{c.key}: not finished after {timeout:.0f}s ({done:,}/{n:,} done)")
            # The probe costs the server 1-15 ms per poll: poll less often as a run gets longer, so
            # a slow contender does not pay more probe CPU per job (0.5 % of the elapsed time).
            time.sleep(max(POLL if first_done is None else poll_floor, poll_share * (now - t0),
                           poll_cost_factor * (now - before)))
    finally:
        for p in procs:
            if p.poll() is None and not any(w.ended for w in waiters if w.proc is p):
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
        for w in waiters:
            w.join(timeout=10)
        db1 = contender_db_cpu()  # while the probe's backend is still there to be taken out
        probe.close()
    t_end = max(w.ended or time.monotonic() for w in waiters)
    bad = [w.status for w in waiters if w.status not in (0, -15)]
    if bad or done < n:
        text = "".join((Path(logs.name) / f"p{i}.log").read_text(errors="replace")[-600:] for i in range(len(cmds)))
        logs.cleanup()
        raise RuntimeError(f"{c.key}: exit {bad}, {done:,}/{n:,} done: {text}")
    logs.cleanup()
    (a_t, a_d, a_w, a_db), (b_t, b_d, b_w, b_db) = marks["p10"], marks["p90"]
    steady_jobs = b_d - a_d
    worker_total = sum(w.cpu for w in waiters)
    assert first_done is not None and last_done is not None
    return CompareResult(
        key=c.key, jobs=n, steady_rate=stats.throughput(steady_jobs, b_t - a_t),
        e2e_rate=stats.throughput(n, t_end - t0), e2e_seconds=t_end - t0,
        first_done_seconds=first_done - t0, tail_seconds=max(0.0, t_end - last_done),
        worker_cpu_per_job_us=worker_total / n * 1e6, db_cpu_per_job_us=(db1 - db0) / n * 1e6,
        steady_worker_cpu_per_job_us=(b_w - a_w) / steady_jobs * 1e6 if steady_jobs else float("nan"),
        steady_db_cpu_per_job_us=(b_db - a_db) / steady_jobs * 1e6 if steady_jobs else float("nan"),
        load_average=os.getloadavg()[0], extra={"samples": samples} if trace else {})


def _med(rs: list[CompareResult], attr: str) -> stats.Summary | None:
    return stats.summarize([getattr(r, attr) for r in rs])


def table(results: dict[str, list[CompareResult]], n: int, payload_bytes: int = 0) -> tuple[str, dict[str, Any]]:
    """The comparison tables (medians with min–max) and their JSON form."""
    rows = []
    data: dict[str, Any] = {"backlog": n, "payload_bytes": payload_bytes, "contenders": {}, "ratios": {}}
    for key, rs in results.items():
        if not rs:
            continue
        c = CONTENDERS[key]
        st, e2e = _med(rs, "steady_rate"), _med(rs, "e2e_rate")
        cpu = stats.summarize([r.worker_cpu_per_job_us + r.db_cpu_per_job_us for r in rs])
        scpu_w, scpu_d = _med(rs, "steady_worker_cpu_per_job_us"), _med(rs, "steady_db_cpu_per_job_us")
        start, tail = _med(rs, "first_done_seconds"), _med(rs, "tail_seconds")
        rows.append([key, c.describe, stats.fmt_summary(st, "/s"), stats.fmt_summary(e2e, "/s"),
                     f"{start.median:.2f} s" if start else "-", f"{tail.median:.2f} s" if tail else "-",
                     f"{scpu_w.median:.0f} + {scpu_d.median:.0f} µs" if scpu_w and scpu_d else "-",
                     stats.fmt_num(cpu.median if cpu else None, " µs")])
        data["contenders"][key] = {"config": c.describe, "steady": st.as_dict() if st else None,
                                   "e2e": e2e.as_dict() if e2e else None,
                                   "runs": [asdict(r) for r in rs]}
    text = stats.table(["contender", "config", "steady jobs/s", "end-to-end jobs/s", "spawn→first done",
                        "last done→exit", "steady CPU/job worker + DB", "run CPU/job (all)"], rows)
    ratio_rows = []
    for a, b in PAIRS:
        if not results.get(a) or not results.get(b):
            continue
        ra = {"steady": stats.ratio(_med(results[a], "steady_rate"), _med(results[b], "steady_rate")),
              "e2e": stats.ratio(_med(results[a], "e2e_rate"), _med(results[b], "e2e_rate"))}
        per_run = [x.steady_rate / y.steady_rate for x, y in zip(results[a], results[b]) if y.steady_rate]
        spread = stats.summarize(per_run)
        data["ratios"][f"{a}/{b}"] = {**ra, "steady_per_run": per_run}
        ratio_rows.append([f"{a} ÷ {b}", stats.fmt_ratio(ra["steady"]), stats.fmt_ratio(ra["e2e"]),
                           f"{spread.low:.2f}–{spread.high:.2f}×" if spread else "-"])
    text += "\n\n" + stats.table(["ratio (medians)", "steady", "end to end", "steady, per run (min–max)"],
                                 ratio_rows)
    return text, data


def compile_sources() -> None:
    """Byte-compile tenure and the bench once, as a wheel install or the image does (an editable
    install under PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every module per process)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src"), str(ROOT / "bench")],
                   check=False, stdout=subprocess.DEVNULL)


def scenario_compare(server: Any, args: Any, rep: Any) -> None:
    """Interleaved CLI-process comparison (see the module docstring)."""
    compile_sources()
    n = args.backlog or (QUICK_BACKLOG if args.quick else FULL_BACKLOG)
    keys = tuple(args.contenders or DEFAULT_SET)
    runs = args.runs
    results: dict[str, list[CompareResult]] = {k: [] for k in keys}
    failures: list[str] = []
    for run, key in stats.interleave(list(keys), runs):
        try:
            r = run_one(server, CONTENDERS[key], n, base_src=args.before_src, timeout=max(300.0, n / 50),
                        payload_bytes=args.payload_bytes)
        except RuntimeError as exc:  # one stuck or failed run must not lose the others
            failures.append(f"run {run + 1} {key}: {str(exc)[:300]}")
            log(f"  [compare {run + 1}/{runs}] {key}: FAILED: {str(exc)[:300]}")
            continue
        results[key].append(r)
        log(f"  [compare {run + 1}/{runs}] {key}: steady {r.steady_rate:,.0f}/s, end to end {r.e2e_rate:,.0f}/s "
            f"({r.e2e_seconds:.2f} s; first job done at {r.first_done_seconds:.2f} s, exit {r.tail_seconds:.2f} s "
            f"after the last), CPU/job steady {r.steady_worker_cpu_per_job_us:.0f} + "
            f"{r.steady_db_cpu_per_job_us:.0f} µs, load {r.load_average:.1f}")
    text, data = table(results, n, args.payload_bytes)
    data["failures"] = failures
    if failures:
        text += "\n\nfailed runs (not in the medians):\n" + "\n".join(f"- {f}" for f in failures)
    rep.data["compare"] = data
    rep.add(f"CLI processes timed from outside, backlog {n:,} no-op jobs, {describe(args.payload_bytes)}, "
            f"{runs} interleaved run(s)", text)
