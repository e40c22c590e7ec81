"""What the job browser's indexes (migration 0008) cost enqueue, claim and completion.

``python -m bench.experiments.ui_index_cost [--reps 3] [--rounds 200]``: for each variant, a fresh database
(the bench runner's embedded server) with this checkout's schema, ``--backlog`` ready jobs with
the job browser seed's payloads (``{"invoice_id": N, "customer": "cust-K"}``), some of 0008's
indexes dropped, then ``--rounds`` rounds of: enqueue 100 (``job_enqueue_many``), claim 100
(``job_claim``), complete 100 claimed earlier (``job_complete_many``), on one connection with
prepared statements, like a worker. The figure is that backend's own CPU time per job (psutil,
10 ms ticks, summed over the rounds), as in bench/experiments/statement_cpu.py. Variants: ``before`` (none of
0008's indexes), ``after`` (all of them) and ``without X`` (all but X), interleaved, ``--reps``
times each; the table shows medians and the ratio to ``before``.

``--variant "NAME=SQL[;SQL...]"`` (repeatable) measures schema variants instead: each NAME runs its
statements (``{schema}`` is the quoted schema) on the fresh database before the rounds, next to
``before`` (the schema as it is, nothing run), e.g.
``--variant "no receipts FK=ALTER TABLE {schema}.sqs_receipts DROP CONSTRAINT sqs_receipts_job_id_fkey"``.

The figures: docs/performance.md, "What the indexes cost" (the job browser at 5M jobs) and
"Finished jobs leave the hot table (issue 23, migration 0009)" (``--variant``). One shared
machine's figures (other sessions' load moves them; compare within a run only).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg.rows import dict_row

from bench import stats
from bench.console import log
from bench.experiments.ui_seed import ui_queries
from bench.server import ROOT
from tenure.core.queries import named_queries, notify_channel

MIGRATION = ROOT / "src" / "tenure" / "core" / "sql" / "migrations" / "0008_ui_indexes.sql"
STATEMENTS = ("job_enqueue_many", "job_claim", "job_complete_many")


def index_names() -> list[str]:
    """The indexes migration 0008 creates, in file order."""
    return re.findall(r"^CREATE INDEX (\w+)", MIGRATION.read_text(encoding="utf-8"), re.M)


def variants() -> dict[str, list[str]]:
    """Variant name -> the 0008 indexes it drops."""
    names = index_names()
    return {"before": names, "after": [], **{f"without {n}": [n] for n in names}}


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=SQL;SQL`` -> (NAME, [SQL, SQL]) with ``{schema}`` filled in."""
    name, sep, sql = text.partition("=")
    if not sep or not name.strip() or not sql.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=SQL[;SQL...], got {text!r}")
    return name.strip(), [part.strip().replace("{schema}", '"tenure"') for part in sql.split(";") if part.strip()]


def prepare(server: Any, drop: list[str], backlog: int, setup: list[str] | None = None) -> str:
    from bench.systems import install
    dsn: str = server.fresh_db("bench_ui_index_cost")
    install("tenure", dsn)
    q = ui_queries("tenure")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(q["cost_fill"], {"n": backlog})
        for name in drop:
            conn.execute(f'DROP INDEX "tenure".{name}')
        for statement in setup or []:
            conn.execute(statement.encode())  # a bench variant from the command line
        conn.execute(q["cost_vacuum"])
        conn.execute("CHECKPOINT")
    return dsn


def measure(dsn: str, rounds: int, start: int) -> dict[str, float]:
    """Backend CPU µs per job of each statement over ``rounds`` rounds."""
    q = named_queries("tenure")
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)
    try:
        row = conn.execute(ui_queries("tenure")["cost_backend"]).fetchone()
        assert row is not None
        backend = psutil.Process(int(row["pid"]))

        def cpu() -> float:
            t = backend.cpu_times()
            return float(t.user + t.system)

        claim_p = {"queues": ["default"], "limit": 100, "lease": 30.0, "worker_id": "w1", "aging": 300.0,
                   "gated": False}
        held = [conn.execute(q["job_claim"], claim_p, prepare=True).fetchall() for _ in range(4)]
        spent = {n: [0.0, 0] for n in STATEMENTS}
        for r in range(rounds):
            base = start + r * 100
            payloads = [json.dumps({"invoice_id": base + i, "customer": f"cust-{(base + i) % 1000}"})
                        for i in range(100)]
            enq = {"queues": ["default"] * 100, "tasks": ["invoice.render"] * 100, "payloads": payloads,
                   "max_attempts": [5] * 100, "delays": [0.0] * 100, "idempotency_keys": [None] * 100,
                   "priorities": [0] * 100, "trace_contexts": [None] * 100, "channel": notify_channel("tenure")}
            c0 = cpu()
            conn.execute(q["job_enqueue_many"], enq, prepare=True).fetchall()
            spent["job_enqueue_many"][0] += cpu() - c0
            spent["job_enqueue_many"][1] += 100
            c0 = cpu()
            rows = conn.execute(q["job_claim"], claim_p, prepare=True).fetchall()
            spent["job_claim"][0] += cpu() - c0
            spent["job_claim"][1] += len(rows)
            held.append(rows)
            done = held.pop(0)
            params = {"ids": [r["id"] for r in done], "tokens": [r["lock_token"] for r in done], "worker_id": "w1"}
            c0 = cpu()
            out = conn.execute(q["job_complete_many"], params, prepare=True).fetchall()
            spent["job_complete_many"][0] += cpu() - c0
            spent["job_complete_many"][1] += len(done)
            if not all(r["accepted"] for r in out):
                raise RuntimeError("job_complete_many rejected a current token")
        return {n: s / max(j, 1) * 1e6 for n, (s, j) in spent.items()}
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, start_server
    p = argparse.ArgumentParser(prog="python -m bench.experiments.ui_index_cost", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--backlog", type=int, default=60_000)
    p.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    p.add_argument("--only", action="append", default=[], help="variants to run (default: all)")
    p.add_argument("--variant", action="append", type=parse_variant, default=[],
                   help="NAME=SQL[;SQL...]: measure this schema variant next to the schema as it is")
    args = p.parse_args(argv)
    server = start_server(args.datadir)
    setups: dict[str, list[str]] = dict(args.variant)
    if setups:
        chosen: dict[str, list[str]] = {"before": [], **{k: [] for k in setups}}
    else:
        chosen = {k: v for k, v in variants().items() if not args.only or k in args.only or k == "before"}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in chosen}
    for rep in range(args.reps):
        for name, drop in chosen.items():
            dsn = prepare(server, drop, args.backlog, setups.get(name))
            r = measure(dsn, args.rounds, args.backlog + 1)
            results[name].append(r)
            log(f"  [{rep + 1}/{args.reps}] {name}: " + ", ".join(f"{k} {v:.1f} µs" for k, v in r.items()))
    med = {k: {s: statistics.median(x[s] for x in rs) for s in STATEMENTS} for k, rs in results.items()}
    total = {k: sum(v[s] for s in STATEMENTS) for k, v in med.items()}
    rows = []
    for k, v in med.items():
        rng = [f"{min(x[s] for x in results[k]):.1f}–{max(x[s] for x in results[k]):.1f}" for s in STATEMENTS]
        rows.append([k, *[f"{v[s]:.1f} ({r})" for s, r in zip(STATEMENTS, rng)],
                     f"{v['job_claim'] + v['job_complete_many']:.1f}",
                     f"{(v['job_claim'] + v['job_complete_many']) / (med['before']['job_claim'] + med['before']['job_complete_many']):.2f}×",
                     f"{total[k]:.1f}", f"{total[k] / total['before']:.2f}×"])
    print(f"\nBackend CPU µs per job, median (min–max) of {args.reps} interleaved runs, {args.rounds} rounds of 100, "
          f"backlog {args.backlog:,}\n")
    print(stats.table(["variant", "enqueue", "claim", "complete", "claim+complete", "÷ before",
                       "all three", "÷ before"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
