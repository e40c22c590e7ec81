"""`tenure jobs list|cancel|retry` and `tenure queues list|pause|resume|limit` (issue 14).

Thin wrappers over :mod:`tenure.control`. Bad input (unknown id, wrong state, out-of-range
values) exits 2 with one line on stderr and changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from tenure import control
from tenure.core.errors import ConfigError

JOBS_LIST_LIMIT_DEFAULT = 50


def _cli() -> Any:
    import tenure.cli as cli
    return cli


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


def add_jobs_commands(jobs_sub: Any) -> None:
    """Add list/cancel/retry under `tenure jobs`."""
    cli = _cli()
    ls = jobs_sub.add_parser("list", help="jobs newest first, filtered, paged with --cursor")
    ls.add_argument("--queue")
    ls.add_argument("--status", choices=control.JOB_STATUSES)
    ls.add_argument("--task")
    ls.add_argument("--created-since", type=cli.duration, default=None, metavar="DURATION",
                    help="only jobs created within this duration (e.g. 1h)")
    ls.add_argument("--failed-since", type=cli.duration, default=None, metavar="DURATION",
                    help="only jobs whose last failure is within this duration")
    ls.add_argument("--limit", type=cli.positive_int, default=JOBS_LIST_LIMIT_DEFAULT)
    ls.add_argument("--cursor", type=cli.positive_int, default=None,
                    help="continue after this id (printed as the next cursor by the previous page)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_jobs_list)

    cancel = jobs_sub.add_parser("cancel", help="cancel pending or running jobs (all or nothing)")
    cancel.add_argument("ids", type=cli.positive_int, nargs="+", metavar="ID")
    cancel.add_argument("--by", default=None, help="who asked, for the audit trail (default cli:USER@HOST)")
    cancel.set_defaults(func=cmd_jobs_cancel)

    retry = jobs_sub.add_parser("retry", help="put failed or cancelled jobs back as pending (all or nothing)")
    retry.add_argument("ids", type=cli.positive_int, nargs="+", metavar="ID")
    retry.add_argument("--app", help="MODULE:ATTR whose task validators check payloads first")
    retry.add_argument("--by", default=None, help="who asked, for the audit trail (default cli:USER@HOST)")
    retry.set_defaults(func=cmd_jobs_retry)


def add_parser(sub: Any) -> None:
    """Add `tenure queues`."""
    cli = _cli()
    p = sub.add_parser("queues", help="list, pause, resume and limit queues")
    qs = p.add_subparsers(dest="queues_command", required=True, parser_class=cli._Parser)
    ls = qs.add_parser("list", help="queues with pause state, global limit, ready and running")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_queues_list)
    for verb, helptext in (("pause", "stop claiming from a queue (running jobs finish)"),
                           ("resume", "claim from a paused queue again")):
        sp = qs.add_parser(verb, help=helptext)
        sp.add_argument("queue")
        sp.add_argument("--by", default=None, help="who asked (default cli:USER@HOST)")
        sp.set_defaults(func=cmd_queues_pause, paused=verb == "pause")
    lim = qs.add_parser("limit", help="cap the jobs running in a queue across all workers")
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


def cmd_jobs_list(args: argparse.Namespace) -> int:
    cli = _cli()
    conn, _ = cli._repo(args)
    with conn:
        rows, cursor = control.list_jobs(conn, schema=args.schema, queue=args.queue, status=args.status,
                                         task=args.task, created_since=args.created_since,
                                         failed_since=args.failed_since, cursor=args.cursor, limit=args.limit)
    if args.json:
        cli._print_json(rows)
    else:
        cli._table(("id", "queue", "task", "status", "prio", "attempts", "created", "error"),
                   [(r["id"], r["queue_name"], r["task"], r["status"], r["priority"],
                     f"{r['attempt_count']}/{r['max_attempts']}", _fmt(r["created_at"]),
                     r["last_error_code"] or "-") for r in rows])
    if cursor is not None:
        print(f"next page: --cursor {cursor}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    cli = _cli()
    conn, _ = cli._repo(args)
    with conn:
        report = control.cancel(conn, args.ids, schema=args.schema, strict=True,
                                requested_by=args.by or control.default_requester("cli"))
    for i in report.cancelled:
        print(f"cancelled job {i} (was pending)")
    for i in report.revoked:
        print(f"cancelled job {i} (was running: token revoked; its worker is told at its next heartbeat)")
    return 0


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    cli = _cli()
    validate = None
    if args.app:
        from tenure.worker.app import load_app
        app = load_app(args.app)

        def validate(row: dict[str, Any]) -> str | None:
            task = app.get(row["task"])
            if task is None:
                return f"unknown task {row['task']!r} in {args.app}"
            return task.check_payload(row["payload"])

    conn, _ = cli._repo(args)
    with conn:
        moved = control.retry(conn, args.ids, schema=args.schema, validate=validate,
                              requested_by=args.by or control.default_requester("cli"))
    for i in moved:
        print(f"retrying job {i} (pending, fresh attempt budget)")
    return 0


def cmd_queues_list(args: argparse.Namespace) -> int:
    cli = _cli()
    conn, _ = cli._repo(args)
    with conn:
        rows = control.list_queues(conn, schema=args.schema)
    if args.json:
        cli._print_json(rows)
        return 0
    cli._table(("queue", "paused", "max_running", "ready", "running", "changed_by"),
               [(r["queue"], "yes" if r["paused"] else "no", r["max_running"] or "-", r["ready"], r["running"],
                 r["updated_by"] or "-") for r in rows])
    if not rows:
        print("(no queues yet)")
    return 0


def cmd_queues_pause(args: argparse.Namespace) -> int:
    cli = _cli()
    conn, _ = cli._repo(args)
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
    cli = _cli()
    conn, _ = cli._repo(args)
    with conn:
        row = control.set_max_running(conn, args.queue, args.max_running, schema=args.schema,
                                      requested_by=args.by or control.default_requester("cli"))
    if row["max_running"] is None:
        print(f"queue {args.queue!r}: no global running limit")
    else:
        print(f"queue {args.queue!r}: at most {row['max_running']} running across all workers")
    return 0


__all__ = ["ConfigError", "add_jobs_commands", "add_parser"]
