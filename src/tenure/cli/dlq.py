"""`tenure dlq`: the dead-letter queue as a quarantine, not a bin (R12).

Replay is controlled (:func:`tenure.control.replay_matching`, the UI's replay too): payloads are validated first (with ``--app``, against the task's
validator; unknown tasks are skipped), jobs move in small batches at no more than ``--rate``
per second, progress is printed, and a replay is safe to interrupt and re-run: only jobs still
in the DLQ move, so nothing is replayed twice. ``--dry-run`` walks the same batches with the
same validation and writes nothing, so its preview lists exactly what the real run would
replay and skip (as of now: jobs dead-lettered meanwhile are not in it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tenure import control
from tenure.cli.common import command, duration, open_repo, positive_int, print_json, subcommands, table
from tenure.cli.jobs import cmd_show as cmd_jobs_show
from tenure.core.errors import ConfigError
from tenure.core.repository import DeadLetterStore
from tenure.worker.app import App, load_app

ORDER = 90
REPLAY_RATE_DEFAULT = 5.0
REPLAY_LIMIT_DEFAULT = 100


def register(sub: Any) -> None:
    dlq = subcommands(command(sub, "dlq", "inspect, replay and purge dead-lettered jobs"), "dlq_command")

    ls = command(dlq, "list", "dead-lettered jobs, newest first")
    ls.add_argument("--queue")
    ls.add_argument("--error-code")
    ls.add_argument("--limit", type=positive_int, default=100)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    show = command(dlq, "show", "one dead-lettered job with its history")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_jobs_show)

    rp = command(dlq, "replay", "move dead-lettered jobs back to the queue, rate limited")
    rp.add_argument("--id", type=int, action="append", dest="ids")
    rp.add_argument("--queue")
    rp.add_argument("--error-code")
    rp.add_argument("--limit", type=positive_int, default=REPLAY_LIMIT_DEFAULT)
    rp.add_argument("--rate", type=float, default=REPLAY_RATE_DEFAULT, help="jobs per second at most")
    rp.add_argument("--app", help="MODULE:ATTR whose task validators check payloads before replay")
    rp.add_argument("--dry-run", action="store_true",
                    help="list what would be replayed and skipped (validated like the real run), change nothing")
    rp.set_defaults(func=cmd_replay)

    pg = command(dlq, "purge", "delete dead-lettered jobs older than a duration")
    pg.add_argument("--older-than", type=duration, required=True)
    pg.add_argument("--queue")
    pg.set_defaults(func=cmd_purge)


def cmd_list(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: DeadLetterStore = repository
    with conn:
        rows = repo.dlq_list(queue=args.queue, error_code=args.error_code, limit=args.limit)
    if args.json:
        print_json(rows)
        return 0
    table(("id", "queue", "task", "code", "attempts", "expiries", "last_failed", "key"),
          [(r["id"], r["queue_name"], r["task"], r["last_error_code"], r["attempt_count"], r["lease_expiry_count"],
            r["last_failed_at"].isoformat() if r["last_failed_at"] else "-", r["idempotency_key"] or "-")
           for r in rows])
    return 0


def payload_validator(app: App | None, app_ref: str | None) -> Any:
    """``validate(row)``: None for a job the app can run, else why not (no app: everything passes)."""
    def validate(row: dict[str, Any]) -> str | None:
        if app is None:
            return None
        task = app.get(row["task"])
        if task is None:
            return f"unknown task {row['task']!r} in {app_ref}"
        return task.check_payload(row["payload"])
    return validate


def cmd_replay(args: argparse.Namespace) -> int:
    if not args.rate > 0:
        raise ConfigError("--rate must be positive")
    validate = payload_validator(load_app(args.app) if args.app else None, args.app)
    conn, _ = open_repo(args)
    totals = [0, 0]

    def progress(done: list[int], bad: list[tuple[int, str]]) -> None:
        totals[0] += len(done)
        totals[1] += len(bad)
        if args.dry_run:
            for job_id in done:
                print(f"would replay {job_id}")
            for job_id, why in bad:
                print(f"would skip {job_id}: {why}")
            return
        for job_id, why in bad:
            print(f"skipped {job_id}: {why}", file=sys.stderr)
        print(f"replayed {totals[0]}/{args.limit} (skipped {totals[1]})", flush=True)

    with conn:
        report = control.replay_matching(
            conn, control.DlqFilter(queue=args.queue, error_code=args.error_code), schema=args.schema,
            rate=args.rate, dry_run=args.dry_run, requested_by=control.default_requester("cli"),
            validate=validate, limit=args.limit, ids=args.ids, on_batch=progress)
    if args.dry_run:
        print(f"dry run: {len(report.replayed)} would be replayed, {len(report.skipped)} skipped; nothing changed")
    elif control.held_only(report):  # each skipped job is on stderr above; nothing was replayed
        raise ConfigError(control.held_message(dict(report.skipped), "replayed"))
    else:
        print(f"done: {len(report.replayed)} replayed, {len(report.skipped)} skipped")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: DeadLetterStore = repository
    with conn:
        deleted = repo.dlq_purge(args.older_than, args.queue)
    print(f"purged {deleted} dead-lettered job(s)")
    return 0
