"""`tenure flow limit|list` (issue 38): running limits per flow key, through :mod:`tenure.flow`.
A limit holds across every worker and pod (the claim counts live running jobs); bad input exits
2 with one line and changes nothing."""

from __future__ import annotations

import argparse
from typing import Any

from tenure import flow
from tenure.cli.common import command, open_repo, positive_int, print_json, subcommands, table
from tenure.control import check_queue_name, default_requester
from tenure.core.errors import ConfigError

ORDER = 76


def register(sub: Any) -> None:
    fs = subcommands(command(sub, "flow", "flow control: running limits per flow key"), "flow_command")
    lim = command(fs, "limit", "cap the jobs running per flow key of a queue, across all workers")
    lim.add_argument("queue")
    lim.add_argument("--per-key-running", type=_limit, default=None, metavar="N",
                     help="most jobs running at once for each key of the queue; 0 removes the limit")
    lim.add_argument("--key", default=None, help="one flow key (with --running): its own limit")
    lim.add_argument("--running", type=_limit, default=None, metavar="N",
                     help="most jobs running at once for --key (overrides --per-key-running); 0 removes it")
    lim.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
    lim.set_defaults(func=cmd_flow_limit)
    ls = command(fs, "list", "each flow limit, with each key's running, limit, blocked and oldest wait")
    ls.add_argument("--keys", type=positive_int, default=flow.KEYS_SHOWN_DEFAULT,
                    help=f"keys shown per queue, the busiest first (default {flow.KEYS_SHOWN_DEFAULT})")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_flow_list)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    try:
        return flow.check_running_limit(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_flow_limit(args: argparse.Namespace) -> int:
    if (args.key is None) != (args.running is None):
        raise ConfigError("--key and --running go together")
    if args.per_key_running is None and args.key is None:
        raise ConfigError("give --per-key-running N, or --key K --running N")
    if args.key is not None:
        flow.check_key(args.key)
    check_queue_name(args.queue)
    by = args.by or default_requester("cli")
    conn, _ = open_repo(args)
    with conn, conn.transaction():  # both settings or neither
        if args.per_key_running is not None:
            flow.set_per_key_running(conn, args.queue, args.per_key_running, schema=args.schema, requested_by=by)
        if args.key is not None:
            flow.set_key_running(conn, args.queue, args.key, args.running, schema=args.schema, requested_by=by)
    if args.per_key_running is not None:
        print(f"queue {args.queue!r}: " + (f"at most {args.per_key_running} running per flow key"
                                           if args.per_key_running else "no per-key running limit"))
    if args.key is not None:
        print(f"queue {args.queue!r}, key {args.key!r}: " + (f"at most {args.running} running" if args.running
                                                             else "no limit of its own"))
    return 0


def cmd_flow_list(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        queues = flow.flow_status(conn, schema=args.schema, keys=args.keys)
    if args.json:
        print_json([q.as_json() for q in queues])
        return 0
    if not queues:
        print("(no flow limits)")
        return 0
    for q in queues:
        print(f"queue {q.queue}: per-key running {q.per_key_running or '-'}"
              f"{' (paused)' if q.paused else ''}, {q.keys_total} keys, {q.blocked} jobs blocked")
        table(("key", "running", "limit", "ready", "blocked", "oldest_wait"),
              [(k["flow_key"], k["running"], k["running_limit"] or "-", k["ready"], k["blocked"],
                f"{k['oldest_wait_seconds']:.1f}s" if k["oldest_wait_seconds"] is not None else "-")
               for k in q.keys])
        if q.keys_total > len(q.keys):
            print(f"({q.keys_total - len(q.keys)} more keys; --keys N shows more)")
    return 0
