"""`tenure reaper`: recover expired leases, once (a CronJob) or in a loop with metrics.

Each expired job waits its owner's heartbeat interval from the worker registry plus the grace,
by the database clock, so the reaper need not be told the workers' heartbeat:
``--heartbeat`` is only the floor for jobs whose owner is not in the registry.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram

from tenure.cli.common import command, duration, open_repo, port, positive_int
from tenure.core.backoff import BASE_DELAY_DEFAULT, MAX_DELAY_DEFAULT, RetryPolicy
from tenure.core.repository import Reaped
from tenure.observability.exporter import QueueCollector
from tenure.observability.http import serve
from tenure.reaper import reaper as reaper_mod
from tenure.worker.heartbeat import HEARTBEAT_DEFAULT
from tenure.worker.metrics import db_reconnects_counter

ORDER = 40


def add_reaper_options(p: argparse.ArgumentParser) -> None:
    """The recovery policy flags shared by `tenure reaper` and `tenure worker` (in-process reaper)."""
    p.add_argument("--grace", type=duration, default=reaper_mod.GRACE_DEFAULT,
                   help="seconds past lease expiry before a job is recovered (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=reaper_mod.BATCH_DEFAULT,
                   help="most jobs recovered per cycle (default %(default)s)")
    p.add_argument("--alive-owner-grace", type=duration, default=reaper_mod.ALIVE_OWNER_GRACE_DEFAULT,
                   help="extra seconds when the registry still sees the owner alive")
    p.add_argument("--max-lease-expiries", type=positive_int, default=reaper_mod.MAX_LEASE_EXPIRIES_DEFAULT,
                   help="lease expiries before a job is dead-lettered with lease_expired")
    p.add_argument("--backoff-base", type=duration,
                   default=os.environ.get("TENURE_RETRY_BASE_DELAY") or str(BASE_DELAY_DEFAULT),
                   help="full-jitter backoff base in seconds (default $TENURE_RETRY_BASE_DELAY or %(default)s)")
    p.add_argument("--backoff-max", type=duration,
                   default=os.environ.get("TENURE_RETRY_MAX_DELAY") or str(MAX_DELAY_DEFAULT),
                   help="full-jitter backoff cap in seconds (default $TENURE_RETRY_MAX_DELAY or %(default)s)")


def reaper_config(args: argparse.Namespace, *, interval: float) -> reaper_mod.ReaperConfig:
    """The ReaperConfig the flags describe, checked (ConfigError on the first bad setting)."""
    config = reaper_mod.ReaperConfig(
        grace=args.grace, batch=args.batch, interval=interval, alive_owner_grace=args.alive_owner_grace,
        max_lease_expiries=args.max_lease_expiries, heartbeat=args.heartbeat,
        retry=RetryPolicy(base_delay=args.backoff_base, max_delay=args.backoff_max))
    config.validate()
    return config


def register(sub: Any) -> None:
    p = command(sub, "reaper", "recover expired leases")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one cycle, then exit (CronJob)")
    mode.add_argument("--interval", type=duration, default=reaper_mod.INTERVAL_DEFAULT)
    p.add_argument("--heartbeat", type=duration, default=HEARTBEAT_DEFAULT,
                   help="floor for jobs whose owner is not in the worker registry; registered owners' jobs "
                        "wait at least their own registered heartbeat (default %(default)s)")
    p.add_argument("--metrics-port", type=port, default=None, help="serve reaper and queue metrics")
    add_reaper_options(p)
    p.set_defaults(func=cmd_reaper)


def cmd_reaper(args: argparse.Namespace) -> int:
    config = reaper_config(args, interval=args.interval)
    conn, _ = open_repo(args, application_name="tenure-reaper")  # refuse a missing or newer schema first
    conn.close()
    reaper = reaper_mod.Reaper(config, dsn=args.dsn, schema=args.schema)
    if args.once:
        reaped = reaper.run_once()
        dead = sum(1 for r in reaped if r.dead)
        print(f"reaped {len(reaped)} job(s): {len(reaped) - dead} requeued, {dead} dead-lettered")
        return 0
    stop = threading.Event()
    on_cycle: Callable[[list[Reaped], float], None] | None = None
    on_reconnect: Callable[[], None] | None = None
    if args.metrics_port is not None:
        reconnects = db_reconnects_counter(REGISTRY)
        REGISTRY.register(QueueCollector(args.dsn, args.schema,
                                         on_reconnect=reconnects.labels("exporter").inc))
        on_reconnect = reconnects.labels("reaper").inc
        reaped_total = Counter("tenure_reaper_reaped", "Reaper transitions.", ["queue", "outcome"])
        cycle = Histogram("tenure_reaper_cycle_seconds", "Duration of one reaper cycle.")

        def observe(reaped: list[Reaped], seconds: float) -> None:
            cycle.observe(seconds)
            for r in reaped:
                reaped_total.labels(r.queue, "dead_lettered" if r.dead else "requeued").inc()

        on_cycle = observe

        serve(args.metrics_port, REGISTRY)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reaper.run_forever(stop, on_cycle, on_reconnect)
    return 0
