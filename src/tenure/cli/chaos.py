"""`tenure chaos`: a fault-injection run with invariants, against an embedded or your own database.

Without ``--database-url`` (or ``TENURE_DATABASE_URL``) the harness starts its own embedded
PostgreSQL in a temporary folder (or ``--datadir``) so it may restart it; with a URL, the run
lives in its own fresh schema (``--run-schema``), dropped afterwards unless ``--keep``, and the
restart fault is skipped. Exit status: 0 when every invariant held, 1 otherwise, 2 for bad options.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg

from tenure.chaos import config as cfg
from tenure.chaos import harness as h
from tenure.cli.common import command, count, duration, positive_int
from tenure.core.errors import first_line

ORDER = 130


def cmd_chaos(args: argparse.Namespace) -> int:
    # Timing defaults: a failover must not outlast the lease (see tenure.chaos.ha).
    defaults = ({"lease": 30.0, "heartbeat": 5.0, "grace": 5.0, "max_lease_total": 300.0, "settle_timeout": 240.0}
                if args.ha else {"lease": cfg.LEASE_DEFAULT, "heartbeat": cfg.HEARTBEAT_DEFAULT, "grace": cfg.GRACE_DEFAULT,
                                 "max_lease_total": cfg.MAX_LEASE_TOTAL_DEFAULT, "settle_timeout": cfg.SETTLE_TIMEOUT_DEFAULT})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    config = cfg.ChaosConfig(
        jobs=args.jobs, duration=args.duration, workers=args.workers, concurrency=args.concurrency,
        reapers=args.reapers, lease=args.lease, heartbeat=args.heartbeat, grace=args.grace,
        reaper_interval=args.reaper_interval, max_lease_total=args.max_lease_total,
        max_lease_expiries=args.max_lease_expiries, seed=args.seed, kills_per_kind=args.kills_per_kind,
        hangs=args.hangs, sigstops=args.sigstops, partitions=args.partitions, pg_restarts=args.pg_restarts,
        gap_restarts=args.gap_restarts, cancels=args.cancels, queue_pauses=args.queue_pauses, timeouts=args.timeouts,
        slow_completions=args.slow_completions, skew=args.skew, recovery_margin=args.recovery_margin, settle_timeout=args.settle_timeout,
        flow_keys=args.flow_keys, per_key_running=args.per_key_running, rate_per_second=args.rate_limit[0],
        rate_burst=args.rate_limit[1], workflows=args.workflows, batches=args.batches, unique_keys=args.unique_keys)
    config.validate()
    if args.ha:
        return _cmd_chaos_ha(args, config)
    dsn = args.database_url or os.environ.get("TENURE_DATABASE_URL") or None
    harness = h.ChaosHarness(config, dsn=dsn, schema=args.run_schema,
                             datadir=Path(args.datadir) if args.datadir else None, keep=args.keep,
                             log_dir=Path(args.log_dir) if args.log_dir else None, progress=not args.quiet)
    try:
        report = harness.run_once()
    except (RuntimeError, OSError, psycopg.Error) as e:
        return _harness_failed(e)
    print(h.format_report(report))
    Path(args.report).write_text(report.to_json() + "\n", encoding="utf-8")
    print(f"report written to {args.report}")
    return 0 if report.ok else 1


def rate_limit(text: str) -> tuple[float, int | None]:
    """``RATE`` or ``RATE/BURST`` (tokens per second, bucket size) as (rate, burst or None); ``0``: none."""
    rate, sep, burst = text.partition("/")
    try:
        return float(rate), int(burst) if sep else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid rate limit {text!r} (use RATE or RATE/BURST, e.g. 12/6)") from None


def _harness_failed(e: BaseException) -> int:
    """A harness that could not run (cluster never healthy, database unreachable): one line on stderr, exit 2."""
    first = first_line(e)
    print(f"tenure chaos: error: {type(e).__name__}: {first}", file=sys.stderr)
    return 2


def _cmd_chaos_ha(args: argparse.Namespace, config: cfg.ChaosConfig) -> int:
    from tenure.chaos import ha
    faults = tuple(f.strip() for f in args.failovers.split(",") if f.strip())
    ha_config = ha.HaConfig(replication=args.replication, faults=faults, rounds=args.rounds, rate=args.rate,
                            calm=args.calm)
    ha_config.validate()
    def stop(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds through run_ha's cleanup: cluster, network, ledger, processes

    signal.signal(signal.SIGTERM, stop)
    harness = ha.HaChaosHarness(config, ha_config, log_dir=Path(args.log_dir) if args.log_dir else None,
                                progress=not args.quiet, keep=args.keep)
    try:
        report = harness.run_ha()
    except (RuntimeError, OSError, psycopg.Error) as e:  # ClusterError is a RuntimeError: a harness that could not run
        return _harness_failed(e)
    print(ha.format_ha_report(report))
    Path(args.report).write_text(report.to_json() + "\n", encoding="utf-8")
    print(f"report written to {args.report}")
    return 0 if report.ok else 1


def register(sub: Any) -> None:
    p = command(sub, "chaos", "fault-injection run (kill -9, SIGSTOP, partitions, restarts, clock skew) "
                              "checked against the invariants")
    p.add_argument("--jobs", type=positive_int, default=cfg.JOBS_DEFAULT, help="jobs to run (default %(default)s)")
    p.add_argument("--duration", type=duration, default=cfg.DURATION_DEFAULT,
                   help="seconds over which jobs are produced and faults injected, e.g. 30m (default %(default)s)")
    p.add_argument("--workers", type=positive_int, default=cfg.WORKERS_DEFAULT,
                   help="worker processes, replaced when they die (default %(default)s)")
    p.add_argument("--concurrency", type=positive_int, default=cfg.CONCURRENCY_DEFAULT,
                   help="handlers per worker (default %(default)s)")
    p.add_argument("--reapers", type=positive_int, default=cfg.REAPERS_DEFAULT,
                   help="reaper processes running at once (default %(default)s)")
    p.add_argument("--lease", type=duration, default=None,
                   help=f"workers' lease (default {cfg.LEASE_DEFAULT:g}s; 30s with --ha)")
    p.add_argument("--heartbeat", type=duration, default=None,
                   help=f"workers' heartbeat interval (default {cfg.HEARTBEAT_DEFAULT:g}s; 5s with --ha)")
    p.add_argument("--grace", type=duration, default=None,
                   help=f"reapers' grace (default {cfg.GRACE_DEFAULT:g}s; 5s with --ha)")
    p.add_argument("--reaper-interval", type=duration, default=cfg.REAPER_INTERVAL_DEFAULT,
                   help="reapers' interval (default %(default)ss)")
    p.add_argument("--max-lease-total", type=duration, default=None,
                   help=f"bounded extension that ends hung handlers (default {cfg.MAX_LEASE_TOTAL_DEFAULT:g}s; "
                        "300s with --ha)")
    p.add_argument("--max-lease-expiries", type=positive_int, default=cfg.MAX_LEASE_EXPIRIES_DEFAULT)
    p.add_argument("--seed", type=int, default=cfg.SEED_DEFAULT)
    p.add_argument("--kills-per-kind", type=count, default=None, help="default: scaled by --duration")
    p.add_argument("--hangs", type=count, default=None)
    p.add_argument("--sigstops", type=count, default=None)
    p.add_argument("--partitions", type=count, default=None)
    p.add_argument("--pg-restarts", type=count, default=None)
    p.add_argument("--gap-restarts", type=count, default=None,
                   help="jobs that restart PostgreSQL between their guarded body and eff.succeeded() "
                        "(own embedded server only; default: scaled by --duration)")
    p.add_argument("--cancels", type=count, default=None, help="cancels of running/pending jobs")
    p.add_argument("--queue-pauses", type=count, default=None, help="pauses of the queue (then resumed)")
    p.add_argument("--timeouts", type=count, default=None, help="jobs whose first attempt overruns its timeout")
    p.add_argument("--slow-completions", type=count, default=None,
                   help="locks of job_history that hold every completion back as long as a SIGSTOP "
                        "(default: scaled by --duration)")
    p.add_argument("--flow-keys", type=count, default=cfg.FLOW_KEYS_DEFAULT,
                   help="flow keys the jobs are spread over (0: none; default %(default)s)")
    p.add_argument("--per-key-running", type=count, default=cfg.PER_KEY_RUNNING_DEFAULT,
                   help="the queue's running limit per flow key, checked in every sample (0: none; default %(default)s)")
    p.add_argument("--rate-limit", type=rate_limit, default=(0.0, None), metavar="RATE[/BURST]",
                   help="a rate limit every job names: RATE tokens per second, a bucket of BURST (default: one "
                        "second's tokens); checked by rate_within_limit (0: none; default 0)")
    p.add_argument("--workflows", type=count, default=cfg.WORKFLOWS_DEFAULT,
                   help="random workflows of 3-20 steps enqueued over the first half of production (with --ha: "
                        "across the first failovers), checked by the workflow invariants (0: none; "
                        "default %(default)s)")
    p.add_argument("--batches", type=count, default=cfg.BATCHES_DEFAULT,
                   help="batches of 3-10 jobs with all three callbacks, checked by callbacks_once "
                        "(0: none; default %(default)s)")
    p.add_argument("--unique-keys", type=count, default=cfg.UNIQUE_KEYS_DEFAULT,
                   help="keys of racing unique jobs, checked by unique_keys_held_once (0: none; default %(default)s)")
    p.add_argument("--skew", type=duration, default=cfg.SKEW_DEFAULT,
                   help="wall-clock skew of workers 1 (+) and 2 (-), e.g. 5m; 0 disables")
    p.add_argument("--recovery-margin", type=duration, default=cfg.RECOVERY_MARGIN_DEFAULT,
                   help="slack on the recovery bound for a noisy machine (default %(default)ss)")
    p.add_argument("--settle-timeout", type=duration, default=None,
                   help=f"time the run may take to settle (default {cfg.SETTLE_TIMEOUT_DEFAULT:g}s; 240s with --ha)")
    p.add_argument("--run-schema", default=None, help="schema of the run (default: a fresh chaos_<hex>)")
    p.add_argument("--datadir", default=None, help="data folder of the harness's own embedded server")
    p.add_argument("--keep", action="store_true", help="keep the run's schema (and embedded server) afterwards")
    p.add_argument("--report", default="chaos-report.json", help="where to write the JSON report (default %(default)s)")
    p.add_argument("--log-dir", default=None, help="write each worker's and reaper's output here")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    g = p.add_argument_group("failovers (--ha patroni)", "a three-member Patroni cluster instead of one server; "
                             "the lease options then default to 30s lease, 5s heartbeat, 5s grace")
    g.add_argument("--ha", choices=["patroni"], default=None,
                   help="fail a real Patroni cluster over under load (needs scripts/tools/patroni.sh)")
    g.add_argument("--replication", choices=["async", "sync"], default="async",
                   help="async (Patroni's default) or sync (synchronous_mode: true) (default %(default)s)")
    g.add_argument("--failovers", default="switchover,kill,isolate",
                   help="comma-separated failover kinds, injected in order each round (default %(default)s)")
    g.add_argument("--rounds", type=positive_int, default=1, help="repetitions of --failovers (default %(default)s)")
    g.add_argument("--rate", type=float, default=20.0, help="jobs enqueued per second (default %(default)s)")
    g.add_argument("--calm", type=duration, default=5.0,
                   help="seconds of healthy cluster under load before each failover (default %(default)s)")
    p.set_defaults(func=cmd_chaos, no_db=True)
