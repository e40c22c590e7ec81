"""`tenure prune`: delete completed and cancelled jobs and stale worker rows older than a duration.

Completed jobs live in day partitions of ``job_history`` (0009): a partition goes as a whole once
its whole day is older than the duration (so up to a day more is kept), with its jobs' events
and keys; completed jobs outside a day partition are deleted in batches. The pass itself is
:class:`tenure.reaper.history.Retention`."""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command, duration, open_repo, positive_int
from tenure.reaper.history import PRUNE_BATCH_DEFAULT, Retention, RetentionConfig, RetentionStore

ORDER = 80


def register(sub: Any) -> None:
    p = command(sub, "prune", "delete completed and cancelled jobs (and stale worker rows) older than a duration")
    p.add_argument("--older-than", type=duration, required=True)
    p.add_argument("--batch", type=positive_int, default=PRUNE_BATCH_DEFAULT)
    p.set_defaults(func=cmd_prune)


def cmd_prune(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: RetentionStore = repository
    with conn:
        pruned = Retention(RetentionConfig(older_than=args.older_than, batch=args.batch)).run_once(repo)
    print(f"pruned {pruned.completed} completed job(s) ({pruned.partitions} history partition(s) dropped), "
          f"{pruned.cancelled} cancelled job(s), {pruned.workers} stale worker row(s), "
          f"{pruned.workflows} workflow(s) and {pruned.batches} batch(es)")
    return 0
