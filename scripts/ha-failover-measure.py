#!/usr/bin/env python3
"""Measure failovers per replication mode: repeated `tenure chaos --ha patroni` runs, one table.

Runs the CLI as a user would (one subprocess per run, reports as JSON), ``--runs`` runs per mode,
each with ``--rounds`` rounds of switchover, kill -9 of the primary's postmaster and isolation of
the primary, then prints a Markdown table per mode and fault (failover time, worker stall) and
per mode (losses, duplicates, invariants). Usage (needs `make install` and scripts/tools/patroni.sh):

    .venv/bin/python scripts/ha-failover-measure.py --modes sync,async --runs 2 --rounds 4 --out ha-results

Several minutes per run; not a CI test (tests/chaos/test_ha_patroni.py is the short version).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def q(values: list[float], p: float) -> str:
    if not values:
        return "-"
    s = sorted(values)
    return f"{s[max(1, math.ceil(p * len(s))) - 1]:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--calm", default="3")
    ap.add_argument("--out", default="ha-results")
    ap.add_argument("--summarize-only", action="store_true", help="only aggregate the reports already in --out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tenure = str(Path(sys.executable).parent / "tenure")
    modes = [m for m in args.modes.split(",") if m]
    if not args.summarize_only:
        for mode in modes:
            for run in range(args.runs):
                report = out / f"{mode}-{run}.json"
                cmd = [tenure, "chaos", "--ha", "patroni", "--replication", mode, "--rounds", str(args.rounds),
                       "--rate", str(args.rate), "--calm", args.calm, "--seed", str(run + 1),
                       "--report", str(report), "--log-dir", str(out / f"{mode}-{run}-logs")]
                print("$", " ".join(cmd), flush=True)
                t = time.monotonic()
                with open(out / f"{mode}-{run}.out", "w") as log:
                    code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
                print(f"  exit {code} after {time.monotonic() - t:.0f}s", flush=True)
    print(summarize(out, modes))
    return 0


def summarize(out: Path, modes: list[str]) -> str:
    lines = ["| mode | fault | primary moved / injected | failover time p50 / max (s) | worker stall p50 / max (s) |",
             "|---|---|---|---|---|"]
    totals = ["", "| mode | runs | failovers (primary moved) | jobs | jobs lost | acked completions lost | jobs run twice | "
              "guarded effects re-run after acked success | provider calls repeated (deduplicated) | "
              "stale writes rejected | every invariant held |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode in modes:
        reports: list[dict[str, Any]] = []
        for path in sorted(out.glob(f"{mode}-*.json")):
            reports.append(json.loads(path.read_text()))
        if not reports:
            continue
        by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in reports:
            for f in r["failovers"]:
                by_kind[f["kind"]].append(f)
        for kind, fs in sorted(by_kind.items()):
            fo = [f["failover_seconds"] for f in fs if f["failover_seconds"] is not None]
            st = [f["stall_seconds"] for f in fs if f["stall_seconds"] is not None and f["failover_seconds"] is not None]
            errors = sum(1 for f in fs if f.get("error"))
            moved = sum(1 for f in fs if f.get("new_primary") and f["new_primary"] != f["old_primary"])
            lines.append(f"| {mode} | {kind} | {moved} of {len(fs)}{f' ({errors} with errors)' if errors else ''} | "
                         f"{q(fo, 0.5)} / {q(fo, 1.0)} | {q(st, 0.5)} / {q(st, 1.0)} |")

        def total(key: str) -> int:
            return sum(int(r["figures"].get(key) or 0) for r in reports)
        held = sum(1 for r in reports if r["figures"].get("invariants_held"))
        moved_total = sum(1 for r in reports for f in r["failovers"]
                          if f.get("new_primary") and f["new_primary"] != f["old_primary"])
        totals.append(f"| {mode} | {len(reports)} | {moved_total} | {total('jobs_enqueued_acked')} | "
                      f"{total('jobs_lost')} | {total('acked_completions_lost')} of {total('acked_completions')} | "
                      f"{total('jobs_run_twice')} | {total('guarded_effects_rerun_after_ack')} | "
                      f"{total('guarded_provider_calls_repeated')} | {total('stale_writes_rejected')} | "
                      f"{held} of {len(reports)} runs |")
    return "\n".join(lines + totals)


if __name__ == "__main__":
    raise SystemExit(main())
