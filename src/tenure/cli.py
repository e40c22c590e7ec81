"""The `tenure` command line. Config errors exit 2 with one line on stderr."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg

from tenure.core.backoff import BASE_DELAY_DEFAULT, MAX_ATTEMPTS_DEFAULT, MAX_DELAY_DEFAULT, RetryPolicy
from tenure.core.db import connect, resolve_dsn, resolve_schema
from tenure.core.errors import ConfigError, PayloadError, SchemaTooNewError
from tenure.core.redaction import MASK_KEYS_DEFAULT, MAX_ERROR_CHARS_DEFAULT, Redaction
from tenure.core.repository import (PRIORITY_DEFAULT, JobSpec, Repository, check_priority, encode_payload,
                                    iter_batches)
from tenure.observability import logs
from tenure.reaper import reaper as reaper_mod
from tenure.worker import heartbeat as hb_mod
from tenure.worker import runtime as rt_mod

EXIT_CONFIG = 2
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(text: str) -> float:
    """Parse ``30``, ``30s``, ``1.5m``, ``2h``, ``7d`` into seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (use e.g. 30s, 5m, 2h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        sys.stderr.write(f"tenure: error: {message}\n")
        raise SystemExit(EXIT_CONFIG)


def _repo(args: argparse.Namespace, *, check: bool = True) -> tuple[psycopg.Connection[Any], Repository]:
    conn = connect(args.dsn)
    repo = Repository(conn, args.schema)
    if check:
        repo.check_schema()
    return conn, repo


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o)))


# -- commands ----------------------------------------------------------------------------------

def cmd_migrate(args: argparse.Namespace) -> int:
    conn, repo = _repo(args, check=False)
    with conn:
        applied = repo.migrate()
        version = repo.schema_version()
    print(f"schema {args.schema!r} at version {version}" + (f" (applied {applied})" if applied else " (up to date)"))
    return 0


def cmd_enqueue(args: argparse.Namespace) -> int:
    conn, repo = _repo(args)
    with conn:
        if args.from_file:
            specs = []
            with open(args.from_file, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                        specs.append(JobSpec(task=item["task"], payload=item.get("payload", {}),
                                             queue=item.get("queue", args.queue),
                                             max_attempts=int(item.get("max_attempts", args.max_attempts)),
                                             delay=float(item.get("delay", args.delay)),
                                             idempotency_key=item.get("idempotency_key"),
                                             priority=check_priority(item.get("priority", args.priority))))
                        encode_payload(specs[-1].payload)
                    except (ValueError, KeyError, TypeError, AttributeError) as exc:
                        raise ConfigError(f"{args.from_file}:{lineno}: invalid job line: {exc}") from None
            # All or nothing: one transaction for every batch.
            with conn.transaction():
                inserted = sum(repo.enqueue_many(batch) for batch in iter_batches(specs, 5000))
            print(f"enqueued {inserted} of {len(specs)} jobs ({len(specs) - inserted} duplicates skipped)")
            return 0
        if not args.task:
            raise ConfigError("give a TASK or --from-file")
        try:
            payload = json.loads(args.payload)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ConfigError(f"--payload is not valid JSON: {exc}") from None
        result = repo.enqueue(args.task, payload, queue=args.queue, idempotency_key=args.idempotency_key,
                              delay=args.delay, max_attempts=args.max_attempts,
                              priority=check_priority(args.priority))
    print(result.id if result.created else f"{result.id} (existing job with this idempotency key)")
    return 0


def _reaper_config(args: argparse.Namespace, interval: float | None = None) -> reaper_mod.ReaperConfig:
    return reaper_mod.ReaperConfig(
        grace=args.grace, batch=args.batch,
        interval=interval if interval is not None else getattr(args, "interval", reaper_mod.INTERVAL_DEFAULT),
        alive_owner_grace=args.alive_owner_grace, max_lease_expiries=args.max_lease_expiries,
        retry=RetryPolicy(base_delay=args.backoff_base, max_delay=args.backoff_max))


def _queue_retry_policy(args: argparse.Namespace) -> RetryPolicy | None:
    """The queue's policy from --retry-max-attempts and --backoff-base/--backoff-max when the
    attempt cap is given (flag or TENURE_RETRY_MAX_ATTEMPTS, which the operator sets)."""
    if args.retry_max_attempts is None:
        return None
    return RetryPolicy(base_delay=args.backoff_base, max_delay=args.backoff_max,
                       max_attempts=args.retry_max_attempts)


def cmd_worker(args: argparse.Namespace) -> int:
    from prometheus_client import REGISTRY

    from tenure.observability.http import serve
    from tenure.worker.app import load_app

    app = load_app(args.app)
    queues = tuple(args.queue or app.queues)
    config = rt_mod.WorkerConfig(
        queues=queues, concurrency=args.concurrency, claim_batch=args.claim_batch,
        heartbeat=hb_mod.HeartbeatConfig(lease=args.lease, interval=args.heartbeat,
                                         max_lease_total=args.max_lease_total,
                                         max_effect_hold=args.max_effect_hold),
        poll_interval=args.poll_interval, drain_timeout=args.drain_timeout, burst=args.burst,
        reaper_interval=args.reaper_interval, reaper=_reaper_config(args, interval=1.0),
        retry=_queue_retry_policy(args), priority_aging=args.priority_aging,
        scheduler=not args.no_scheduler,
        redaction=Redaction(mask_keys=tuple(k.strip() for k in args.redact_keys.split(",") if k.strip()),
                            max_error_chars=args.max_error_chars))
    config.validate()
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
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # handler threads that ignored lease loss must not keep the process alive


def cmd_reaper(args: argparse.Namespace) -> int:
    config = _reaper_config(args)
    reaper = reaper_mod.Reaper(config, dsn=args.dsn, schema=args.schema)
    _repo(args)[0].close()  # refuse a missing or newer schema before looping
    if args.once:
        reaped = reaper.run_once()
        dead = sum(1 for r in reaped if r.dead)
        print(f"reaped {len(reaped)} job(s): {len(reaped) - dead} requeued, {dead} dead-lettered")
        return 0
    from prometheus_client import REGISTRY, Counter, Histogram

    stop = threading.Event()
    on_cycle: Callable[..., None] | None = None
    if args.metrics_port is not None:
        from tenure.observability.exporter import QueueCollector
        from tenure.observability.http import serve

        REGISTRY.register(QueueCollector(args.dsn, args.schema))
        reaped_total = Counter("tenure_reaper_reaped", "Reaper transitions.", ["queue", "outcome"])
        cycle = Histogram("tenure_reaper_cycle_seconds", "Duration of one reaper cycle.")

        def on_cycle(reaped: list[Any], seconds: float) -> None:
            cycle.observe(seconds)
            for r in reaped:
                reaped_total.labels(r.queue, "dead_lettered" if r.dead else "requeued").inc()

        serve(args.metrics_port, REGISTRY)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reaper.run_forever(stop, on_cycle)
    return 0


def cmd_exporter(args: argparse.Namespace) -> int:
    from prometheus_client import REGISTRY

    from tenure.observability.exporter import QueueCollector
    from tenure.observability.http import serve

    collector = QueueCollector(args.dsn, args.schema, min_interval=args.interval,
                               completed_interval=args.completed_interval)
    REGISTRY.register(collector)
    server = serve(args.port, REGISTRY, healthz=lambda: (True, "ok"),
                   readyz=lambda: (collector.read() is not None, "database"))
    print(f"exporter listening on :{server.server_address[1]}/metrics", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


STAT_COLUMNS = ("ready", "scheduled", "running", "running_expired", "completed", "failed",
                "oldest_ready_age_seconds", "oldest_running_age_seconds", "heartbeat_lag_max_seconds")


def cmd_stats(args: argparse.Namespace) -> int:
    conn, repo = _repo(args)
    with conn:
        stats = repo.queue_stats(args.queue)
    if args.json:
        _print_json([s.__dict__ for s in stats])
        return 0
    headers = ("queue", "state", "ready", "sched", "running", "expired", "done", "dlq", "cancelled",
               "oldest_ready", "oldest_run", "hb_lag_max", "workers")
    rows = [(s.queue, ("paused" if s.paused else "active") + (f" max={s.max_running}" if s.max_running else ""),
             s.ready, s.scheduled, s.running, s.running_expired, s.completed, s.failed, s.cancelled,
             f"{s.oldest_ready_age_seconds:.1f}s", f"{s.oldest_running_age_seconds:.1f}s",
             f"{s.heartbeat_lag_max_seconds:.1f}s", s.live_workers) for s in stats]
    _table(headers, rows)
    if not rows:
        print("(no queues yet)")
    return 0


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def cmd_jobs_show(args: argparse.Namespace) -> int:
    conn, repo = _repo(args)
    with conn:
        job = repo.get_job(args.id)
        if job is None:
            print(f"tenure: no job {args.id}", file=sys.stderr)
            return 1
        events = repo.job_events(args.id)
    if args.json:
        _print_json({"job": job, "events": events})
        return 0
    for key in ("id", "queue_name", "task", "status", "attempt_count", "max_attempts", "lease_expiry_count",
                "fence", "available_at", "started_at", "completed_at", "failed_at", "last_heartbeat_at",
                "lease_expires_at", "lease_expired", "locked_by", "lock_token", "idempotency_key",
                "last_error_code", "last_error", "checkpoint_step", "payload"):
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


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo import run_demo
    return run_demo(args)


def cmd_operator(args: argparse.Namespace) -> int:
    from tenure.operator.main import run as run_operator
    run_operator(namespaces=args.namespace or None, all_namespaces=not args.namespace,
                 liveness_endpoint=args.liveness)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    conn, repo = _repo(args)
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


# -- parser ------------------------------------------------------------------------------------

def _add_reaper_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grace", type=duration, default=reaper_mod.GRACE_DEFAULT,
                   help="seconds past lease expiry before a job is recovered (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=reaper_mod.BATCH_DEFAULT,
                   help="most jobs recovered per cycle (default %(default)s)")
    p.add_argument("--alive-owner-grace", type=duration, default=reaper_mod.ALIVE_OWNER_GRACE_DEFAULT,
                   help="extra seconds when the registry still sees the owner alive")
    p.add_argument("--max-lease-expiries", type=positive_int, default=reaper_mod.MAX_LEASE_EXPIRIES_DEFAULT,
                   help="lease expiries before a job is dead-lettered with lease_expired")
    p.add_argument("--backoff-base", type=duration,
                   default=float(os.environ.get("TENURE_RETRY_BASE_DELAY", BASE_DELAY_DEFAULT)),
                   help="full-jitter backoff base in seconds (default $TENURE_RETRY_BASE_DELAY or %(default)s)")
    p.add_argument("--backoff-max", type=duration,
                   default=float(os.environ.get("TENURE_RETRY_MAX_DELAY", MAX_DELAY_DEFAULT)),
                   help="full-jitter backoff cap in seconds (default $TENURE_RETRY_MAX_DELAY or %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tenure", description="A PostgreSQL job queue that ends zombie jobs.")
    parser.add_argument("--database-url", dest="database_url", default=None,
                        help="PostgreSQL DSN (default: $TENURE_DATABASE_URL, else an embedded server)")
    parser.add_argument("--schema", default=None, help="Postgres schema (default: $TENURE_SCHEMA or tenure)")
    parser.add_argument("--log-json", action="store_true", default=os.environ.get("TENURE_LOG_JSON") == "1",
                        help="structured JSON logs with job id, attempt, lock token and worker id")
    parser.add_argument("--log-level", default=os.environ.get("TENURE_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("migrate", help="create or upgrade the schema (idempotent)").set_defaults(func=cmd_migrate)

    p = sub.add_parser("enqueue", help="add a job (prints its id)")
    p.add_argument("task", nargs="?")
    p.add_argument("--payload", default="{}")
    p.add_argument("--queue", default="default")
    p.add_argument("--idempotency-key", default=None)
    p.add_argument("--delay", type=duration, default=0.0)
    p.add_argument("--max-attempts", type=positive_int, default=MAX_ATTEMPTS_DEFAULT)
    p.add_argument("--priority", type=int, default=PRIORITY_DEFAULT,
                   help="integer in [-100, 100], default 0; higher runs first")
    p.add_argument("--from-file", default=None,
                   help="JSON lines: {task, payload, queue, idempotency_key, priority, ...}")
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser("worker", help="run a worker")
    p.add_argument("--app", required=True, help="MODULE:ATTR of a tenure.App")
    p.add_argument("--queue", action="append", help="queue to serve (repeatable; default: the app's queues)")
    p.add_argument("--concurrency", type=positive_int, default=rt_mod.CONCURRENCY_DEFAULT)
    p.add_argument("--claim-batch", type=positive_int, default=rt_mod.CLAIM_BATCH_DEFAULT)
    p.add_argument("--lease", type=duration, default=hb_mod.LEASE_DEFAULT)
    p.add_argument("--heartbeat", type=duration, default=hb_mod.HEARTBEAT_DEFAULT)
    p.add_argument("--max-lease-total", type=duration, default=hb_mod.MAX_LEASE_TOTAL_DEFAULT,
                   help="longest an attempt may hold its job however often it renews (bounded extension)")
    p.add_argument("--max-effect-hold", type=duration, default=hb_mod.MAX_EFFECT_HOLD_DEFAULT,
                   help="longest an in-flight effect keeps its idempotency key while its worker lives")
    p.add_argument("--drain-timeout", type=duration, default=rt_mod.DRAIN_TIMEOUT_DEFAULT)
    p.add_argument("--poll-interval", type=duration, default=rt_mod.POLL_INTERVAL_DEFAULT)
    p.add_argument("--reaper-interval", type=duration, default=rt_mod.REAPER_INTERVAL_DEFAULT,
                   help="run an in-process reaper every S seconds (0: leave it to `tenure reaper`)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument("--priority-aging", type=duration, default=rt_mod.PRIORITY_AGING_DEFAULT,
                   help="a job ready this long is claimed before any priority, oldest first (starvation bound)")
    p.add_argument("--no-scheduler", action="store_true",
                   help="do not enqueue the app's periodic jobs from this process")
    p.add_argument("--retry-max-attempts", type=positive_int,
                   default=int(os.environ["TENURE_RETRY_MAX_ATTEMPTS"]) if os.environ.get("TENURE_RETRY_MAX_ATTEMPTS")
                   else None,
                   help="queue retry policy: attempts cap, with --backoff-base/--backoff-max "
                        "(tasks' own settings win)")
    p.add_argument("--redact-keys", default=",".join(MASK_KEYS_DEFAULT),
                   help="payload keys masked in dead-lettered jobs (comma-separated)")
    p.add_argument("--max-error-chars", type=positive_int, default=MAX_ERROR_CHARS_DEFAULT,
                   help="error texts kept in the DLQ are truncated to this length")
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics, /healthz, /readyz")
    _add_reaper_options(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("reaper", help="recover expired leases")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one cycle, then exit (CronJob)")
    mode.add_argument("--interval", type=duration, default=reaper_mod.INTERVAL_DEFAULT)
    p.add_argument("--metrics-port", type=int, default=None, help="serve reaper and queue metrics")
    _add_reaper_options(p)
    p.set_defaults(func=cmd_reaper)

    p = sub.add_parser("exporter", help="serve queue-level metrics from SQL")
    p.add_argument("--port", type=int, default=9464)
    p.add_argument("--interval", type=duration, default=5.0, help="cache stats this long between scrapes")
    p.add_argument("--completed-interval", type=duration, default=None,
                   help="refresh the completed counts (an index scan) this often (default 60s)")
    p.set_defaults(func=cmd_exporter)

    p = sub.add_parser("stats", help="per-queue backlog and lease health")
    p.add_argument("--queue", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("jobs", help="inspect jobs")
    jobs_sub = p.add_subparsers(dest="jobs_command", required=True, parser_class=_Parser)
    show = jobs_sub.add_parser("show", help="one job and its event history")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_jobs_show)
    from tenure.control_cli import add_jobs_commands
    add_jobs_commands(jobs_sub)

    p = sub.add_parser("prune", help="delete completed and cancelled jobs (and stale worker rows) older than a duration")
    p.add_argument("--older-than", type=duration, required=True)
    p.add_argument("--batch", type=positive_int, default=10_000)
    p.set_defaults(func=cmd_prune)

    from tenure.dlq import add_dlq_parser
    add_dlq_parser(sub)

    p = sub.add_parser("demo", help="watch a crash get recovered, on an embedded database")
    p.add_argument("--jobs", type=positive_int, default=20)
    p.add_argument("--keep", action="store_true", help="keep the demo database afterwards")
    p.set_defaults(func=cmd_demo, no_db=True)

    p = sub.add_parser("operator", help="run the Kubernetes operator (kopf)")
    p.add_argument("--namespace", action="append", help="watch only these namespaces (default: all)")
    p.add_argument("--liveness", default="http://0.0.0.0:8080/healthz")
    p.set_defaults(func=cmd_operator, no_db=True)

    for extra in ("tenure.observability.doctor", "tenure.chaos.cli", "tenure.control_cli"):
        try:
            module = __import__(extra, fromlist=["add_parser"])
        except ImportError:
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_json, args.log_level)
    try:
        args.schema = resolve_schema(args.schema)
        if not getattr(args, "no_db", False):
            args.dsn = resolve_dsn(args.database_url)
        else:
            args.dsn = args.database_url
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"tenure: error: {exc}\n")
        return EXIT_CONFIG
    except (SchemaTooNewError, PayloadError) as exc:
        sys.stderr.write(f"tenure: error: {exc}\n")
        return EXIT_CONFIG
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(f"tenure: error: cannot connect to the database: {first}\n")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
