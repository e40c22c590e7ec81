"""Weighted fairness on the drain (issue 38): does a small key still wait behind a big one?

``python -m bench --scenario fairness [--quick] [--payload-bytes N] [--runs R]``: two variants of
one drain, each on a fresh database. One key (``big``) gets ``BIG`` no-op jobs first (100,000;
20,000 with ``--quick``), then 99 keys (``small-01`` … ``small-99``) get ``SMALL_EACH`` jobs each
(100; 20 with ``--quick``), enqueued after them, round-robin over the small keys; all through
``enqueue_many`` with ``bench.payloads`` payloads, as a user's, then ``ANALYZE`` and
``CHECKPOINT``. The ``compare`` scenario's tenure contender drains them (2 × ``tenure worker
--burst --concurrency 200 --claim-batch 100``), timed from outside (``compare.run_one``):

- ``keyed``: each job carries its key (``JobSpec(flow_key=...)``), no limit: the claim goes
  through ``flow_claim``, round-robin over the keys with ready jobs, ``weight`` (1) jobs a visit;
- ``fifo``: the same jobs in the same order without keys: the ungated single statement, first
  in, first out (what every queue did before weighted fairness).

Reported, from the jobs' own rows once drained (``all_jobs``; the database clock):

- the small keys' jobs' wait, ``started_at - available_at``: p50, p95, and keyed ÷ fifo of the
  p95 (target ≤ 0.2). The wait includes the set-up between the last enqueue and the first claim
  (``ANALYZE``, ``CHECKPOINT``, spawning the workers), alike in both variants and shown apart
  ("set-up"); "p95 after first claim" leaves it out (``started_at - max(available_at, first
  claim)``), which is the wait the claim's order causes;
- Jain's index of the keys' shares while every key has work: from the first claim to the claim
  in which the first key runs out (takes its last job), ``x_k`` = key ``k``'s jobs claimed in
  that window, ``J = (Σx)² / (n · Σx²)`` over the 100 keys (target ≥ 0.95; 1/100 when one key
  takes every claim). Claims are ordered by their jobs' fences, not by ``started_at``: that is
  the claim's transaction start, and a claim that began first may take the queue's lock second
  (bench/flowmath.py ``claim_order``). In ``fifo`` the keys are the ones the jobs would carry (by
  enqueue order): the big key runs out first, before any small job starts;
- throughput and CPU per job (``run_one``), the claim's database time per job (its statements
  in pg_stat_statements, reset before each drain; it includes each claim's wait for the queue's
  lock, held by the other worker's claim: claims of a queue through ``flow_claim`` serialise)
  and the statements that took the most.

Variants are interleaved over ``--runs`` (1 with ``--quick``); medians. One machine's numbers:
compare only within one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from bench import flowmath, payloads, stats
from bench.compare import CONTENDERS, CompareResult, compile_sources, run_one
from bench.console import log
from bench.flow_keys import _budget
from bench.payloads import describe
from bench.sqlfile import bench_queries
from bench.systems import chunks, install

BIG_FULL, BIG_QUICK = 100_000, 20_000
SMALL_KEYS = 99
SMALL_FULL, SMALL_QUICK = 100, 20
BIG_KEY = "big"
WAIT_TARGET = 0.2
"""keyed ÷ fifo, the small keys' p95 wait (issue 38)."""
JAIN_TARGET = 0.95
VARIANTS = {"keyed": f"flow keys: 1 big + {SMALL_KEYS} small, weight 1 each (flow_claim)",
            "fifo": "the same jobs, same order, no keys (first in, first out)"}


def key_of(i: int, big: int) -> str:
    """Job ``i``'s key (enqueue order): the big key's jobs first, then round-robin over the small."""
    return BIG_KEY if i < big else f"small-{1 + (i - big) % SMALL_KEYS:02d}"


def prepare(server: Any, keyed: bool, big: int, small_each: int, payload_bytes: int) -> str:
    """A fresh database holding the jobs (with their keys when ``keyed``); analyzed,
    checkpointed, its statement statistics reset."""
    from tenure.core.db import connect
    from tenure.core.repository import JobSpec, Repository
    dsn: str = server.fresh_db("bench_fairness")
    install("tenure", dsn)
    total = big + SMALL_KEYS * small_each
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        for start, k in chunks(total):
            repo.enqueue_many([JobSpec("noop", p, flow_key=key_of(start + j, big) if keyed else None)
                               for j, p in enumerate(payloads.batch("tenure", start, k, payload_bytes))])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(bench_queries()["db_analyze"])
        conn.execute("CHECKPOINT")
        conn.execute(bench_queries()["statements_reset"])
    return dsn


def claim_time(dsn: str) -> tuple[int, float]:
    """The claim since the reset: its attempts (calls of its most-called statement: a gated
    claim runs up to three, bench/flowmath.py) and the database ms of all its statements."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(bench_queries()["statements_full"]).fetchall()
    calls: dict[str, int] = {}
    ms = 0.0
    for n, total_ms, query in rows:
        name = flowmath.claim_statement(query)
        if name is not None:
            calls[name] = calls.get(name, 0) + int(n)
            ms += float(total_ms)
    return max(calls.values(), default=0), ms


@dataclass(frozen=True)
class JobTimes:
    """Every job's row, in enqueue order: ready and started (epoch seconds), fence."""

    available: list[float]
    started: list[float]
    fences: list[int]


def job_times(dsn: str, total: int) -> JobTimes:
    """The drained jobs' times (``tenure_job_times``); all ``total`` of them must have started."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(bench_queries()["tenure_job_times"]).fetchall()
    if len(rows) != total or any(r[2] is None or r[3] is None for r in rows):
        raise RuntimeError(f"expected {total:,} started jobs, found {len(rows):,}")
    return JobTimes([float(r[1]) for r in rows], [float(r[2]) for r in rows], [int(r[3]) for r in rows])


def budget_text(budgets: dict[str, list[dict[str, Any]]]) -> str:
    """Each variant's costliest statements (``flow_keys._budget``), as flow_keys.py prints them."""
    return "".join(
        f"\n\n{key}: database time per job, statement by statement (last run, pg_stat_statements)\n"
        + "\n".join(f"- {s['us_per_job']:,.1f} µs per job ({s['calls']:,} calls, mean {s['mean_ms']:,.3f} ms, "
                    f"longest {s['max_ms']:,.1f} ms): {s['query']}" for s in top)
        for key, top in budgets.items())


def run_dict(run: Any) -> dict[str, Any]:
    """A run's figures for the JSON results, its drain (``run_one``'s result) nested."""
    return {**{a: v for a, v in run.__dict__.items() if a != "drain"}, "drain": run.drain.__dict__}


@dataclass
class FairRun:
    drain: CompareResult
    p50_wait: float
    p95_wait: float
    p95_wait_after_claim: float
    setup_seconds: float
    """Last enqueue (latest available_at) to the first claim."""
    jain: float
    window_seconds: float
    window_jobs: int
    first_out: str
    claim_calls: int
    claim_us_per_job: float


def measure(r: CompareResult, dsn: str, big: int, total: int) -> FairRun:
    """The run's figures from its jobs' rows (see the module docstring)."""
    t = job_times(dsn, total)
    first_claim = min(t.started)
    waits = [s - a for a, s in zip(t.available[big:], t.started[big:])]
    after = [s - max(a, first_claim) for a, s in zip(t.available[big:], t.started[big:])]
    order = flowmath.claim_order(t.started, t.fences)
    claims: dict[str, list[float]] = {}
    for i, c in enumerate(order):
        claims.setdefault(key_of(i, big), []).append(c)
    win = flowmath.fair_window(claims)
    when = {c: s for c, s in zip(order, t.started)}
    calls, ms = claim_time(dsn)
    return FairRun(r, stats.percentile(waits, 50), stats.percentile(waits, 95), stats.percentile(after, 95),
                   first_claim - max(t.available), win.jain, when[int(win.last)] - when[int(win.first)],
                   sum(win.counts.values()), win.first_out, calls, 1000 * ms / total)


def _med(runs: list[FairRun], attr: str) -> stats.Summary | None:
    return stats.summarize([float(getattr(x, attr)) for x in runs])


def _secs(s: stats.Summary | None) -> str:
    return stats.fmt_summary(s, " s")


def scenario_fairness(server: Any, args: Any, rep: Any) -> None:
    """The two drains, interleaved (see the module docstring)."""
    compile_sources()
    big, small_each = (BIG_QUICK, SMALL_QUICK) if args.quick else (BIG_FULL, SMALL_FULL)
    total = big + SMALL_KEYS * small_each
    c = CONTENDERS["tenure"]
    results: dict[str, list[FairRun]] = {k: [] for k in VARIANTS}
    budgets: dict[str, list[dict[str, Any]]] = {}
    for run, key in stats.interleave(list(VARIANTS), args.runs):
        log(f"    [fairness {run + 1}/{args.runs}] {key}: filling {big:,} + {SMALL_KEYS} × {small_each} jobs, "
            f"{describe(args.payload_bytes)}")
        dsn = prepare(server, key == "keyed", big, small_each, args.payload_bytes)
        r = run_one(server, c, total, dsn=dsn, timeout=max(300.0, total / 20))
        budgets[key] = _budget(dsn, total)  # before measure's own statements
        f = measure(r, dsn, big, total)
        results[key].append(f)
        log(f"  [fairness {run + 1}/{args.runs}] {key}: end to end {r.e2e_rate:,.0f}/s ({r.e2e_seconds:.2f} s), "
            f"small keys' wait p95 {f.p95_wait:.2f} s ({f.p95_wait_after_claim:.2f} s after the first claim, "
            f"set-up {f.setup_seconds:.2f} s), Jain {f.jain:.3f} over {f.window_seconds:.2f} s "
            f"({f.window_jobs:,} jobs, {f.first_out} out first), claim {f.claim_us_per_job:.0f} µs/job, "
            f"load {r.load_average:.1f}")
    rows = []
    for key, describe_variant in VARIANTS.items():
        rs = results[key]
        e2e = stats.summarize([x.drain.e2e_rate for x in rs])
        cpu_w = stats.summarize([x.drain.worker_cpu_per_job_us for x in rs])
        cpu_d = stats.summarize([x.drain.db_cpu_per_job_us for x in rs])
        jain, window_jobs, claim = _med(rs, "jain"), _med(rs, "window_jobs"), _med(rs, "claim_us_per_job")
        rows.append([key, describe_variant, stats.fmt_summary(e2e, "/s"), _secs(_med(rs, "p50_wait")),
                     _secs(_med(rs, "p95_wait")), _secs(_med(rs, "p95_wait_after_claim")),
                     _secs(_med(rs, "setup_seconds")), f"{jain.median:.3f}" if jain else "-",
                     f"{_secs(_med(rs, 'window_seconds'))}, {window_jobs.median:,.0f} jobs" if window_jobs else "-",
                     stats.fmt_num(claim.median if claim else None, " µs"),
                     f"{cpu_w.median:.0f} + {cpu_d.median:.0f} µs" if cpu_w and cpu_d else "-",
                     f"{max(x.drain.load_average for x in rs):.1f}" if rs else "-"])
    text = stats.table(["variant", "jobs", "end-to-end jobs/s", "small p50 wait", "small p95 wait",
                        "p95 after first claim", "set-up", "Jain's J", "window (all keys busy)",
                        "claim DB time/job", "CPU/job worker + DB", "load (max)"], rows)
    wait_ratio = stats.ratio(_med(results["keyed"], "p95_wait"), _med(results["fifo"], "p95_wait"))
    net_ratio = stats.ratio(_med(results["keyed"], "p95_wait_after_claim"),
                            _med(results["fifo"], "p95_wait_after_claim"))
    jain_keyed = _med(results["keyed"], "jain")
    text += "\n\n" + stats.table(["figure (medians)", "value", "target"], [
        ["small keys' p95 wait, keyed ÷ fifo", stats.fmt_ratio(wait_ratio),
         f"≤ {WAIT_TARGET:.2f}: {stats.verdict(wait_ratio, WAIT_TARGET, False)}"],
        ["the same after the first claim (set-up left out)", stats.fmt_ratio(net_ratio),
         f"≤ {WAIT_TARGET:.2f}: {stats.verdict(net_ratio, WAIT_TARGET, False)}"],
        ["Jain's index, keyed", f"{jain_keyed.median:.3f}" if jain_keyed else "-",
         f"≥ {JAIN_TARGET:.2f}: {stats.verdict(jain_keyed.median if jain_keyed else None, JAIN_TARGET, True)}"]])
    text += budget_text(budgets)
    rep.data["fairness"] = {
        "big": big, "small_keys": SMALL_KEYS, "small_each": small_each, "payload_bytes": args.payload_bytes,
        "contender": c.describe, "p95_wait_keyed_over_fifo": wait_ratio, "after_first_claim_ratio": net_ratio,
        "wait_target": WAIT_TARGET, "jain_target": JAIN_TARGET,
        "variants": {k: {"config": VARIANTS[k], "budget": budgets.get(k),
                         "runs": [run_dict(x) for x in rs]}
                     for k, rs in results.items()}}
    rep.add(f"Fairness: {big:,} jobs of one key, then {SMALL_KEYS} keys × {small_each}, "
            f"{describe(args.payload_bytes)}, {c.describe}, {args.runs} interleaved run(s)", text)
