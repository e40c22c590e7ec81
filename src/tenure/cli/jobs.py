"""`tenure jobs`: inspect jobs (``show``: one job and its event history)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from tenure.cli.common import command, open_repo, print_json, subcommands

ORDER = 70
SHOW_FIELDS = ("id", "queue_name", "task", "status", "attempt_count", "max_attempts", "lease_expiry_count",
               "fence", "available_at", "started_at", "completed_at", "failed_at", "last_heartbeat_at",
               "lease_expires_at", "lease_expired", "locked_by", "lock_token", "idempotency_key",
               "last_error_code", "last_error", "checkpoint_step", "payload")


def register(sub: Any) -> None:
    jobs = subcommands(command(sub, "jobs", "inspect jobs"), "jobs_command")
    show = command(jobs, "show", "one job and its event history")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    """Print one job (any status) and its audit events; exit 1 when there is no such job."""
    conn, repo = open_repo(args)
    with conn:
        job = repo.get_job(args.id)
        if job is None:
            print(f"tenure: no job {args.id}", file=sys.stderr)
            return 1
        events = repo.job_events(args.id)
    if args.json:
        print_json({"job": job, "events": events})
        return 0
    for key in SHOW_FIELDS:
        value = job.get(key)
        if isinstance(value, datetime):
            value = value.isoformat()
        if key == "payload":
            value = json.dumps(value)
        print(f"{key:20} {value}")
    print("\nevents:")
    for e in events:
        token = str(e["lock_token"])[:8] if e["lock_token"] else "-"
        print(f"  {e['created_at'].isoformat()}  {e['event']:30} attempt={e['attempt'] or '-'} "
              f"token={token} by={e['worker_id'] or '-'} {e['reason'] or ''}")
    return 0
