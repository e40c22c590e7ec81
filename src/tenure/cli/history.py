"""`tenure history move|status` (issue 23): where completed jobs live (docs/architecture.md).

``move`` is the online part of migration 0009: it moves the completed jobs still in ``jobs``
into ``job_history`` in batches (each one short transaction that locks only its own rows), until
none is left, and reports the rate. Every reaper cycle also moves a batch, so running it is
optional; it is the fast way on a big installation. ``status`` lists the partitions."""

from __future__ import annotations

import argparse
import time
from typing import Any

from tenure.cli.common import command, duration, open_repo, positive_int, print_json, subcommands, table
from tenure.core.repository import HISTORY_MOVE_BATCH_DEFAULT

ORDER = 82


def register(sub: Any) -> None:
    hs = subcommands(command(sub, "history", "move completed jobs into job_history; list its partitions"),
                     "history_command")
    mv = command(hs, "move", "move completed jobs still in the jobs table into job_history, in batches")
    mv.add_argument("--batch", type=positive_int, default=HISTORY_MOVE_BATCH_DEFAULT,
                    help=f"jobs per transaction (default {HISTORY_MOVE_BATCH_DEFAULT})")
    mv.add_argument("--pause", type=duration, default=0.0, help="pause between batches, e.g. 0.5s (default 0)")
    mv.set_defaults(func=cmd_history_move)
    st = command(hs, "status", "the partitions of job_history, with row estimates")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_history_status)


def cmd_history_move(args: argparse.Namespace) -> int:
    conn, repo = open_repo(args)
    moved = batches = 0
    started = time.monotonic()
    with conn:
        repo.history_ensure()
        after_id = 0
        while True:
            n, last_id = repo.history_move_batch(args.batch, after_id=after_id)
            if last_id == after_id:
                break
            moved += n
            batches += 1
            after_id = last_id
            if args.pause:
                time.sleep(args.pause)
    elapsed = time.monotonic() - started
    rate = f", {moved / elapsed:,.0f}/s" if moved and elapsed > 0 else ""
    print(f"moved {moved} completed job(s) into job_history in {batches} batch(es), {elapsed:.1f} s{rate}")
    return 0


def cmd_history_status(args: argparse.Namespace) -> int:
    conn, repo = open_repo(args)
    with conn:
        parts = repo.history_partitions()
    if args.json:
        print_json([{"name": p.name, "bounds": p.bounds, "estimated_rows": p.estimated_rows} for p in parts])
        return 0
    table(["partition", "bounds", "rows (estimate)"],
          [[p.name, p.bounds, str(p.estimated_rows) if p.estimated_rows >= 0 else "-"] for p in parts])
    return 0
