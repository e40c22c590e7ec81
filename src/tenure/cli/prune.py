"""`tenure prune`: delete completed jobs and stale worker rows older than a duration."""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command, duration, open_repo, positive_int

ORDER = 80
BATCH_DEFAULT = 10_000


def register(sub: Any) -> None:
    p = command(sub, "prune", "delete completed and cancelled jobs (and stale worker rows) older than a duration")
    p.add_argument("--older-than", type=duration, required=True)
    p.add_argument("--batch", type=positive_int, default=BATCH_DEFAULT)
    p.set_defaults(func=cmd_prune)


def cmd_prune(args: argparse.Namespace) -> int:
    conn, repo = open_repo(args)
    total = 0
    with conn:
        while True:
            deleted = repo.prune_completed(args.older_than, batch=args.batch)
            total += deleted
            if deleted < args.batch:
                break
        cancelled = 0
        while True:
            deleted = repo.prune_cancelled(args.older_than, batch=args.batch)
            cancelled += deleted
            if deleted < args.batch:
                break
        workers = repo.worker_prune(args.older_than)
    print(f"pruned {total} completed job(s), {cancelled} cancelled job(s) and {workers} stale worker row(s)")
    return 0
