"""`tenure stats`: per-queue backlog and lease health, from the same query as the exporter."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from tenure.cli.common import command, open_repo, print_json, table
from tenure.core.repository import ReadStore

ORDER = 60
HEADERS = ("queue", "state", "waiting", "ready", "blocked", "sched", "running", "in_flight", "expired", "redelivered", "done", "dlq",
           "cancelled", "oldest_ready", "oldest_run", "hb_lag_p95", "hb_lag_max", "workers")


def register(sub: Any) -> None:
    p = command(sub, "stats", "per-queue backlog and lease health",
                description="Per queue: waiting (workflow steps whose deps have not all completed), ready (runnable), blocked (runnable but held back by flow control: a key at its "
                            "running limit, an empty or paused rate-limit bucket; --json splits it by reason), "
                            "scheduled, running (in the database) vs in flight (held by a "
                            "worker the registry sees alive; the rest wait for the reaper), running with an "
                            "expired lease, redelivered, completed, dead-lettered, oldest ready and running "
                            "ages, heartbeat lag p95 and max, live workers.")
    p.add_argument("--queue", default=None, help="only this queue")
    p.add_argument("--json", action="store_true", help="every figure, machine-readable")
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: ReadStore = repository
    with conn:
        stats = repo.queue_stats(args.queue)
    if args.json:
        print_json([asdict(s) for s in stats])
        return 0
    rows = [(s.queue, ("paused" if s.paused else "active") + (f" max={s.max_running}" if s.max_running else ""),
             s.waiting, s.ready, s.blocked, s.scheduled, s.running, s.in_flight, s.running_expired, s.redelivered, s.completed,
             s.failed, s.cancelled, f"{s.oldest_ready_age_seconds:.1f}s", f"{s.oldest_running_age_seconds:.1f}s",
             f"{s.heartbeat_lag_p95_seconds:.1f}s", f"{s.heartbeat_lag_max_seconds:.1f}s", s.live_workers)
            for s in stats]
    table(HEADERS, rows)
    if not rows:
        print("(no queues yet)")
    return 0
