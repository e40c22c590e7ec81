"""`tenure prune`: delete completed and cancelled jobs and stale worker rows older than a duration.

Completed jobs live in day partitions of ``job_history`` (0009): a partition goes as a whole once
its whole day is older than the duration (so up to a day more is kept), with its jobs' events
and keys; completed jobs outside a day partition are deleted in batches."""

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
    total = partitions = 0
    with conn:
        while (held := repo.history_drop_oldest(args.older_than)) is not None:
            total += held
            partitions += 1
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
    print(f"pruned {total} completed job(s) ({partitions} history partition(s) dropped), {cancelled} cancelled "
          f"job(s) and {workers} stale worker row(s)")
    return 0
