"""`tenure history move|status` (issue 23): where completed jobs live (docs/architecture.md).

``move`` is the online part of migration 0009: it moves the completed jobs still in ``jobs``
into ``job_history`` in batches (each one short transaction that locks only its own rows), until
none is left, and reports the rate. Every reaper cycle also moves a batch, so running it is
optional; it is the fast way on a big installation. ``status`` lists the partitions. The walk
itself is :func:`tenure.reaper.history.move_legacy` (the reaper's batch takes the same steps)."""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command, duration, open_repo, positive_int, print_json, subcommands, table
from tenure.core.repository import HistoryStore
from tenure.reaper.history import HISTORY_MOVE_BATCH_DEFAULT, move_legacy

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
    conn, repository = open_repo(args)
    repo: HistoryStore = repository
    with conn:
        done = move_legacy(repo, batch=args.batch, pause=args.pause)
    rate = f", {done.moved / done.seconds:,.0f}/s" if done.moved and done.seconds > 0 else ""
    print(f"moved {done.moved} completed job(s) into job_history in {done.batches} batch(es), "
          f"{done.seconds:.1f} s{rate}")
    return 0


def cmd_history_status(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: HistoryStore = repository
    with conn:
        parts = repo.history_partitions()
    if args.json:
        print_json([{"name": p.name, "bounds": p.bounds, "estimated_rows": p.estimated_rows} for p in parts])
        return 0
    table(["partition", "bounds", "rows (estimate)"],
          [[p.name, p.bounds, str(p.estimated_rows) if p.estimated_rows >= 0 else "-"] for p in parts])
    return 0
