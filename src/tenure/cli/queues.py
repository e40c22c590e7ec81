"""`tenure queues list|pause|resume|limit` (issue 14): pause and resume queues, and a global limit
on a queue's running jobs, through :mod:`tenure.control`. Pause and resume are idempotent; a
negative limit exits 2 with one line and changes nothing."""

from __future__ import annotations

import argparse
from typing import Any

from tenure import control
from tenure.cli.common import command, open_repo, print_json, subcommands, table

ORDER = 75


def register(sub: Any) -> None:
    qs = subcommands(command(sub, "queues", "list, pause, resume and limit queues"), "queues_command")
    ls = command(qs, "list", "queues with pause state, global limit, ready and running")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_queues_list)
    for verb, helptext in (("pause", "stop claiming from a queue (running jobs finish)"),
                           ("resume", "claim from a paused queue again")):
        sp = command(qs, verb, helptext)
        sp.add_argument("queue")
        sp.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
        sp.set_defaults(func=cmd_queues_pause, paused=verb == "pause")
    lim = command(qs, "limit", "cap the jobs running in a queue across all workers")
    lim.add_argument("queue")
    lim.add_argument("--max-running", type=_non_negative_int, required=True,
                     help="most jobs running at once across every worker and pod; 0 removes the limit")
    lim.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
    lim.set_defaults(func=cmd_queues_limit)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def cmd_queues_list(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        rows = control.list_queues(conn, schema=args.schema)
    if args.json:
        print_json(rows)
        return 0
    table(("queue", "paused", "max_running", "ready", "running", "changed_by"),
               [(r["queue"], "yes" if r["paused"] else "no", r["max_running"] or "-", r["ready"], r["running"],
                 r["updated_by"] or "-") for r in rows])
    if not rows:
        print("(no queues yet)")
    return 0


def cmd_queues_pause(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        row = control.set_paused(conn, args.queue, args.paused, schema=args.schema,
                                 requested_by=args.by or control.default_requester("cli"))
    verb = "paused" if args.paused else "resumed"
    if row["was_paused"] == args.paused:
        print(f"queue {args.queue!r} is already {'paused' if args.paused else 'running (not paused)'}: no change")
    else:
        print(f"queue {args.queue!r} {verb}")
    return 0


def cmd_queues_limit(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        row = control.set_max_running(conn, args.queue, args.max_running, schema=args.schema,
                                      requested_by=args.by or control.default_requester("cli"))
    if row["max_running"] is None:
        print(f"queue {args.queue!r}: no global running limit")
    else:
        print(f"queue {args.queue!r}: at most {row['max_running']} running across all workers")
    return 0
