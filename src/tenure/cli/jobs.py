"""`tenure jobs`: inspect and control jobs: ``show`` (one job, its attempts and its event history;
``--json`` prints :func:`tenure.job_document.job_document`, the document `tenure ui` shows), ``list``
(filters, keyset paging, --json), ``cancel`` and ``retry`` (issue 14, through
:mod:`tenure.control`; all or nothing: an unknown id or a wrong state exits 2 and changes nothing)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from tenure import control
from tenure.cli.common import command, duration, open_repo, positive_int, print_json, subcommands, table
from tenure.job_document import job_document

ORDER = 70
JOBS_LIST_LIMIT_DEFAULT = 50
SHOW_FIELDS = ("id", "queue_name", "task", "status", "attempt_count", "max_attempts", "lease_expiry_count",
               "fence", "available_at", "started_at", "completed_at", "failed_at", "last_heartbeat_at",
               "lease_expires_at", "lease_expired", "locked_by", "lock_token", "idempotency_key",
               "flow_key", "last_error_code", "last_error", "checkpoint_step", "payload")
SHOW_FIELDS_RATED = (*SHOW_FIELDS[:SHOW_FIELDS.index("flow_key") + 1], "rate_limit", "rate_units",
                     *SHOW_FIELDS[SHOW_FIELDS.index("flow_key") + 1:])
"""What `tenure jobs show` prints of a job that names a rate limit."""


def register(sub: Any) -> None:
    jobs = subcommands(command(sub, "jobs", "inspect jobs"), "jobs_command")
    show = command(jobs, "show", "one job and its event history")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)
    ls = command(jobs, "list", "jobs newest first, filtered, paged with --cursor")
    ls.add_argument("--queue")
    ls.add_argument("--status", choices=control.JOB_STATUSES)
    ls.add_argument("--task")
    ls.add_argument("--flow-key", default=None, metavar="KEY", help="only jobs with exactly this flow key")
    ls.add_argument("--created-since", type=duration, default=None, metavar="DURATION",
                    help="only jobs created within this duration (e.g. 1h)")
    ls.add_argument("--failed-since", type=duration, default=None, metavar="DURATION",
                    help="only jobs whose last failure is within this duration")
    ls.add_argument("--limit", type=positive_int, default=JOBS_LIST_LIMIT_DEFAULT)
    ls.add_argument("--cursor", type=positive_int, default=None,
                    help="continue after this id (printed as the next cursor by the previous page)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_jobs_list)

    cancel = command(jobs, "cancel", "cancel pending or running jobs (all or nothing)")
    cancel.add_argument("ids", type=positive_int, nargs="+", metavar="ID")
    cancel.add_argument("--by", default=None, help="who asked, for the audit trail (default cli:USER@HOST)")
    cancel.set_defaults(func=cmd_jobs_cancel)

    retry = command(jobs, "retry", "put failed or cancelled jobs back as pending (all or nothing)")
    retry.add_argument("ids", type=positive_int, nargs="+", metavar="ID")
    retry.add_argument("--app", help="MODULE:ATTR whose task validators check payloads first")
    retry.add_argument("--by", default=None, help="who asked, for the audit trail (default cli:USER@HOST)")
    retry.set_defaults(func=cmd_jobs_retry)


def cmd_show(args: argparse.Namespace) -> int:
    """Print one job (any status) and its audit events; exit 1 when there is no such job."""
    conn, _ = open_repo(args)
    with conn:
        document = job_document(conn, args.id, schema=args.schema)
    if document is None:
        print(f"tenure: no job {args.id}", file=sys.stderr)
        return 1
    if args.json:
        print_json(document)
        return 0
    job, events = document["job"], document["events"]
    for key in SHOW_FIELDS if job.get("rate_limit") is None else SHOW_FIELDS_RATED:
        value = job.get(key)
        if isinstance(value, datetime):
            value = value.isoformat()
        if key == "payload":
            value = json.dumps(value)
        print(f"{key:20} {value}")
    print("\nattempts:")
    for a in document["attempts"]:
        print(f"  #{a['attempt'] or '-'}  fence={a['fence'] if a['fence'] is not None else '-'}  token={a['lock_token'][:8]}  "
              f"worker={a['worker'] or '-'}  {a['outcome']}  {a['error_code'] or ''}".rstrip())
    for w in document["stale_writes"]:
        print(f"  refused late {w['tried'] or 'write'} of attempt {w['attempt'] or '-'} ({w['event']})")
    print("\nevents:")
    for e in events:
        token = str(e["lock_token"])[:8] if e["lock_token"] else "-"
        print(f"  {e['created_at'].isoformat()}  {e['event']:30} attempt={e['attempt'] or '-'} "
              f"token={token} by={e['worker_id'] or '-'} {e['reason'] or ''}")
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        rows, cursor = control.list_jobs(conn, schema=args.schema, queue=args.queue, status=args.status,
                                         task=args.task, created_since=args.created_since,
                                         failed_since=args.failed_since, cursor=args.cursor, limit=args.limit,
                                         flow_key=args.flow_key)
    if args.json:
        print_json(rows)
    else:
        keyed = any(r.get("flow_key") is not None for r in rows)  # the column only when a row has a key
        extra = ("flow_key",) if keyed else ()
        table(("id", "queue", "task", "status", "prio", "attempts", "created", "error") + extra,
                   [(r["id"], r["queue_name"], r["task"], r["status"], r["priority"],
                     f"{r['attempt_count']}/{r['max_attempts']}", _fmt(r["created_at"]),
                     r["last_error_code"] or "-") + ((r["flow_key"] or "-",) if keyed else ()) for r in rows])
    if cursor is not None:
        print(f"next page: --cursor {cursor}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    conn, _ = open_repo(args)
    with conn:
        report = control.cancel(conn, args.ids, schema=args.schema, strict=True,
                                requested_by=args.by or control.default_requester("cli"))
    for i in report.cancelled:
        print(f"cancelled job {i} (was pending)")
    for i in report.revoked:
        print(f"cancelled job {i} (was running: token revoked; its worker is told at its next heartbeat)")
    return 0


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    validate = None
    if args.app:
        from tenure.worker.app import load_app
        app = load_app(args.app)

        def validate(row: dict[str, Any]) -> str | None:
            task = app.get(row["task"])
            if task is None:
                return f"unknown task {row['task']!r} in {args.app}"
            return task.check_payload(row["payload"])

    conn, _ = open_repo(args)
    with conn:
        moved = control.retry(conn, args.ids, schema=args.schema, validate=validate,
                              requested_by=args.by or control.default_requester("cli"))
    for i in moved:
        print(f"retrying job {i} (pending, fresh attempt budget)")
    return 0


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)
