"""A rate limit on the drain (issue 38): does the claim hold 500 jobs/s, and what does it cost?

``python -m bench --scenario rate [--quick] [--rate-jobs N] [--payload-bytes N] [--runs R]``: two
variants of one drain, each on a fresh database holding ``N`` no-op jobs (default 10,000, 20 s at
500/s; 3,000 with ``--quick``) with ``bench.payloads`` payloads, enqueued through
``enqueue_many``, then ``ANALYZE`` and ``CHECKPOINT``, drained by the ``compare`` scenario's
tenure contender (2 × ``tenure worker --burst --concurrency 200 --claim-batch 100``) and timed
from outside (``compare.run_one``):

- ``limited``: a rate limit of 500/s, burst 50 (``tenure flow rate bench-rate --per-second 500
  --burst 50``), and every job names it (``JobSpec(rate_limit="bench-rate")``): each claim goes
  through ``flow_claim`` and takes a token per job from the limit's one bucket;
- ``unlimited``: the same jobs without it (the ungated single statement).

Reported: the achieved rate over the steady window (the jobs' own ``started_at``, database
clock): the first ``BURST`` starts (the full bucket's burst) are left out, then the jobs started
after the first start left, over the time to the last start (bench/flowmath.py ``steady_rate``);
its deviation from 500/s (target within ±5 %); the claims (attempts), those that took jobs
(distinct start times) and their jobs each; the claim's database time per job (its statements
in pg_stat_statements, reset before each drain; with the limit it includes each claim's wait
for the queue's lock, held by the other worker's claim) and worker + database CPU per job
(``run_one``), beside the same drain without the limit.
At 500/s the workers mostly wait: their CPU per job counts the waiting (claims that find the
bucket short, their polls), which is what a rate limit costs a user.

A worker whose claim a rate limit held back looks again after ``rate_wait`` seconds, the time
until the bucket holds a token by the database clock, at least ``RATE_WAIT_MIN_SECONDS`` (10 ms,
src/tenure/worker/runtime.py ``_claim_loop``), or sooner: each finished job wakes the claim loop.
Between two claims the bucket earns a few tokens, far below the burst, so none are lost to the
cap and the achieved rate should be the limit's; the claims that find the bucket short (claims
minus claims that took jobs) are what the early wake-ups cost.

Variants are interleaved over ``--runs`` (1 with ``--quick``); medians. One machine's numbers:
compare only within one run.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import flowmath, payloads, stats
from bench.compare import CONTENDERS, ROOT, CompareResult, compile_sources, run_one
from bench.console import log
from bench.fairness import budget_text, claim_time, job_times, run_dict
from bench.flow_keys import _budget
from bench.payloads import describe
from bench.server import code_env
from bench.sqlfile import bench_queries
from bench.systems import chunks, install

FULL_JOBS = 10_000
QUICK_JOBS = 3_000
RATE_LIMIT = "bench-rate"
PER_SECOND = 500.0
BURST = 50
TOLERANCE = 0.05
"""The achieved rate's allowed deviation from ``PER_SECOND`` (issue 38: ±5 %)."""
VARIANTS = {"limited": f"every job names {RATE_LIMIT}: {PER_SECOND:.0f}/s, burst {BURST} (flow_claim)",
            "unlimited": "the same jobs, no rate limit (the ungated single statement)"}


def prepare(server: Any, limited: bool, jobs: int, payload_bytes: int) -> str:
    """A fresh database with the rate limit (``limited``) and ``jobs`` no-op jobs naming it (or
    not); analyzed, checkpointed, its statement statistics reset."""
    from tenure.core.db import connect
    from tenure.core.repository import JobSpec, Repository
    dsn: str = server.fresh_db("bench_rate")
    install("tenure", dsn)
    if limited:  # before the enqueue: enqueue_many refuses a job naming an unknown rate limit
        subprocess.run([sys.executable, "-m", "tenure.cli", "--database-url", dsn, "flow", "rate", RATE_LIMIT,
                        "--per-second", f"{PER_SECOND:g}", "--burst", str(BURST), "--by", "bench"],
                       check=True, cwd=ROOT, env=code_env(), stdout=subprocess.DEVNULL)
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        for start, k in chunks(jobs):
            repo.enqueue_many([JobSpec("noop", p, rate_limit=RATE_LIMIT if limited else None)
                               for p in payloads.batch("tenure", start, k, payload_bytes)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(bench_queries()["db_analyze"])
        conn.execute("CHECKPOINT")
        conn.execute(bench_queries()["statements_reset"])
    return dsn


@dataclass
class RateRun:
    drain: CompareResult
    rate: float
    window_jobs: int
    window_seconds: float
    claims: int
    """Distinct start times: the claims that took jobs."""
    claim_calls: int
    """Claim attempts, including those that took nothing (the bucket short)."""
    claim_us_per_job: float


def measure(r: CompareResult, dsn: str, jobs: int) -> RateRun:
    starts = job_times(dsn, jobs).started
    steady = flowmath.steady_rate(starts, BURST)
    calls, ms = claim_time(dsn)
    return RateRun(r, steady.rate if steady else float("nan"), steady.jobs if steady else 0,
                   steady.seconds if steady else float("nan"), len(set(starts)), calls, 1000 * ms / jobs)


def _num(rs: list[RateRun], attr: str, unit: str = "", digits: str = ",.0f") -> str:
    s = stats.summarize([float(getattr(x, attr)) for x in rs])
    return f"{s.median:{digits}}{unit}" if s else "-"


def scenario_rate(server: Any, args: Any, rep: Any) -> None:
    """The two drains, interleaved (see the module docstring)."""
    compile_sources()
    jobs = args.rate_jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    c = CONTENDERS["tenure"]
    results: dict[str, list[RateRun]] = {k: [] for k in VARIANTS}
    budgets: dict[str, list[dict[str, Any]]] = {}
    for run, key in stats.interleave(list(VARIANTS), args.runs):
        log(f"    [rate {run + 1}/{args.runs}] {key}: filling {jobs:,} jobs, {describe(args.payload_bytes)}")
        dsn = prepare(server, key == "limited", jobs, args.payload_bytes)
        r = run_one(server, c, jobs, dsn=dsn, timeout=max(300.0, 3 * jobs / PER_SECOND))
        budgets[key] = _budget(dsn, jobs)  # before measure's own statements
        x = measure(r, dsn, jobs)
        results[key].append(x)
        log(f"  [rate {run + 1}/{args.runs}] {key}: steady {x.rate:,.1f}/s over {x.window_seconds:.2f} s "
            f"({x.window_jobs:,} jobs), {x.claim_calls:,} claims, {x.claims:,} of them took jobs, "
            f"claim {x.claim_us_per_job:.0f} µs/job, CPU/job {r.worker_cpu_per_job_us:.0f} + "
            f"{r.db_cpu_per_job_us:.0f} µs, end to end {r.e2e_seconds:.2f} s, load {r.load_average:.1f}")
    rows = []
    for key, describe_variant in VARIANTS.items():
        rs = results[key]
        cpu_w = stats.summarize([x.drain.worker_cpu_per_job_us for x in rs])
        cpu_d = stats.summarize([x.drain.db_cpu_per_job_us for x in rs])
        per_claim = stats.summarize([jobs / x.claims for x in rs if x.claims])
        rows.append([key, describe_variant, stats.fmt_summary(stats.summarize([x.rate for x in rs]), "/s"),
                     _num(rs, "window_seconds", " s", ".2f"), _num(rs, "claim_calls"), _num(rs, "claims"),
                     f"{per_claim.median:.1f}" if per_claim else "-",
                     _num(rs, "claim_us_per_job", " µs", ",.1f"),
                     f"{cpu_w.median:.0f} + {cpu_d.median:.0f} µs" if cpu_w and cpu_d else "-",
                     stats.fmt_summary(stats.summarize([x.drain.e2e_seconds for x in rs]), " s"),
                     f"{max(x.drain.load_average for x in rs):.1f}" if rs else "-"])
    text = stats.table(["variant", "jobs", "steady jobs/s (after the burst)", "window", "claims", "claims that took jobs",
                        "jobs/claim that took", "claim DB time/job", "CPU/job worker + DB", "spawn → all done",
                        "load (max)"], rows)
    achieved = stats.summarize([x.rate for x in results["limited"]])
    deviation = achieved.median / PER_SECOND - 1 if achieved else None
    claim = {k: stats.summarize([x.claim_us_per_job for x in rs]) for k, rs in results.items()}
    cpu = {k: stats.summarize([x.drain.worker_cpu_per_job_us + x.drain.db_cpu_per_job_us for x in rs])
           for k, rs in results.items()}
    ok = "n/a" if deviation is None else ("PASS" if abs(deviation) <= TOLERANCE else "MISS")
    text += "\n\n" + stats.table(["figure (medians)", "value", "target"], [
        ["achieved rate, limited", stats.fmt_num(achieved.median if achieved else None, "/s"),
         f"{PER_SECOND:.0f}/s"],
        ["deviation from the limit", f"{deviation:+.1%}" if deviation is not None else "-",
         f"within ±{TOLERANCE:.0%}: {ok}"],
        ["claim DB time per job, limited ÷ unlimited", stats.fmt_ratio(stats.ratio(claim["limited"],
                                                                                  claim["unlimited"])), "-"],
        ["CPU per job (worker + DB), limited ÷ unlimited", stats.fmt_ratio(stats.ratio(cpu["limited"],
                                                                                      cpu["unlimited"])), "-"]])
    text += budget_text(budgets)
    rep.data["rate"] = {
        "jobs": jobs, "per_second": PER_SECOND, "burst": BURST, "payload_bytes": args.payload_bytes,
        "contender": c.describe, "achieved": achieved.as_dict() if achieved else None, "deviation": deviation,
        "tolerance": TOLERANCE,
        "variants": {k: {"config": VARIANTS[k], "budget": budgets.get(k),
                         "runs": [run_dict(x) for x in rs]}
                     for k, rs in results.items()}}
    rep.add(f"Rate limit: {jobs:,} no-op jobs, {PER_SECOND:.0f}/s burst {BURST}, {describe(args.payload_bytes)}, "
            f"{c.describe}, {args.runs} interleaved run(s)", text)
