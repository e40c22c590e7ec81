"""The chaos harness: real worker and reaper processes, a producer, and seeded faults.

One run: migrate a fresh schema, start ``workers`` worker processes (``tenure worker --app
tenure.chaos.tasks:app``; worker 0 reaches the database through :class:`TcpProxy`, workers 1
and 2 run with their wall clocks skewed by ``+skew``/``-skew`` seconds), ``reapers`` reaper
processes, and a producer thread that spreads ``jobs`` jobs over ``duration`` seconds. Faults,
chosen by ``seed``:

- job-level markers in the payload (kill -9 before the effect, after the effect and before the
  acknowledgement, during the acknowledgement; a handler that hangs forever), fired by the task
  once per job, on the first attempt that reaches them;
- process-level faults fired as the producer passes seeded points: SIGSTOP of a worker for
  longer than the lease, then SIGCONT; a partition of worker 0 (``drop`` or ``blackhole``) for
  longer than the lease; a PostgreSQL restart (only when the harness owns the embedded server);
- ``restart_in_gap`` markers (harness-owned server only): after a job's guarded body and before
  its ``eff.succeeded()``, the task asks the harness for ``pg_ctl restart -m fast`` (through a
  file in a control folder) and waits 3 s, the gap where a restart once ran an effect twice.

A worker that dies is replaced at once (a Deployment would); a worker holding two hung handlers
is restarted gracefully (a liveness probe would). When every job is terminal, everything is
stopped and the invariants of :mod:`tenure.chaos.invariants` are checked from the database.

Limits: one host (signals, loopback proxy); the proxy partitions one worker, not the reapers;
a PostgreSQL restart needs the harness's own embedded server; clock skew uses libfaketime when
present (``scripts/tools/faketime.sh``), else an offset injected into ``time.time`` of the
worker (the leases never read either).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tenure import control
from tenure.chaos import QUEUE, TIMED_TASK
from tenure.chaos.invariants import Timing, Verdict, check_all, check_job_control
from tenure.chaos.proxy import TcpProxy
from tenure.chaos.store import ChaosStore
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.errors import ConfigError
from tenure.core.repository import JobSpec, Repository

log = logging.getLogger("tenure.chaos")

JOBS_DEFAULT = 300
DURATION_DEFAULT = 40.0
WORKERS_DEFAULT = 3
CONCURRENCY_DEFAULT = 4
REAPERS_DEFAULT = 2
LEASE_DEFAULT = 2.0
HEARTBEAT_DEFAULT = 0.5
GRACE_DEFAULT = 1.0
REAPER_INTERVAL_DEFAULT = 0.5
MAX_LEASE_TOTAL_DEFAULT = 6.0
MAX_LEASE_EXPIRIES_DEFAULT = 5
MAX_ATTEMPTS_DEFAULT = 10
SEED_DEFAULT = 1
SKEW_DEFAULT = 300.0
RECOVERY_MARGIN_DEFAULT = 3.0
WORK_MS_MIN_DEFAULT = 50.0
WORK_MS_MAX_DEFAULT = 300.0
SETTLE_TIMEOUT_DEFAULT = 180.0
FAULT_GAP = 1.0
"""Seconds of calm between two process-level faults, so each reap has one cause."""
HUNG_PER_WORKER_LIMIT = 2
AIM_WAIT = 5.0
"""Seconds a due SIGSTOP or partition waits for its target to hold a running job before firing anyway."""
TICK = 0.1


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. Fault counts left at None scale with ``duration`` (see :meth:`counts`)."""

    jobs: int = JOBS_DEFAULT
    """Jobs the producer enqueues (each once, by idempotency key)."""
    duration: float = DURATION_DEFAULT
    """Seconds over which the producer spreads the jobs; process-level faults fall inside it."""
    workers: int = WORKERS_DEFAULT
    """Worker processes kept alive (dead ones are replaced)."""
    concurrency: int = CONCURRENCY_DEFAULT
    """Handlers per worker process."""
    reapers: int = REAPERS_DEFAULT
    """Reaper processes running at once."""
    lease: float = LEASE_DEFAULT
    """Seconds of lease per claim or renewal."""
    heartbeat: float = HEARTBEAT_DEFAULT
    """Seconds between renewals (at most lease/3)."""
    grace: float = GRACE_DEFAULT
    """Reaper grace after lease expiry (at least one heartbeat)."""
    reaper_interval: float = REAPER_INTERVAL_DEFAULT
    """Seconds between reaper cycles."""
    max_lease_total: float = MAX_LEASE_TOTAL_DEFAULT
    """Bounded extension (R4): what ends a hung handler."""
    max_lease_expiries: int = MAX_LEASE_EXPIRIES_DEFAULT
    """Lease expiries before the reaper dead-letters a job with lease_expired."""
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    """Attempts per job before handler failures dead-letter it."""
    seed: int = SEED_DEFAULT
    """Seed of every random choice (fault plan, targets, work times)."""
    kills_per_kind: int | None = None
    """Jobs per kill kind (before effect, after effect, during ack) that kill their worker."""
    hangs: int | None = None
    """Jobs whose handler hangs forever (once per job)."""
    sigstops: int | None = None
    """SIGSTOP/SIGCONT pauses of a random worker, each longer than the lease."""
    partitions: int | None = None
    """Partitions of worker 0 from the database, alternating drop and blackhole."""
    pg_restarts: int | None = None
    """PostgreSQL restarts (only with the harness's own embedded server)."""
    gap_restarts: int | None = None
    """Jobs that restart PostgreSQL between their guarded body and ``eff.succeeded()`` (own server only)."""
    cancels: int | None = None
    """`tenure jobs cancel` of a random running (else pending) job of the run (issue 14)."""
    queue_pauses: int | None = None
    """Pauses of the run's queue, each as long as a SIGSTOP, then resumed (issue 14)."""
    timeouts: int | None = None
    """Jobs whose first attempt overruns its task's timeout (chaos.timed), retried as task_timeout."""
    skew: float = SKEW_DEFAULT
    """Seconds of wall-clock skew for workers 1 (+) and 2 (-); 0 disables."""
    recovery_margin: float = RECOVERY_MARGIN_DEFAULT
    """Seconds allowed beyond lease + grace + reaper interval for a recovery (a noisy host)."""
    work_ms_min: float = WORK_MS_MIN_DEFAULT
    """Shortest simulated work per job, in milliseconds."""
    work_ms_max: float = WORK_MS_MAX_DEFAULT
    """Longest simulated work per job, in milliseconds."""
    settle_timeout: float = SETTLE_TIMEOUT_DEFAULT
    """Seconds after the last job and fault for every job to become terminal."""

    def validate(self) -> None:
        if self.jobs < 1:
            raise ConfigError("chaos needs at least one job")
        if self.duration <= 0:
            raise ConfigError("chaos duration must be positive")
        if self.workers < 1 or self.concurrency < 1:
            raise ConfigError("chaos needs at least one worker with concurrency >= 1")
        if self.reapers < 1:
            raise ConfigError("chaos needs at least one reaper")
        if self.heartbeat * 3 > self.lease + 1e-9:
            raise ConfigError(f"heartbeat {self.heartbeat:g}s must be at most lease/3")
        if self.grace < self.heartbeat:
            raise ConfigError(f"grace {self.grace:g}s must cover one heartbeat ({self.heartbeat:g}s)")
        if self.reaper_interval <= 0:
            raise ConfigError("reaper interval must be positive")
        if self.max_lease_total < self.lease:
            raise ConfigError("max total lease must be at least the lease")
        if self.max_lease_expiries < 1 or self.max_attempts < 1:
            raise ConfigError("max lease expiries and max attempts must be >= 1")
        if not 0 <= self.work_ms_min <= self.work_ms_max:
            raise ConfigError("work times must satisfy 0 <= min <= max")
        if self.skew < 0 or self.recovery_margin < 0 or self.settle_timeout <= 0:
            raise ConfigError("skew and margin must be >= 0, settle timeout positive")
        for name in ("kills_per_kind", "hangs", "sigstops", "partitions", "pg_restarts", "gap_restarts",
                     "cancels", "queue_pauses", "timeouts"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0")

    @property
    def pause_seconds(self) -> float:
        """How long a SIGSTOP or partition lasts: past lease + grace + two reaper cycles."""
        return self.lease + self.grace + 2 * self.reaper_interval + 1.0

    def counts(self) -> dict[str, int]:
        """Faults per kind: explicit values, else scaled by duration (minimums for short runs)."""
        minutes = self.duration / 60.0
        budget = max(3, int(0.75 * self.duration / (self.pause_seconds + FAULT_GAP + AIM_WAIT / 2)))

        def pick(value: int | None, auto: int) -> int:
            return auto if value is None else value

        return {
            "kills_per_kind": pick(self.kills_per_kind, max(3, round(2 * minutes))),
            "hangs": pick(self.hangs, max(2, round(minutes))),
            "sigstops": pick(self.sigstops, max(2, round(0.4 * budget))),
            "partitions": pick(self.partitions, max(2, round(0.4 * budget))),
            "pg_restarts": pick(self.pg_restarts, max(1, round(0.2 * budget))),
            "gap_restarts": pick(self.gap_restarts, max(2, round(2 * minutes))),
            "cancels": pick(self.cancels, max(3, round(4 * minutes))),
            "queue_pauses": pick(self.queue_pauses, max(1, round(0.2 * budget))),
            "timeouts": pick(self.timeouts, max(2, round(minutes))),
        }


@dataclass(frozen=True)
class TimedFault:
    kind: str
    """``sigstop``, ``partition_drop``, ``partition_blackhole``, ``pg_restart``, ``cancel`` or
    ``queue_pause``."""
    after_enqueued: int
    """Fires once the producer has enqueued this many jobs."""


@dataclass(frozen=True)
class FaultPlan:
    markers: dict[int, str]
    """Job number -> marker, fired once per job by the first attempt that reaches it."""
    timed: list[TimedFault]
    work_ms: list[float]


def make_plan(config: ChaosConfig, *, can_partition: bool, can_restart: bool) -> FaultPlan:
    """The seeded fault plan: same config and seed, same plan."""
    rng = random.Random(config.seed)
    counts = config.counts()
    kinds = (["kill_before_effect", "kill_after_effect", "kill_during_ack"] * counts["kills_per_kind"]
             + ["hang"] * counts["hangs"] + ["overrun"] * counts["timeouts"]
             + (["restart_in_gap"] * counts["gap_restarts"] if can_restart else []))
    lo, hi = int(config.jobs * 0.05), max(int(config.jobs * 0.9), int(config.jobs * 0.05) + 1)
    pool = list(range(lo, hi))
    rng.shuffle(pool)
    markers = {n: kind for n, kind in zip(pool, kinds)}
    timed_kinds = ["sigstop"] * counts["sigstops"]
    if can_partition:
        timed_kinds += [("partition_drop", "partition_blackhole")[i % 2] for i in range(counts["partitions"])]
    if can_restart:
        timed_kinds += ["pg_restart"] * counts["pg_restarts"]
    timed_kinds += ["queue_pause"] * counts["queue_pauses"]
    rng.shuffle(timed_kinds)
    # Cancels take no time and need no calm: spread them on their own points.
    cancels = [TimedFault("cancel", int((0.10 + 0.75 * rng.random()) * config.jobs))
               for _ in range(counts["cancels"])]
    timed = []
    for i, kind in enumerate(timed_kinds):
        # Evenly spaced over 10%..85% of production, jittered by a fraction of the spacing.
        span = 0.75 / max(1, len(timed_kinds))
        at = 0.10 + span * (i + rng.uniform(0.1, 0.6))
        timed.append(TimedFault(kind, int(at * config.jobs)))
    timed = sorted(timed + cancels, key=lambda t: t.after_enqueued)
    work = [rng.uniform(config.work_ms_min, config.work_ms_max) for _ in range(config.jobs)]
    return FaultPlan(markers, timed, work)


@dataclass
class ChaosReport:
    """What a run measured; ``ok`` is True when every invariant held."""

    ok: bool
    config: dict[str, Any]
    seed: int
    schema: str
    database: str
    wall_seconds: float
    clock_skew: dict[str, Any]
    skipped: list[str]
    violations: dict[str, list[str]]
    figures: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


def find_libfaketime() -> str | None:
    """Path of libfaketime.so.1 when installed (Debian package ``libfaketime``)."""
    env = os.environ.get("TENURE_LIBFAKETIME")
    if env and Path(env).is_file():
        return env
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
                    "/usr/local/lib/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


@dataclass
class _Proc:
    role: str  # worker | reaper
    slot: int
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    stopping: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid


class ChaosHarness:
    """Runs one chaos run (:meth:`run_once`) and returns its :class:`ChaosReport`.

    ``dsn`` None: the harness starts its own embedded PostgreSQL in ``datadir`` (a temporary
    folder when None) and may restart it. ``schema`` None: a fresh ``chaos_<hex>`` schema,
    dropped afterwards unless ``keep``.
    """

    def __init__(self, config: ChaosConfig, *, dsn: str | None = None, schema: str | None = None,
                 datadir: Path | None = None, keep: bool = False, log_dir: Path | None = None,
                 progress: bool = False) -> None:
        config.validate()
        self.config = config
        self.given_dsn = dsn
        self.schema = schema or f"chaos_{uuid.uuid4().hex[:10]}"
        self.datadir = datadir
        self.keep = keep
        self.show_progress = progress
        self.log_dir = log_dir
        self.server: EmbeddedServer | None = None
        self.dsn = ""
        self.proxy: TcpProxy | None = None
        self.procs: list[_Proc] = []
        self.rng = random.Random(config.seed + 1)
        self.skipped: list[str] = []
        self.enqueued = 0
        self._producer_error: BaseException | None = None
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._offset = 0.0
        self._pending_records: list[tuple[str, int | None, float, float | None, dict[str, Any]]] = []
        self._hung: dict[int, list[float]] = {}
        self._faults_seen = 0
        self._own_tmp: Path | None = None
        self._control = Path(tempfile.mkdtemp(prefix="tenure-chaos-control-"))
        """Where ``restart_in_gap`` tasks drop their restart requests."""

    # -- database helpers ---------------------------------------------------------------------
    def _store(self) -> ChaosStore | None:
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = connect(self.dsn, application_name="tenure-chaos-harness")
            return ChaosStore(self._conn, self.schema)
        except psycopg.OperationalError:
            return None

    def _db_time(self) -> float:
        """Now by the database clock (harness clock plus the offset measured at start)."""
        return time.time() + self._offset

    def _record(self, kind: str, pid: int | None, started: float, ended: float | None = None,
                **detail: Any) -> None:
        self._pending_records.append((kind, pid, started, ended, detail))
        self._flush_records()

    def _flush_records(self) -> None:
        while self._pending_records:
            store = self._store()
            if store is None:
                return
            kind, pid, started, ended, detail = self._pending_records[0]
            try:
                store.fault_record(kind, pid=pid, started=started, ended=ended, detail=detail)
            except psycopg.OperationalError:
                if self._conn is not None:
                    self._conn.close()
                return
            self._pending_records.pop(0)

    # -- processes ----------------------------------------------------------------------------
    def _env(self, slot: int | None) -> dict[str, str]:
        env = {**os.environ, "TENURE_DATABASE_URL": self.dsn, "TENURE_SCHEMA": self.schema,
               "PYTHONUNBUFFERED": "1"}
        for key in ("TENURE_LOG_JSON", "LD_PRELOAD", "FAKETIME", "TENURE_CHAOS_CLOCK_OFFSET",
                    "TENURE_CHAOS_CONTROL_DIR"):
            env.pop(key, None)
        if slot is None:
            return env
        if self.server is not None:
            env["TENURE_CHAOS_CONTROL_DIR"] = str(self._control)
        if slot == 0 and self.proxy is not None:
            env["TENURE_DATABASE_URL"] = self._proxy_dsn()
        skew = self._skew_for(slot)
        if skew:
            lib = find_libfaketime()
            if lib:
                env["LD_PRELOAD"] = lib
                env["FAKETIME"] = f"{skew:+.0f}s"
                env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
                env["FAKETIME_NO_CACHE"] = "1"
            else:
                env["TENURE_CHAOS_CLOCK_OFFSET"] = f"{skew:.0f}"
        return env

    def _skew_for(self, slot: int) -> float:
        if not self.config.skew:
            return 0.0
        return {1: self.config.skew, 2: -self.config.skew}.get(slot, 0.0)

    def _log_file(self, name: str) -> Any:
        if self.log_dir is None:
            return subprocess.DEVNULL
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")

    def _spawn(self, role: str, slot: int) -> _Proc:
        c = self.config
        base = [sys.executable, "-m", "tenure.cli"]
        if role == "worker":
            args = ["worker", "--app", "tenure.chaos.tasks:app", "--queue", QUEUE,
                    "--concurrency", str(c.concurrency), "--lease", str(c.lease), "--heartbeat", str(c.heartbeat),
                    "--grace", str(c.grace), "--max-lease-total", str(c.max_lease_total),
                    "--poll-interval", "0.2", "--drain-timeout", "2"]
            env = self._env(slot)
        else:
            args = ["reaper", "--interval", str(c.reaper_interval), "--grace", str(c.grace),
                    "--heartbeat", str(c.heartbeat),
                    "--backoff-base", "0.2", "--backoff-max", "1", "--batch", "200",
                    "--max-lease-expiries", str(c.max_lease_expiries)]
            env = self._env(None)
        out = self._log_file(f"{role}-{slot}")
        try:
            popen = subprocess.Popen(base + args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        proc = _Proc(role, slot, popen)
        self.procs.append(proc)
        return proc

    def _live(self, role: str) -> list[_Proc]:
        return [p for p in self.procs if p.role == role and p.popen.poll() is None and not p.stopping]

    def _watch_processes(self) -> None:
        for proc in list(self.procs):
            code = proc.popen.poll()
            if code is None:
                continue
            self.procs.remove(proc)
            kind = "worker_recycled" if proc.stopping else "process_exit"
            self._record(kind, proc.pid, self._db_time(), role=proc.role, slot=proc.slot, exit_code=code)
            if not self._stop.is_set():
                self._spawn(proc.role, proc.slot)

    def _recycle_hung(self, store: ChaosStore) -> None:
        """A worker holding HUNG_PER_WORKER_LIMIT hung handlers, each past the point where bounded
        extension let the reaper recover its job, is restarted (a liveness probe would)."""
        faults = store.faults()
        for f in faults[self._faults_seen:]:
            if f["kind"] == "hang" and f["pid"] is not None:
                self._hung.setdefault(int(f["pid"]), []).append(float(f["started_at"]))
        self._faults_seen = len(faults)
        c = self.config
        settled = self._db_time() - (c.max_lease_total + c.grace + 2 * c.reaper_interval + c.recovery_margin)
        for proc in self._live("worker"):
            if sum(1 for t in self._hung.get(proc.pid, []) if t < settled) >= HUNG_PER_WORKER_LIMIT:
                proc.stopping = True
                proc.popen.send_signal(signal.SIGTERM)

    # -- producer -----------------------------------------------------------------------------
    def _produce(self, plan: FaultPlan) -> None:
        c = self.config
        conn: psycopg.Connection[Any] | None = None
        started = time.monotonic()
        try:
            while self.enqueued < c.jobs and not self._stop.is_set():
                due = min(c.jobs, int((time.monotonic() - started) / c.duration * c.jobs) + 1)
                if due <= self.enqueued:
                    self._stop.wait(min(0.05, c.duration / c.jobs))
                    continue
                batch = [JobSpec(task=TIMED_TASK if plan.markers.get(n) == "overrun" else "chaos.job", queue=QUEUE, max_attempts=c.max_attempts,
                                 idempotency_key=f"chaos-job:{n}",
                                 payload={"n": n, "work_ms": round(plan.work_ms[n], 1),
                                          **({"fault": plan.markers[n]} if n in plan.markers else {})})
                         for n in range(self.enqueued, min(due, self.enqueued + 500))]
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-producer")
                    Repository(conn, self.schema).enqueue_many(batch)
                    self.enqueued += len(batch)
                except psycopg.OperationalError:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stop.wait(0.5)  # the same batch again: idempotency keys make it safe
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self._producer_error = exc
        finally:
            if conn is not None:
                conn.close()

    # -- faults -------------------------------------------------------------------------------
    def _proxy_dsn(self) -> str:
        assert self.proxy is not None
        info = psycopg.conninfo.conninfo_to_dict(self.dsn)
        info.update(host="127.0.0.1", port=str(self.proxy.port))
        info.pop("hostaddr", None)
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})

    def _upstream(self) -> tuple[str, int] | None:
        info = psycopg.conninfo.conninfo_to_dict(self.dsn)
        host = str(info.get("hostaddr") or info.get("host") or "")
        if not host or host.startswith("/") or "," in host:
            return None
        return host, int(str(info.get("port") or 5432))

    def _aim(self, fault: TimedFault, store: ChaosStore | None) -> _Proc | None:
        """The worker a SIGSTOP or partition would hit now, if it holds running jobs."""
        try:
            running = store.running_by_pid() if store is not None else {}
        except psycopg.OperationalError:
            return None
        live = self._live("worker")
        if fault.kind.startswith("partition"):
            live = [p for p in live if p.slot == 0]
        busy = [p for p in live if running.get(p.pid, 0) > 0]
        return self.rng.choice(busy) if busy else None

    def _begin(self, fault: TimedFault, aimed: _Proc | None) -> tuple[str, Any, float, float] | None:
        """Start a process-level fault: (kind, target, started db time, monotonic end)."""
        c = self.config
        if fault.kind == "sigstop":
            live = self._live("worker")
            if not live:
                return None
            target = aimed if aimed is not None and aimed in live else self.rng.choice(live)
            target.popen.send_signal(signal.SIGSTOP)
            return fault.kind, target, self._db_time(), time.monotonic() + c.pause_seconds
        if fault.kind.startswith("partition"):
            assert self.proxy is not None
            part = next((p for p in self._live("worker") if p.slot == 0), None)
            self.proxy.set_mode(fault.kind.split("_", 1)[1])
            return fault.kind, part, self._db_time(), time.monotonic() + c.pause_seconds
        if fault.kind == "cancel":
            started = self._db_time()
            outcome = self._cancel_one()
            return fault.kind, outcome, started, time.monotonic()
        if fault.kind == "queue_pause":
            with connect(self.dsn, application_name="tenure-chaos-pause") as conn:
                control.set_paused(conn, QUEUE, True, schema=self.schema, requested_by="chaos")
            return fault.kind, None, self._db_time(), time.monotonic() + c.pause_seconds
        if fault.kind == "pg_restart":
            assert self.server is not None
            started = self._db_time()
            self.server.stop("fast")
            time.sleep(0.5)
            self.server.start()
            return fault.kind, None, started, time.monotonic()
        raise ValueError(fault.kind)

    def _cancel_one(self) -> dict[str, Any]:
        """Cancel one random running job of the run (a pending one when none runs)."""
        with connect(self.dsn, application_name="tenure-chaos-cancel") as conn:
            store = ChaosStore(conn, self.schema)
            job_id = store.pick_for_cancel(QUEUE, self.rng.random())
            if job_id is None:
                return {}
            report = control.cancel(conn, [job_id], schema=self.schema, requested_by="chaos")
        outcome = ("revoked" if report.revoked else "cancelled" if report.cancelled
                   else f"skipped:{report.skipped.get(job_id)}")
        return {"job_id": job_id, "outcome": outcome}

    def _serve_restart_requests(self) -> None:
        """Restart PostgreSQL (``pg_ctl restart -m fast``) for each ``restart_in_gap`` request;
        requests that arrive together share one restart."""
        requests = [p for p in self._control.iterdir() if p.name.startswith("restart-") and not p.name.endswith(".tmp")]
        if not requests or self.server is None:
            return
        jobs = sorted(int(p.read_text() or 0) for p in requests)
        for p in requests:
            p.unlink()
        self._say(f"chaos: pg_restart in the gap of job(s) {jobs}")
        started = self._db_time()
        self.server.restart("fast")
        self._record("pg_restart", None, started, self._db_time(), aimed="gap", job_ids=jobs)

    def _end(self, active: tuple[str, Any, float, float]) -> None:
        kind, target, started, _ = active
        if kind == "cancel":
            if target:
                self._record(kind, None, started, started, **target)
            return
        if kind == "queue_pause":
            ended = self._db_time()
            with connect(self.dsn, application_name="tenure-chaos-pause") as conn:
                control.set_paused(conn, QUEUE, False, schema=self.schema, requested_by="chaos")
            self._record(kind, None, started, ended)
            return
        pid = target.pid if isinstance(target, _Proc) else None
        if kind == "sigstop" and isinstance(target, _Proc):
            try:
                target.popen.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
        elif kind.startswith("partition") and self.proxy is not None:
            self.proxy.set_mode("pass")
        self._record(kind, pid, started, self._db_time())

    # -- the run ------------------------------------------------------------------------------
    def _setup_database(self) -> None:
        if self.given_dsn:
            self.dsn = self.given_dsn
        else:
            if self.datadir is None:
                self._own_tmp = Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
                self.datadir = self._own_tmp / "pgdata"
            self.server = ensure_server(self.datadir)
            self.dsn = self.server.dsn
        with connect(self.dsn, application_name="tenure-chaos-setup") as conn:
            Repository(conn, self.schema).migrate()
            store = ChaosStore(conn, self.schema)
            store.setup()
            before = time.time()
            db = store.db_now()
            self._offset = db - (before + time.time()) / 2

    def _say(self, text: str) -> None:
        if self.show_progress:
            print(text, file=sys.stderr, flush=True)

    def run_once(self) -> ChaosReport:
        """One full run; always stops every process it started."""
        c = self.config
        began = time.monotonic()
        self._setup_database()
        upstream = self._upstream()
        can_partition = upstream is not None
        can_restart = self.server is not None
        counts = c.counts()
        if not can_partition and counts["partitions"]:
            self.skipped.append("partition: the database URL is not a TCP host the proxy can front")
        if not can_restart and counts["pg_restarts"]:
            self.skipped.append("pg_restart: only with the harness's own embedded server (no --database-url)")
        plan = make_plan(c, can_partition=can_partition, can_restart=can_restart)
        if upstream is not None and counts["partitions"]:
            self.proxy = TcpProxy(*upstream)
            self.proxy.start()
        skew_method = "libfaketime" if find_libfaketime() else "injected time.time offset"
        try:
            for i in range(c.reapers):
                self._spawn("reaper", i)
            for i in range(c.workers):
                self._spawn("worker", i)
            for slot in range(min(c.workers, 3)):
                if self._skew_for(slot):
                    self._record("clock_skew", None, self._db_time(), skew_seconds=self._skew_for(slot),
                                 slot=slot, method=skew_method)
            producer = threading.Thread(target=self._produce, args=(plan,), name="chaos-producer", daemon=True)
            producer.start()
            self._main_loop(plan, producer)
        finally:
            self._stop.set()
            self._shutdown()
        run_end = self._db_time()
        report = self._verify(run_end, time.monotonic() - began, skew_method)
        self._cleanup()
        return report

    def _main_loop(self, plan: FaultPlan, producer: threading.Thread) -> None:
        c = self.config
        timed = list(plan.timed)
        active: tuple[str, Any, float, float] | None = None
        calm_until = 0.0
        next_sample = next_progress = next_hung = 0.0
        done_at: float | None = None
        due_since: float | None = None
        last_line = 0.0
        while True:
            now = time.monotonic()
            self._watch_processes()
            self._serve_restart_requests()
            if self._producer_error is not None:
                raise RuntimeError(f"producer failed: {self._producer_error}") from self._producer_error
            if active is not None and now >= active[3]:
                self._end(active)
                active, calm_until = None, time.monotonic() + FAULT_GAP
            if active is None and timed and now >= calm_until and self.enqueued >= timed[0].after_enqueued:
                due_since = due_since or now
                aimless = timed[0].kind in ("pg_restart", "cancel", "queue_pause")
                aimed = self._aim(timed[0], self._store()) if not aimless else None
                if aimed is not None or aimless or now - due_since >= AIM_WAIT:
                    fault, due_since = timed.pop(0), None
                    self._say(f"chaos: {fault.kind} at {self.enqueued} enqueued")
                    active = self._begin(fault, aimed)
                if active is not None and active[0] in ("pg_restart", "cancel"):
                    self._end(active)
                    active, calm_until = None, time.monotonic() + FAULT_GAP
            store = self._store()
            if store is not None:
                try:
                    self._flush_records()
                    if now >= next_sample:
                        store.lease_sample()
                        next_sample = now + 0.2
                    if now >= next_hung:
                        self._recycle_hung(store)
                        next_hung = now + 1.0
                    if now >= next_progress:
                        next_progress = now + 0.5
                        prog = store.progress(QUEUE)
                        if self.show_progress and now - last_line >= 5:
                            last_line = now
                            self._say(f"chaos: enqueued {self.enqueued}/{c.jobs}, terminal {prog['terminal']}, "
                                      f"running {prog['running']}, pending {prog['pending']}, "
                                      f"faults left {len(timed) + (active is not None)}")
                        finished = (not producer.is_alive() and not timed and active is None
                                    and prog["terminal"] >= c.jobs)
                        if finished:
                            return
                        if not producer.is_alive() and not timed and active is None:
                            done_at = done_at or now
                            if now - done_at > c.settle_timeout:
                                self._say("chaos: settle timeout: some jobs never became terminal")
                                return
                except psycopg.OperationalError:
                    if self._conn is not None:
                        self._conn.close()
            time.sleep(TICK)

    def _shutdown(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                try:
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None and not self.server.is_running():
            self.server.start()
        self._flush_records()

    def _verify(self, run_end: float, wall: float, skew_method: str) -> ChaosReport:
        c = self.config
        store = None
        for _ in range(50):
            store = self._store()
            if store is not None:
                break
            time.sleep(0.2)
        if store is None:
            raise RuntimeError("cannot reach the database to check the invariants")
        self._flush_records()
        jobs = store.jobs_summary(QUEUE)
        reaps = store.reaps(QUEUE)
        faults = store.faults()
        events = store.event_counts(QUEUE)
        offsets = store.clock_offsets()
        pause_claims = {int(f["id"]): store.claims_between(QUEUE, float(f["started_at"]), float(f["ended_at"]))
                        for f in faults if f["kind"] == "queue_pause" and f["ended_at"] is not None}
        timeout_jobs = store.timeout_job_ids(QUEUE)
        timing = Timing(lease=c.lease, grace=c.grace, reaper_interval=c.reaper_interval, heartbeat=c.heartbeat,
                        max_lease_total=c.max_lease_total, margin=c.recovery_margin)
        verdict: Verdict = check_all(jobs=jobs, reaps=reaps, faults=faults, events=events, planned=c.jobs,
                                     timing=timing, run_end=run_end)
        check_job_control(verdict, jobs=jobs, faults=faults, reaps=reaps, pause_claims=pause_claims,
                          timeout_jobs=timeout_jobs)
        if self.proxy is not None:
            verdict.figures["proxy_connections_dropped"] = self.proxy.connections_dropped
        skew = {"method": skew_method, "requested_seconds": c.skew,
                "observed_offsets_by_pid": {str(r["pid"]): round(float(r["offset_seconds"]), 1) for r in offsets}}
        database = "embedded (owned by the harness)" if self.server is not None else "given by --database-url"
        return ChaosReport(ok=verdict.ok, config={**asdict(c), "fault_counts": c.counts()}, seed=c.seed,
                           schema=self.schema, database=database, wall_seconds=round(wall, 1), clock_skew=skew,
                           skipped=self.skipped, violations=verdict.violations, figures=verdict.figures)

    def _cleanup(self) -> None:
        if self._conn is not None and not self._conn.closed:
            if not self.keep:
                try:
                    ChaosStore(self._conn, self.schema).drop_schema()
                except psycopg.Error as exc:
                    log.warning("could not drop schema %s: %s", self.schema, exc)
            self._conn.close()
        shutil.rmtree(self._control, ignore_errors=True)
        if self.server is not None and not self.keep:
            self.server.stop("immediate")
            if self._own_tmp is not None:
                shutil.rmtree(self._own_tmp, ignore_errors=True)


def format_report(report: ChaosReport) -> str:
    """The human-readable table printed at the end of a run."""
    f = report.figures
    rec = f.get("recovery_seconds_killed", {})
    allrec = f.get("recovery_seconds_all_faults", {})
    lines: list[tuple[str, str]] = [
        ("seed / schema", f"{report.seed} / {report.schema} ({report.database})"),
        ("wall time", f"{report.wall_seconds}s"),
        ("jobs planned / completed / DLQ", f"{f.get('jobs_planned')} / {f.get('jobs_completed')} / "
                                           f"{f.get('jobs_dead_lettered')} {f.get('dead_letter_causes') or ''}"),
        ("attempts (claims) / redelivered jobs", f"{f.get('attempts')} / {f.get('redelivered_jobs')}"),
        ("cancels: running revoked / pending / lost race",
         " / ".join(str((f.get("cancels") or {}).get(k, 0)) for k in ("revoked_running", "cancelled_pending",
                                                                       "lost_race"))),
        ("queue pauses / claims while paused", f"{(f.get('queue_pauses') or {}).get('pauses', 0)} / "
                                               f"{(f.get('queue_pauses') or {}).get('claims_while_paused', 0)}"),
        ("timeouts: overruns fired / jobs retried as task_timeout",
         f"{(f.get('task_timeouts') or {}).get('overruns_fired', 0)} / "
         f"{(f.get('task_timeouts') or {}).get('jobs_retried_as_timeout', 0)}"),
        ("faults injected", ", ".join(f"{k}={v}" for k, v in f.get("faults_injected", {}).items())),
        ("kill during ack: ack first / kill first", "{ack_committed_first} / {killed_first}".format(
            **f.get("kill_during_ack_outcomes", {"ack_committed_first": 0, "killed_first": 0}))),
        ("guarded effects applied", str(f.get("guarded_effects_applied"))),
        ("guarded: provider dedups (body re-run)", str(f.get("guarded_provider_dedups"))),
        ("guarded: body re-runs by planned fault", str(f.get("guarded_body_reruns_by_planned_fault"))),
        ("PostgreSQL restarts in the body/success gap", str(f.get("restart_in_gap_fired"))),
        ("unguarded effects / duplicates", f"{f.get('unguarded_effects')} / {f.get('unguarded_duplicates')} "
                                           f"(in {f.get('jobs_with_unguarded_duplicates')} jobs)"),
        ("reaps by cause", ", ".join(f"{k}={v}" for k, v in f.get("reaps_by_cause", {}).items())),
        ("recovery of killed jobs p50/p99/max", f"{rec.get('p50')} / {rec.get('p99')} / {rec.get('max')} s "
                                                f"(n={rec.get('n')}, bound {f.get('recovery_bound_seconds')}s)"),
        ("recovery, all faults p50/p99/max", f"{allrec.get('p50')} / {allrec.get('p99')} / {allrec.get('max')} s "
                                             f"(n={allrec.get('n')})"),
        ("stale writes rejected", f"{f.get('stale_writes_rejected_total')} "
                                  + ", ".join(f"{k}={v}" for k, v in f.get("stale_writes_rejected", {}).items())),
        ("fenced attempts: rejection recorded / self-fenced / effect CAS rejected",
         f"{f.get('fenced_attempts_with_recorded_rejection')} / {f.get('fenced_attempts_self_fenced_before_writing')}"
         f" / {f.get('fenced_attempts_effect_succeed_rejected_unrecorded')} of {f.get('fenced_attempts_checked')}"),
        ("clock skew", f"{report.clock_skew['method']}: observed " + (", ".join(
            f"{offset:+.0f}s in {n} worker process(es)" for offset, n in sorted(Counter(
                round(v) for v in report.clock_skew["observed_offsets_by_pid"].values() if abs(v) > 1).items()))
            or "none")),
    ]
    if report.skipped:
        lines.append(("skipped", "; ".join(report.skipped)))
    width = max(len(k) for k, _ in lines)
    out = [f"{k.ljust(width)}  {v}" for k, v in lines]
    out.append("")
    out.append("invariants:")
    for name, problems in report.violations.items():
        out.append(f"  {'PASS' if not problems else 'FAIL'}  {name}" + (f" ({len(problems)})" if problems else ""))
        for p in problems[:10]:
            out.append(f"        - {p}")
    out.append("")
    out.append("RESULT: " + ("all invariants held" if report.ok else "INVARIANT VIOLATED"))
    return "\n".join(out)
