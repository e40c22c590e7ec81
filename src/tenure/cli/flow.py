"""`tenure flow limit|weight|rate|list` (issue 38): running limits and weights per flow key, and
named rate limits, through :mod:`tenure.flow`. A limit holds across every worker and pod (the
claim counts live running jobs and takes tokens under a lock); bad input exits 2 with one line
and changes nothing."""

from __future__ import annotations

import argparse
import math
from typing import Any

from tenure import flow
from tenure.cli.common import command, open_repo, positive_int, print_json, subcommands, table
from tenure.control import check_queue_name, default_requester
from tenure.core.errors import ConfigError

ORDER = 76


def register(sub: Any) -> None:
    fs = subcommands(command(sub, "flow", "flow control: running limits and weights per flow key, rate limits"),
                     "flow_command")
    lim = command(fs, "limit", "cap the jobs running per flow key of a queue, across all workers")
    lim.add_argument("queue")
    lim.add_argument("--per-key-running", type=_limit, default=None, metavar="N",
                     help="most jobs running at once for each key of the queue; 0 removes the limit")
    lim.add_argument("--key", default=None, help="one flow key (with --running): its own limit")
    lim.add_argument("--running", type=_limit, default=None, metavar="N",
                     help="most jobs running at once for --key (overrides --per-key-running); 0 removes it")
    lim.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
    lim.set_defaults(func=cmd_flow_limit)
    wt = command(fs, "weight", "give a flow key of a queue a fairness weight: its share of the claims")
    wt.add_argument("queue")
    wt.add_argument("--key", required=True, help="the flow key")
    wt.add_argument("--weight", type=_weight, default=1.0, metavar="W",
                    help="jobs per turn of the key, above 0, at most 1000; 1 removes its weight (default 1)")
    wt.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
    wt.set_defaults(func=cmd_flow_weight)
    rt = command(fs, "rate", "create, change or delete a named rate limit (a token bucket jobs take from)")
    rt.add_argument("name")
    rt.add_argument("--per-second", type=_per_second, default=None, metavar="R",
                    help="tokens added per second, above 0, at most 1000000")
    rt.add_argument("--burst", type=_burst, default=None, metavar="B",
                    help="most tokens the bucket holds (default: R rounded up, at least 1)")
    rt.add_argument("--per-key", action="store_true", help="one bucket per flow key (jobs without a key share one)")
    rt.add_argument("--delete", action="store_true", help="delete the rate limit and its buckets")
    rt.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
    rt.set_defaults(func=cmd_flow_rate)
    ls = command(fs, "list", "each flow limit, with each key's running, limit, weight, blocked and oldest "
                             "wait, and each rate limit's tokens")
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


def _checked(text: str, parse: Any, check: Any, what: str) -> Any:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    try:
        return check(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _weight(text: str) -> float:
    return float(_checked(text, float, flow.check_weight, "a number"))


def _per_second(text: str) -> float:
    return float(_checked(text, float, flow.check_per_second, "a number"))


def _burst(text: str) -> int:
    return int(_checked(text, int, flow.check_burst, "a whole number"))


def cmd_flow_weight(args: argparse.Namespace) -> int:
    check_queue_name(args.queue)
    flow.check_key(args.key)
    conn, _ = open_repo(args)
    with conn:
        flow.set_key_weight(conn, args.queue, args.key, args.weight, schema=args.schema,
                            requested_by=args.by or default_requester("cli"))
    print(f"queue {args.queue!r}, key {args.key!r}: " + (f"weight {args.weight:g}" if args.weight != 1
                                                         else "no weight of its own (1)"))
    return 0


def cmd_flow_rate(args: argparse.Namespace) -> int:
    flow.check_rate_limit_name(args.name)
    by = args.by or default_requester("cli")
    if args.delete:
        if args.per_second is not None or args.burst is not None or args.per_key:
            raise ConfigError("--delete takes no --per-second, --burst or --per-key")
        conn, _ = open_repo(args)
        with conn:
            deleted = flow.delete_rate_limit(conn, args.name, schema=args.schema, requested_by=by)
        print(f"rate limit {args.name!r}: " + ("deleted" if deleted else "there was none"))
        return 0
    if args.per_second is None:
        raise ConfigError("give --per-second R (or --delete)")
    conn, _ = open_repo(args)
    with conn:
        row = flow.set_rate_limit(conn, args.name, args.per_second, burst=args.burst, per_key=args.per_key,
                                  schema=args.schema, requested_by=by)
    print(f"rate limit {args.name!r}: {_rate(row)}" + (" (new)" if row.get("old_per_second") is None else ""))
    return 0


def _rate(r: dict[str, Any]) -> str:
    return f"{r['per_second']:g}/s, burst {r['burst']}" + (", per flow key" if r["per_key"] else "")


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
        rates = flow.rate_status(conn, schema=args.schema)
    if args.json:
        print_json({"queues": [q.as_json() for q in queues], "rate_limits": rates})
        return 0
    if not queues and not rates:
        print("(no flow limits)")
        return 0
    for q in queues:
        print(f"queue {q.queue}: per-key running {q.per_key_running or '-'}"
              f"{' (paused)' if q.paused else ''}, {q.keys_total} keys, {q.blocked} jobs blocked")
        table(("key", "running", "limit", "weight", "ready", "blocked", "oldest_wait"),
              [(k["flow_key"], k["running"], k["running_limit"] or "-", f"{k['weight']:g}", k["ready"], k["blocked"],
                f"{k['oldest_wait_seconds']:.1f}s" if k["oldest_wait_seconds"] is not None else "-")
               for k in q.keys])
        if q.keys_total > len(q.keys):
            print(f"({q.keys_total - len(q.keys)} more keys; --keys N shows more)")
    if rates:
        print("rate limits:")
        table(("name", "per_second", "burst", "per_key", "buckets", "tokens", "paused_until"),
              [(r["name"], f"{r['per_second']:g}", r["burst"], "yes" if r["per_key"] else "no", r["buckets"],
                _tokens(r), r["paused_until"].isoformat(timespec="seconds") if r["paused_until"] else "-")
               for r in rates])
    return 0


def _tokens(r: dict[str, Any]) -> str:
    """Tokens now, floored to a tenth (a per-key limit's: the fewest of any one bucket)."""
    text = f"{math.floor(r['tokens'] * 10) / 10:g}"
    return f"min {text}" if r["per_key"] else text
