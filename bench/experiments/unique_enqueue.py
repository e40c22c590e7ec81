"""Unique enqueue throughput against plain enqueue (issue 39, item 3; docs/unique.md).

``--producers`` threads (default 8), each on its own connection (autocommit), enqueue
``--per-producer`` jobs of one task, started together, timed from the first to the last; in a
fresh database per run, variants interleaved:

- ``plain``: ``Repository.enqueue`` without a declaration;
- ``unique-hot``: ``unique=Unique(by=["customer_id"])`` with ``customer_id`` drawn from
  ``--keys`` values (default 100): after the first few, nearly every enqueue meets a holder and
  returns it (skip), producers racing on the same keys;
- ``unique-distinct``: every job its own key (the cost of the key and its index entry alone);
- with ``--batch N`` (> 1) each call is ``enqueue_many`` of N jobs instead.

After each unique run: the errors (any exception of a producer) and the duplicates (keys held by
more than one job) are counted; both must be 0. Prints a table: jobs/s median (min–max) and the
ratio to ``plain`` (target >= 0.8).

    .venv/bin/python -m bench.experiments.unique_enqueue --runs 3
    .venv/bin/python -m bench.experiments.unique_enqueue --runs 3 --batch 100

One machine's numbers (a shared 2-core machine is noisy), never assertions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.console import log
from bench.server import DATADIR_DEFAULT, start_server
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository
from tenure.core.unique import Unique

VARIANTS = ("plain", "unique-hot", "unique-distinct")
BY_CUSTOMER = Unique(by=["customer_id"])
_INSTALL = ("import sys; from tenure.core.db import connect; from tenure.core.repository import Repository; "
            "c = connect(sys.argv[1]); Repository(c, 'tenure').migrate(); c.close()")


def _spec(variant: str, rng: random.Random, keys: int, serial: int) -> JobSpec:
    if variant == "plain":
        return JobSpec("sync", {"customer_id": rng.randrange(keys)})
    customer = rng.randrange(keys) if variant == "unique-hot" else serial
    return JobSpec("sync", {"customer_id": customer}, unique=BY_CUSTOMER)


def run_once(dsn: str, variant: str, *, producers: int, per_producer: int, keys: int,
             batch: int) -> tuple[float, int, int]:
    """(jobs/s, errors, duplicate keys) of one run."""
    errors: list[BaseException] = []
    ready = threading.Barrier(producers + 1)

    def produce(n: int) -> None:
        rng = random.Random(n)
        try:
            with connect(dsn) as c:
                repo = Repository(c, "tenure")
                ready.wait()
                for i in range(0, per_producer, batch):
                    specs = [_spec(variant, rng, keys, n * per_producer + i + k) for k in range(batch)]
                    if batch == 1:
                        s = specs[0]
                        repo.enqueue(s.task, s.payload, unique=s.unique)
                    else:
                        repo.enqueue_many(specs)
        except BaseException as exc:  # noqa: BLE001 - every error counts
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    ready.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM (SELECT unique_key FROM tenure.jobs WHERE unique_key IS NOT NULL "
                           "GROUP BY unique_key HAVING count(*) > 1) d").fetchone()
    if errors:
        log(f"  first error: {errors[0]!r}"[:300])
    return producers * per_producer / elapsed, len(errors), int(row[0]) if row else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.unique_enqueue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--producers", type=int, default=8)
    p.add_argument("--per-producer", type=int, default=2000)
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    args = p.parse_args(argv)
    server: Any = start_server(args.datadir)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    faults: dict[str, list[tuple[int, int]]] = {v: [] for v in VARIANTS}
    for run in range(args.runs):
        for variant in VARIANTS:
            dsn = server.fresh_db(f"bench_unique_{variant.replace('-', '_')}")
            subprocess.run([sys.executable, "-c", _INSTALL, dsn], check=True)
            rate, errors, dups = run_once(dsn, variant, producers=args.producers, per_producer=args.per_producer,
                                          keys=args.keys, batch=args.batch)
            rates[variant].append(rate)
            faults[variant].append((errors, dups))
            log(f"  [{variant} {run + 1}/{args.runs}] {rate:,.0f} jobs/s, {errors} errors, {dups} duplicate keys")
    base = statistics.median(rates["plain"])
    print(f"\n### Enqueue, {args.producers} producers x {args.per_producer:,} jobs, {args.keys} hot keys, "
          f"batch {args.batch}, {args.runs} interleaved runs\n")
    print("| variant | jobs/s median (min–max) | ÷ plain | errors | duplicate keys |\n|---|---|---|---|---|")
    for v in VARIANTS:
        med = statistics.median(rates[v])
        print(f"| {v} | {med:,.0f} ({min(rates[v]):,.0f}–{max(rates[v]):,.0f}) | {med / base:.2f} | "
              f"{sum(e for e, _ in faults[v])} | {sum(d for _, d in faults[v])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
