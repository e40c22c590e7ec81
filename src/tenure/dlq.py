"""`tenure dlq`: the dead-letter queue as a quarantine, not a bin (R12).

Replay is controlled: payloads are validated first (with ``--app``, against the task's
validator; unknown tasks are skipped), jobs move in small batches at no more than ``--rate``
per second, progress is printed, and a replay is safe to interrupt and re-run: only jobs still
in the DLQ move, so nothing is replayed twice.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from tenure.core.errors import ConfigError
from tenure.core.repository import Repository

REPLAY_RATE_DEFAULT = 5.0
REPLAY_LIMIT_DEFAULT = 100
REPLAY_BATCH_MAX = 10


def _duration(text: str) -> float:
    from tenure.cli import duration
    return duration(text)


def add_dlq_parser(sub: Any) -> None:
    from tenure.cli import _Parser, positive_int

    p = sub.add_parser("dlq", help="inspect, replay and purge dead-lettered jobs")
    dlq = p.add_subparsers(dest="dlq_command", required=True, parser_class=_Parser)

    ls = dlq.add_parser("list", help="dead-lettered jobs, newest first")
    ls.add_argument("--queue")
    ls.add_argument("--error-code")
    ls.add_argument("--limit", type=positive_int, default=100)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    show = dlq.add_parser("show", help="one dead-lettered job with its history")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)

    rp = dlq.add_parser("replay", help="move dead-lettered jobs back to the queue, rate limited")
    rp.add_argument("--id", type=int, action="append", dest="ids")
    rp.add_argument("--queue")
    rp.add_argument("--error-code")
    rp.add_argument("--limit", type=positive_int, default=REPLAY_LIMIT_DEFAULT)
    rp.add_argument("--rate", type=float, default=REPLAY_RATE_DEFAULT, help="jobs per second at most")
    rp.add_argument("--app", help="MODULE:ATTR whose task validators check payloads before replay")
    rp.add_argument("--dry-run", action="store_true")
    rp.set_defaults(func=cmd_replay)

    pg = dlq.add_parser("purge", help="delete dead-lettered jobs older than a duration")
    pg.add_argument("--older-than", type=_duration, required=True)
    pg.add_argument("--queue")
    pg.set_defaults(func=cmd_purge)


def _open(args: argparse.Namespace) -> tuple[Any, Repository]:
    from tenure.cli import _repo
    return _repo(args)


def cmd_list(args: argparse.Namespace) -> int:
    from tenure.cli import _print_json, _table
    conn, repo = _open(args)
    with conn:
        rows = repo.dlq_list(queue=args.queue, error_code=args.error_code, limit=args.limit)
    if args.json:
        _print_json(rows)
        return 0
    _table(("id", "queue", "task", "code", "attempts", "expiries", "last_failed", "key"),
           [(r["id"], r["queue_name"], r["task"], r["last_error_code"], r["attempt_count"], r["lease_expiry_count"],
             r["last_failed_at"].isoformat() if r["last_failed_at"] else "-", r["idempotency_key"] or "-")
            for r in rows])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from tenure.cli import cmd_jobs_show
    return cmd_jobs_show(args)


def cmd_replay(args: argparse.Namespace) -> int:
    if args.rate <= 0:
        raise ConfigError("--rate must be positive")
    app = None
    if args.app:
        from tenure.worker.app import load_app
        app = load_app(args.app)

    def validate(row: dict[str, Any]) -> str | None:
        if app is None:
            return None
        task = app.get(row["task"])
        if task is None:
            return f"unknown task {row['task']!r} in {args.app}"
        return task.check_payload(row["payload"])

    conn, repo = _open(args)
    batch = max(1, min(REPLAY_BATCH_MAX, int(args.rate // 5)))
    replayed = skipped = 0
    after_id = 0
    started = time.monotonic()
    with conn:
        while replayed < args.limit:
            size = min(batch, args.limit - replayed)
            if args.dry_run:
                if app is None:
                    print("no --app: payloads are not validated", file=sys.stderr)
                rows = repo.dlq_list(queue=args.queue, error_code=args.error_code, limit=args.limit)
                rows = [r for r in rows if not args.ids or r["id"] in args.ids]
                for r in rows[: args.limit]:
                    job = repo.get_job(r["id"]) if app is not None else None
                    why = validate({**r, "payload": job["payload"]}) if job is not None else None
                    if why is None:
                        print(f"would replay {r['id']} ({r['task']}, {r['last_error_code']})")
                    else:
                        print(f"would skip {r['id']}: {why}")
                return 0
            done, bad, after_id = repo.dlq_replay_batch(
                ids=args.ids, queue=args.queue, error_code=args.error_code, after_id=after_id, batch=size,
                validate=validate, reason=f"tenure dlq replay at {args.rate:g}/s")
            for job_id, why in bad:
                print(f"skipped {job_id}: {why}", file=sys.stderr)
            replayed += len(done)
            skipped += len(bad)
            if not done and not bad:
                break
            print(f"replayed {replayed}/{args.limit} (skipped {skipped})", flush=True)
            # Pace so that the cumulative rate never exceeds --rate.
            wait = replayed / args.rate - (time.monotonic() - started)
            if wait > 0 and replayed < args.limit:
                time.sleep(wait)
    print(f"done: {replayed} replayed, {skipped} skipped as invalid")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    conn, repo = _open(args)
    with conn:
        deleted = repo.dlq_purge(args.older_than, args.queue)
    print(f"purged {deleted} dead-lettered job(s)")
    return 0
