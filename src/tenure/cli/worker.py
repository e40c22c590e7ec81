"""`tenure worker`: run a worker process for an App (SIGTERM drains, SIGUSR1 dumps every thread)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from typing import Any

from prometheus_client import REGISTRY

from tenure.cli.common import command, count, duration, port, positive_int
from tenure.cli.reaper import add_reaper_options, reaper_config
from tenure.core.backoff import RetryPolicy
from tenure.core.errors import ConfigError
from tenure.core.redaction import MASK_KEYS_DEFAULT, MAX_ERROR_CHARS_DEFAULT, Redaction
from tenure.observability import traces
from tenure.observability.http import serve
from tenure.reaper import vacuum as vac_mod
from tenure.reaper.reaper import INTERVAL_DEFAULT as REAPER_CYCLE_DEFAULT
from tenure.worker import heartbeat as hb_mod
from tenure.worker import runtime as rt_mod
from tenure.worker.app import load_app

ORDER = 30


def register(sub: Any) -> None:
    p = command(sub, "worker", "run a worker")
    p.add_argument("--app", required=True, help="MODULE:ATTR of a tenure.App")
    p.add_argument("--queue", action="append", help="queue to serve (repeatable; default: the app's queues)")
    p.add_argument("--concurrency", type=positive_int, default=rt_mod.CONCURRENCY_DEFAULT,
                   help="handlers running at once in this process (default %(default)s)")
    p.add_argument("--claim-batch", type=positive_int, default=rt_mod.CLAIM_BATCH_DEFAULT)
    p.add_argument("--lease", type=duration, default=hb_mod.LEASE_DEFAULT)
    p.add_argument("--heartbeat", type=duration, default=hb_mod.HEARTBEAT_DEFAULT)
    p.add_argument("--max-lease-total", type=duration, default=hb_mod.MAX_LEASE_TOTAL_DEFAULT,
                   help="longest an attempt may hold its job however often it renews (bounded extension; default %(default)ss)")
    p.add_argument("--max-effect-hold", type=duration, default=hb_mod.MAX_EFFECT_HOLD_DEFAULT,
                   help="longest an in-flight effect keeps its idempotency key while its worker lives")
    p.add_argument("--drain-timeout", type=duration, default=rt_mod.DRAIN_TIMEOUT_DEFAULT)
    p.add_argument("--poll-interval", type=duration, default=rt_mod.POLL_INTERVAL_DEFAULT)
    p.add_argument("--reaper-interval", type=duration, default=rt_mod.REAPER_INTERVAL_DEFAULT,
                   help="run an in-process reaper every S seconds (0: leave it to `tenure reaper`)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument("--priority-aging", type=duration, default=rt_mod.PRIORITY_AGING_DEFAULT,
                   help="a job ready this long is claimed before any priority, oldest first "
                        "(starvation bound; default %(default)gs)")
    p.add_argument("--no-scheduler", action="store_true",
                   help="do not enqueue the app's periodic jobs from this process")
    p.add_argument("--vacuum-dead-rows", type=count, default=vac_mod.VACUUM_DEAD_ROWS_DEFAULT,
                   help="vacuum the jobs table once it has this many dead rows, and a fifth of its "
                        "live ones (one worker at a time; 0: leave it to autovacuum; default %(default)s)")
    p.add_argument("--retry-max-attempts", type=positive_int,
                   default=os.environ.get("TENURE_RETRY_MAX_ATTEMPTS") or None,
                   help="queue retry policy: attempts cap, with --backoff-base/--backoff-max "
                        "(tasks' own settings win)")
    p.add_argument("--redact-keys", default=",".join(MASK_KEYS_DEFAULT),
                   help="payload keys masked in dead-lettered jobs (comma-separated)")
    p.add_argument("--max-error-chars", type=positive_int, default=MAX_ERROR_CHARS_DEFAULT,
                   help="error texts kept in the DLQ are truncated to this length")
    p.add_argument("--metrics-port", type=port, default=None, help="serve /metrics, /healthz, /readyz")
    add_reaper_options(p)
    p.set_defaults(func=cmd_worker)


def worker_config(args: argparse.Namespace, queues: tuple[str, ...]) -> rt_mod.WorkerConfig:
    """The WorkerConfig the flags describe, checked. The reaper flags are checked (grace against
    --heartbeat) even when reaping is left to `tenure reaper`; the in-process reaper runs only with
    --reaper-interval > 0, at that interval."""
    in_process = args.reaper_interval > 0
    if args.grace < args.heartbeat:
        raise ConfigError(f"grace {args.grace:g}s must cover at least one heartbeat interval ({args.heartbeat:g}s)")
    reaper = reaper_config(args, interval=args.reaper_interval if in_process else REAPER_CYCLE_DEFAULT)
    retry = None
    if args.retry_max_attempts is not None:  # flag or TENURE_RETRY_MAX_ATTEMPTS (the operator sets it)
        retry = RetryPolicy(base_delay=args.backoff_base, max_delay=args.backoff_max,
                            max_attempts=args.retry_max_attempts)
    config = rt_mod.WorkerConfig(
        queues=queues, concurrency=args.concurrency, claim_batch=args.claim_batch,
        heartbeat=hb_mod.HeartbeatConfig(lease=args.lease, interval=args.heartbeat,
                                         max_lease_total=args.max_lease_total,
                                         max_effect_hold=args.max_effect_hold),
        poll_interval=args.poll_interval, drain_timeout=args.drain_timeout, burst=args.burst,
        reaper=reaper if in_process else None, retry=retry, priority_aging=args.priority_aging,
        scheduler=not args.no_scheduler, vacuum=vac_mod.VacuumConfig(dead_rows=args.vacuum_dead_rows),
        redaction=Redaction(mask_keys=tuple(k.strip() for k in args.redact_keys.split(",") if k.strip()),
                            max_error_chars=args.max_error_chars))
    config.validate()
    return config


def cmd_worker(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    config = worker_config(args, tuple(args.queue or app.queues))
    worker = rt_mod.Worker(app, config, dsn=args.dsn, schema=args.schema, registry=REGISTRY)
    if args.metrics_port is not None:
        serve(args.metrics_port, REGISTRY, healthz=worker.healthz, readyz=worker.readyz)

    def on_term(signum: int, _frame: Any) -> None:
        worker.request_stop()  # lock-free: safe inside a signal handler

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    processed = worker.run()
    logging.getLogger("tenure.worker").info("worker %s stopped after %d job outcome(s)", worker.worker_id, processed)
    traces.shutdown_installed()  # os._exit skips atexit: export the last spans first (--burst too)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # handler threads that ignored lease loss must not keep the process alive
