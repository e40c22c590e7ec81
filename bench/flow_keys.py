"""Flow keys and per-key running limits on the drain (issue 38): what does a limit cost?

``python -m bench --scenario flow-keys [--quick] [--flow-keys-jobs N] [--payload-bytes N] [--runs R]``:
three variants of one drain, each on a fresh database holding ``N`` no-op jobs (default 50,000;
10,000 with ``--quick``) with ``bench.payloads`` payloads, enqueued through ``enqueue_many``, then
``ANALYZE`` and ``CHECKPOINT``, drained by the ``compare`` scenario's best contender (2 × ``tenure
worker --burst --concurrency 200 --claim-batch 100``) and timed from outside (``compare.run_one``:
end to end is spawn to the last process's exit; steady is 10 % → 90 % of the jobs):

- ``keyed``: job ``i`` carries flow key ``key-{i mod 10,000}`` (round-robin over 10,000 keys), no
  limit: since weighted fairness (issue 38, item 5) ready jobs with keys make the claim fair, so
  it is no longer the ungated single statement: it goes through ``flow_claim`` (schema.sql, via
  ``job_claim_flow``), round-robin over the keys by weight;
- ``limited``: the same jobs after ``tenure flow limit default --per-key-running 1``: the claim
  goes through the same function, which also skips the keys at their limit (the queue's lock
  serialises the claims either way);
- ``plain``: the same payloads without keys or limits (the hot path, as ``compare``'s ``tenure``).

With 10,000 keys round-robin and at most 400 jobs in flight, a key's next job is 10,000 places
behind its last, so the limit of 1 seldom holds a job back: ``limited`` measures what the per-key
counts cost each claim on top of the fair walk, not a backlog of blocked keys (a key at its limit
is skipped for the rest of the claim, whatever its backlog).

Reported: jobs/s of each, limited ÷ keyed (issue 38's target: ≥ 0.50) and keyed ÷ plain (what
the fair claim costs against the hot path), and per variant the statements that took the most
database time per job (pg_stat_statements, reset before each drain). Variants are interleaved over
``--runs`` (1 with ``--quick``); medians. One machine's numbers: compare only within one run.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import payloads, stats
from bench.compare import CONTENDERS, ROOT, CompareResult, compile_sources, run_one
from bench.console import log
from bench.payloads import describe
from bench.server import code_env
from bench.sqlfile import bench_queries
from bench.systems import chunks, install

FULL_JOBS = 50_000
QUICK_JOBS = 10_000
KEYS = 10_000
PER_KEY_RUNNING = 1
TARGET = 0.50
"""limited ÷ keyed, end to end (issue 38)."""


@dataclass(frozen=True)
class Variant:
    key: str
    keyed: bool
    per_key_running: int | None
    describe: str


VARIANTS = (
    Variant("keyed", True, None, f"{KEYS:,} flow keys (round-robin), no limit"),
    Variant("limited", True, PER_KEY_RUNNING, f"{KEYS:,} flow keys, tenure flow limit default "
                                              f"--per-key-running {PER_KEY_RUNNING}"),
    Variant("plain", False, None, "no flow keys, no limit (the hot path)"),
)


def flow_key(i: int) -> str:
    """Job ``i``'s flow key: round-robin over ``KEYS`` keys."""
    return f"key-{i % KEYS}"


def prepare(server: Any, v: Variant, jobs: int, payload_bytes: int) -> str:
    """A fresh database with ``jobs`` no-op jobs (keyed or not, ``v``) and ``v``'s limit, set
    through the CLI; analyzed and checkpointed."""
    from tenure.core.db import connect
    from tenure.core.repository import JobSpec, Repository
    dsn: str = server.fresh_db("bench_flow_keys")
    install("tenure", dsn)
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        for start, k in chunks(jobs):
            repo.enqueue_many([JobSpec("noop", p, flow_key=flow_key(start + j) if v.keyed else None)
                               for j, p in enumerate(payloads.batch("tenure", start, k, payload_bytes))])
    if v.per_key_running is not None:
        subprocess.run([sys.executable, "-m", "tenure.cli", "--database-url", dsn, "flow", "limit", "default",
                        "--per-key-running", str(v.per_key_running), "--by", "bench"],
                       check=True, cwd=ROOT, env=code_env(), stdout=subprocess.DEVNULL)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(bench_queries()["db_analyze"])
        conn.execute("CHECKPOINT")
        conn.execute(bench_queries()["statements_reset"])
    return dsn


def _budget(dsn: str, jobs: int, top: int = 4) -> list[dict[str, Any]]:
    """The statements that took the most database time since the reset, with µs per job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(bench_queries()["statements_top"]).fetchall()
    out = [dict(zip(("calls", "total_ms", "mean_ms", "max_ms", "query"), r)) for r in rows]
    out.sort(key=lambda s: -s["total_ms"])
    for s in out:
        s["us_per_job"] = 1000 * s["total_ms"] / jobs
    return out[:top]


def _as_dict(s: stats.Summary | None) -> dict[str, Any] | None:
    return s.as_dict() if s else None


def scenario_flow_keys(server: Any, args: Any, rep: Any) -> None:
    """The three drains, interleaved (see the module docstring)."""
    compile_sources()
    jobs = args.flow_keys_jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    c = CONTENDERS["tenure"]
    by_key = {v.key: v for v in VARIANTS}
    results: dict[str, list[CompareResult]] = {v.key: [] for v in VARIANTS}
    budgets: dict[str, list[dict[str, Any]]] = {}
    for run, key in stats.interleave([v.key for v in VARIANTS], args.runs):
        v = by_key[key]
        log(f"    [flow-keys {run + 1}/{args.runs}] {key}: filling {jobs:,} jobs, {describe(args.payload_bytes)}")
        dsn = prepare(server, v, jobs, args.payload_bytes)
        r = run_one(server, c, jobs, dsn=dsn, timeout=max(300.0, jobs / 20))
        results[key].append(r)
        budgets[key] = _budget(dsn, jobs)
        log(f"  [flow-keys {run + 1}/{args.runs}] {key}: end to end {r.e2e_rate:,.0f}/s ({r.e2e_seconds:.2f} s), "
            f"steady {r.steady_rate:,.0f}/s, CPU/job {r.worker_cpu_per_job_us:.0f} + {r.db_cpu_per_job_us:.0f} µs, "
            f"load {r.load_average:.1f}")
    e2e = {k: stats.summarize([r.e2e_rate for r in rs]) for k, rs in results.items()}
    steady = {k: stats.summarize([r.steady_rate for r in rs]) for k, rs in results.items()}
    rows = []
    for v in VARIANTS:
        rs = results[v.key]
        secs = stats.summarize([r.e2e_seconds for r in rs])
        cpu_w = stats.summarize([r.worker_cpu_per_job_us for r in rs])
        cpu_d = stats.summarize([r.db_cpu_per_job_us for r in rs])
        rows.append([v.key, v.describe, stats.fmt_summary(e2e[v.key], "/s"), stats.fmt_summary(steady[v.key], "/s"),
                     f"{secs.median:.2f} s" if secs else "-",
                     f"{cpu_w.median:.0f} + {cpu_d.median:.0f} µs" if cpu_w and cpu_d else "-"])
    text = stats.table(["variant", "jobs", "end-to-end jobs/s", "steady jobs/s", "spawn → all done",
                        "CPU/job worker + DB"], rows)
    limited_e2e, keyed_e2e = stats.ratio(e2e["limited"], e2e["keyed"]), stats.ratio(e2e["keyed"], e2e["plain"])
    limited_st, keyed_st = stats.ratio(steady["limited"], steady["keyed"]), stats.ratio(steady["keyed"], steady["plain"])
    text += "\n\n" + stats.table(["ratio (medians)", "end to end", "steady", "target"], [
        ["limited ÷ keyed", stats.fmt_ratio(limited_e2e), stats.fmt_ratio(limited_st),
         f"≥ {TARGET:.2f} (end to end): {stats.verdict(limited_e2e, TARGET, True)}"],
        ["keyed ÷ plain", stats.fmt_ratio(keyed_e2e), stats.fmt_ratio(keyed_st), "- (what the fair claim costs)"]])
    for key, top in budgets.items():
        text += f"\n\n{key}: database time per job, statement by statement (last run, pg_stat_statements)\n" + "\n".join(
            f"- {s['us_per_job']:,.1f} µs per job ({s['calls']:,} calls, mean {s['mean_ms']:,.3f} ms, "
            f"longest {s['max_ms']:,.1f} ms): {s['query']}" for s in top)
    rep.data["flow_keys"] = {
        "jobs": jobs, "keys": KEYS, "per_key_running": PER_KEY_RUNNING, "payload_bytes": args.payload_bytes,
        "contender": c.describe, "limited_over_keyed": {"e2e": limited_e2e, "steady": limited_st},
        "keyed_over_plain": {"e2e": keyed_e2e, "steady": keyed_st}, "target": TARGET,
        "variants": {v.key: {"config": v.describe, "e2e": _as_dict(e2e[v.key]), "steady": _as_dict(steady[v.key]),
                             "runs": [r.__dict__ for r in results[v.key]], "budget": budgets.get(v.key)}
                     for v in VARIANTS}}
    rep.add(f"Flow keys: {jobs:,} no-op jobs over {KEYS:,} keys, {describe(args.payload_bytes)}, {c.describe}, "
            f"{args.runs} interleaved run(s)", text)
