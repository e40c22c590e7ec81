"""What a workflow step's claim and completion statements cost per job, against plain jobs'
(issue 39; docs/workflows.md "Benchmark").

``python -m bench.experiments.workflow_ack_cost [--jobs N] [--runs R]``: per run, in a fresh
database each, ``N`` plain jobs (``enqueue_many``) and ``N`` / 10 chains of 10 steps
(``tenure.Workflow``), every job with a user-like payload (``bench.payloads``); analyzed, then
one connection claims 100 and completes them (``Repository.complete_many``) until nothing is
left, timing each statement from the client. A chain step's completion also releases the next
step (the trigger's settle, judge and move), which is the difference. Prints microseconds per
job, claim and ack, median over the runs.

Then the release of a fan-out: a workflow 1 -> ``N`` - 2 -> 1, its first step claimed and
completed, that one completion timed (it releases every middle step), with the job browser's
payload index and without it (dropped in that run's database only), to show what the index's
entries for the released rows cost. One machine's numbers, never assertions.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import tenure
from bench import payloads
from bench.console import log
from bench.server import DATADIR_DEFAULT, start_server
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository, iter_batches

CLAIM = 100
CHAIN = 10


def _fill(repo: Repository, kind: str, n: int, size: int) -> None:
    if kind == "plain":
        for chunk in iter_batches((JobSpec("noop", payloads.payload(i, size)) for i in range(n)), 1000):
            repo.enqueue_many(chunk)
        return
    for c in range(n // CHAIN):
        wf = tenure.Workflow(f"chain-{c}")
        prev = None
        for k in range(CHAIN):
            prev = wf.add("noop", payloads.payload(c * CHAIN + k, size), name=f"s{k}", deps=[prev] if prev else [])
        wf.enqueue(repo.conn, schema=repo.schema)


def run_once(dsn: str, kind: str, n: int, size: int) -> tuple[float, float]:
    """(claim, ack) microseconds per job of one drain."""
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        repo.migrate()
        _fill(repo, kind, n, size)
        conn.execute("VACUUM ANALYZE")
        claim = ack = 0.0
        done = 0
        while True:
            t = time.perf_counter()
            jobs = repo.claim("bench", ["default"], CLAIM, 60)
            claim += time.perf_counter() - t
            if not jobs:
                break
            t = time.perf_counter()
            repo.complete_many("bench", [(j.id, j.lock_token) for j in jobs])
            ack += time.perf_counter() - t
            done += len(jobs)
    assert done == n, (kind, done, n)
    return claim / done * 1e6, ack / done * 1e6


def fan_out_release(dsn: str, n: int, size: int, *, payload_index: bool) -> float:
    """Milliseconds of the one completion that releases a fan-out's ``n`` - 2 middle steps."""
    with connect(dsn) as conn:
        repo = Repository(conn, "tenure")
        repo.migrate()
        wf = tenure.Workflow("fan-out")
        first = wf.add("noop", payloads.payload(0, size), name="first")
        middle = [wf.add("noop", payloads.payload(i, size), name=f"mid-{i}", deps=[first]) for i in range(1, n - 1)]
        wf.add("noop", payloads.payload(n - 1, size), name="last", deps=middle)
        wf.enqueue(conn)
        if not payload_index:
            conn.execute("DROP INDEX tenure.jobs_payload_idx")
        conn.execute("ANALYZE")  # not VACUUM: as after a real enqueue, the index's pending entries stay
        [job] = repo.claim("bench", ["default"], 1, 60)
        t = time.perf_counter()
        repo.complete_many("bench", [(job.id, job.lock_token)])
        return (time.perf_counter() - t) * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.workflow_ack_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    payloads.add_argument(p)
    args = p.parse_args(argv)
    server = start_server(args.datadir)
    figures: dict[str, list[tuple[float, float]]] = {"plain": [], "chains": []}
    for run in range(args.runs):
        for kind in figures:
            claim, ack = run_once(server.fresh_db(f"bench_wf_ack_{kind}"), kind, args.jobs, args.payload_bytes)
            figures[kind].append((claim, ack))
            log(f"  [{kind} {run + 1}/{args.runs}] claim {claim:.0f} µs/job, ack {ack:.0f} µs/job")
    print(f"\n### Claim and ack statements, {args.jobs:,} jobs, batches of {CLAIM}, payloads "
          f"{payloads.describe(args.payload_bytes)}, {args.runs} interleaved runs\n")
    print("| jobs | claim µs/job (median) | ack µs/job (median) |\n|---|---|---|")
    for kind, rows in figures.items():
        print(f"| {kind} | {statistics.median(c for c, _ in rows):.0f} | {statistics.median(a for _, a in rows):.0f} |")
    releases: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.runs):
        for index in releases:
            releases[index].append(fan_out_release(server.fresh_db("bench_wf_fan_out"), args.jobs,
                                                   args.payload_bytes, payload_index=index))
    print(f"\n### The release of a fan-out of {args.jobs - 2:,} steps (one completion), {args.runs} runs\n")
    print("| payload index | ms (median, min–max) |\n|---|---|")
    for index, ms in releases.items():
        print(f"| {'with' if index else 'without'} | {statistics.median(ms):.0f} ({min(ms):.0f}–{max(ms):.0f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
