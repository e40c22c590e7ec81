"""The faults of a local chaos run: the seeded plan (:func:`make_plan`) and the :class:`Injector`.

The plan marks jobs (kill -9 before the effect, after the effect and before the acknowledgement,
during the acknowledgement; a handler that hangs; a first attempt that overruns its timeout; a
PostgreSQL restart between the guarded body and ``eff.succeeded()``) and places process-level faults
at points of production (SIGSTOP, partition of worker 0 through the proxy, PostgreSQL restart,
queue pause, cancel, slow completions). Same config and seed, same plan.

``slow_completions`` (issue 40) is a slow database as the workers' acknowledgements meet it: a
connection of the harness (:class:`HistoryLock`, on its own thread) takes ``LOCK TABLE job_history
IN ACCESS EXCLUSIVE MODE``, which every completion waits behind (``job_complete_many`` inserts into
it; the lock recurses into its partitions), for as long as a SIGSTOP, past lease + grace + two
reaper cycles, then rolls back. Claims, heartbeats and reaps touch only ``jobs`` and go on: a worker
must keep the leases of finished jobs whose outcomes wait, and stop claiming while they do. Anything
else that reads ``job_history`` (``all_jobs``) waits too, including the harness's progress poll,
which the main loop skips meanwhile (:attr:`Injector.history_locked`); the lock is released on the
fault's own thread, so nothing the harness does can keep it.

The injector fires the process-level faults as the producer passes their points, one at a time with
:data:`~tenure.chaos.config.FAULT_GAP` of calm between two, aimed at a worker holding running jobs
when one does within :data:`~tenure.chaos.config.AIM_WAIT`; it serves the tasks' restart requests
and journals every fault. Clock skew is set in the workers' environment (:func:`worker_env`).

Limits: a partition needs a TCP database URL the proxy can front; a PostgreSQL restart needs the
harness's own embedded server; skew uses libfaketime when present, else an offset injected into the
worker's ``time.time``.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

from tenure import control
from tenure.chaos import QUEUE
from tenure.chaos.config import AIM_WAIT, FAULT_GAP, ChaosConfig
from tenure.chaos.fleet import Fleet, Proc
from tenure.chaos.journal import Journal
from tenure.chaos.proxy import TcpProxy
from tenure.chaos.store import ChaosStore
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer
from tenure.core.errors import first_line

AIMLESS = ("pg_restart", "cancel", "queue_pause", "slow_completions")
"""Timed faults that hit no particular worker."""
INSTANT = ("pg_restart", "cancel")
"""Timed faults that are over as soon as they began."""
HISTORY_LOCK_WAIT = 5.0
"""Seconds the slow_completions fault waits for its lock (behind statements already running on
``job_history``) before it gives up and is not injected."""
HISTORY_LOCK_IDLE_LIMIT = 30.0
"""Seconds beyond its planned hold after which the server itself ends a slow_completions lock
(``idle_in_transaction_session_timeout``): a safety net should the harness stall."""


@dataclass(frozen=True)
class TimedFault:
    kind: str
    """``sigstop``, ``partition_drop``, ``partition_blackhole``, ``pg_restart``, ``cancel``,
    ``queue_pause`` or ``slow_completions``."""
    after_enqueued: int
    """Fires once the producer has enqueued this many jobs."""


@dataclass(frozen=True)
class FaultPlan:
    markers: dict[int, str]
    """Job number -> marker, fired once per job by the first attempt that reaches it."""
    timed: list[TimedFault]
    work_ms: list[float]


def make_plan(config: ChaosConfig, *, can_partition: bool, can_restart: bool,
              rng: random.Random | None = None) -> FaultPlan:
    """The seeded fault plan: same config and seed, same plan. ``rng`` is the run's one RNG (fresh
    from the seed when None); the plan draws from it first."""
    rng = rng if rng is not None else config.rng()
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
    timed_kinds += ["slow_completions"] * counts["slow_completions"]
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


# -- clock skew and the proxy: the workers' environment ------------------------------------------
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


def skew_for(config: ChaosConfig, slot: int) -> float:
    """Seconds of wall-clock skew of the worker in ``slot``: +skew for 1, -skew for 2, else none."""
    if not config.skew:
        return 0.0
    return {1: config.skew, 2: -config.skew}.get(slot, 0.0)


def skew_method() -> str:
    return "libfaketime" if find_libfaketime() else "injected time.time offset"


def upstream(dsn: str) -> tuple[str, int] | None:
    """The TCP host and port a proxy can front, None for a socket or multi-host URL."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(info.get("hostaddr") or info.get("host") or "")
    if not host or host.startswith("/") or "," in host:
        return None
    return host, int(str(info.get("port") or 5432))


def proxy_dsn(dsn: str, port: int) -> str:
    """``dsn`` through the proxy listening on loopback ``port``."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(host="127.0.0.1", port=str(port))
    info.pop("hostaddr", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def worker_env(config: ChaosConfig, slot: int | None, *, dsn: str, proxy: TcpProxy | None,
               control_dir: Path | None) -> dict[str, str]:
    """What a local run adds to the environment of the worker in ``slot`` (None: a reaper, nothing):
    the control folder of ``restart_in_gap``, the proxy for worker 0, the clock skew of workers 1 and 2."""
    env: dict[str, str] = {}
    if slot is None:
        return env
    if control_dir is not None:
        env["TENURE_CHAOS_CONTROL_DIR"] = str(control_dir)
    if slot == 0 and proxy is not None:
        env["TENURE_DATABASE_URL"] = proxy_dsn(dsn, proxy.port)
    skew = skew_for(config, slot)
    if skew:
        lib = find_libfaketime()
        if lib:
            env.update(LD_PRELOAD=lib, FAKETIME=f"{skew:+.0f}s", FAKETIME_DONT_FAKE_MONOTONIC="1",
                       FAKETIME_NO_CACHE="1")
        else:
            env["TENURE_CHAOS_CLOCK_OFFSET"] = f"{skew:.0f}"
    return env


# -- the slow database ----------------------------------------------------------------------------
class HistoryLock:
    """``job_history`` held in ACCESS EXCLUSIVE mode for ``seconds`` on a connection and thread of
    its own: :meth:`start` returns once the lock is granted (or refused); the thread releases it
    after ``seconds`` whatever the caller does meanwhile, or earlier on :meth:`release`."""

    def __init__(self, dsn: str, schema: str, seconds: float) -> None:
        self.dsn, self.schema, self.seconds = dsn, schema, seconds
        self.started: float | None = None
        """Database epoch seconds when the lock was granted (None: it never was)."""
        self.ended: float | None = None
        """Database epoch seconds when it was released."""
        self.error: str | None = None
        self._ready = threading.Event()
        self._release = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="tenure-chaos-history-lock", daemon=True)

    def start(self) -> bool:
        """Take the lock; True once it is held, False if it could not be taken (see ``error``)."""
        self._thread.start()
        self._ready.wait()
        return self.started is not None

    @property
    def holding(self) -> bool:
        return self.started is not None and not self._done.is_set()

    def release(self) -> None:
        """Release the lock now (if still held) and wait for the thread."""
        self._release.set()
        self._thread.join(timeout=HISTORY_LOCK_WAIT + 10)

    def _hold(self) -> None:
        try:
            with connect(self.dsn, application_name="tenure-chaos-slow-completions") as conn:
                store = ChaosStore(conn, self.schema)
                with store.history_locked(lock_timeout=HISTORY_LOCK_WAIT,
                                          idle_timeout=self.seconds + HISTORY_LOCK_IDLE_LIMIT) as granted:
                    self.started = granted
                    self._ready.set()
                    self._release.wait(self.seconds)
                self.ended = store.db_now()
        except psycopg.Error as exc:
            self.error = first_line(exc)
        finally:
            self._done.set()
            self._ready.set()


# -- the injector ---------------------------------------------------------------------------------
class ActiveFault(NamedTuple):
    """A process-level fault under way."""

    kind: str
    started: float
    """Database epoch seconds."""
    ends: float
    """Monotonic seconds when it is undone."""
    proc: Proc | None = None
    """The process it hit (SIGSTOP, partition), if any."""
    outcome: dict[str, Any] | None = None
    """A cancel's job and outcome."""
    lock: HistoryLock | None = None
    """A slow_completions fault's lock on ``job_history``."""


class Injector:
    """Fires the plan's timed faults one at a time, serves the tasks' restart requests, journals both.

    ``server`` is the harness's own embedded PostgreSQL (None: restarts are not planned); ``proxy``
    fronts worker 0 (None: partitions are not planned); ``control_dir`` is where ``restart_in_gap``
    tasks drop their requests.
    """

    def __init__(self, config: ChaosConfig, plan: FaultPlan, *, journal: Journal, fleet: Fleet,
                 rng: random.Random, dsn: str, schema: str, server: EmbeddedServer | None,
                 proxy: TcpProxy | None, control_dir: Path) -> None:
        self.config = config
        self.timed = list(plan.timed)
        self.journal = journal
        self.fleet = fleet
        self.rng = rng
        self.dsn = dsn
        self.schema = schema
        self.server = server
        self.proxy = proxy
        self.control_dir = control_dir
        self.active: ActiveFault | None = None
        self._calm_until = 0.0
        self._due_since: float | None = None

    @property
    def finished(self) -> bool:
        """Every timed fault fired and undone."""
        return not self.timed and self.active is None

    @property
    def history_locked(self) -> bool:
        """A slow_completions fault holds ``job_history``: whatever reads it waits until it ends."""
        lock = self.active.lock if self.active is not None else None
        return lock is not None and lock.holding

    @property
    def left(self) -> int:
        """Timed faults not yet over."""
        return len(self.timed) + (self.active is not None)

    def step(self, now: float, enqueued: int) -> None:
        """Undo the active fault when its time is up; fire the next once it is due (``now`` monotonic)."""
        if self.active is not None and now >= self.active.ends:
            self._finish()
        if self.active is None and self.timed and now >= self._calm_until and enqueued >= self.timed[0].after_enqueued:
            self._due_since = self._due_since or now
            aimless = self.timed[0].kind in AIMLESS
            aimed = self._aim(self.timed[0], self.journal.store()) if not aimless else None
            if aimed is not None or aimless or now - self._due_since >= AIM_WAIT:
                fault, self._due_since = self.timed.pop(0), None
                self.journal.say(f"chaos: {fault.kind} at {enqueued} enqueued")
                self.active = self._begin(fault, aimed)
            if self.active is not None and self.active.kind in INSTANT:
                self._finish()

    def _finish(self) -> None:
        assert self.active is not None
        self._end(self.active)
        self.active, self._calm_until = None, time.monotonic() + FAULT_GAP

    def _aim(self, fault: TimedFault, store: ChaosStore | None) -> Proc | None:
        """The worker a SIGSTOP or partition would hit now, if it holds running jobs."""
        try:
            running = store.running_by_pid() if store is not None else {}
        except psycopg.OperationalError:
            return None
        live = self.fleet.live("worker")
        if fault.kind.startswith("partition"):
            live = [p for p in live if p.slot == 0]
        busy = [p for p in live if running.get(p.pid, 0) > 0]
        return self.rng.choice(busy) if busy else None

    def _begin(self, fault: TimedFault, aimed: Proc | None) -> ActiveFault | None:
        """Start a process-level fault; None when it found nothing to hit."""
        c, db_time = self.config, self.journal.db_time
        if fault.kind == "sigstop":
            live = self.fleet.live("worker")
            if not live:
                return None
            target = aimed if aimed is not None and aimed in live else self.rng.choice(live)
            target.popen.send_signal(signal.SIGSTOP)
            return ActiveFault(fault.kind, db_time(), time.monotonic() + c.pause_seconds, proc=target)
        if fault.kind.startswith("partition"):
            assert self.proxy is not None
            part = next((p for p in self.fleet.live("worker") if p.slot == 0), None)
            self.proxy.set_mode(fault.kind.split("_", 1)[1])
            return ActiveFault(fault.kind, db_time(), time.monotonic() + c.pause_seconds, proc=part)
        if fault.kind == "cancel":
            started = db_time()
            return ActiveFault(fault.kind, started, time.monotonic(), outcome=self._cancel_one())
        if fault.kind == "queue_pause":
            self._set_paused(True)
            return ActiveFault(fault.kind, db_time(), time.monotonic() + c.pause_seconds)
        if fault.kind == "slow_completions":
            lock = HistoryLock(self.dsn, self.schema, c.pause_seconds)
            if not lock.start() or lock.started is None:
                self.journal.say(f"chaos: slow_completions not injected: {lock.error}")
                return None
            return ActiveFault(fault.kind, lock.started, time.monotonic() + c.pause_seconds, lock=lock)
        if fault.kind == "pg_restart":
            assert self.server is not None
            started = db_time()
            self.server.stop("fast")
            time.sleep(0.5)
            self.server.start()
            return ActiveFault(fault.kind, started, time.monotonic())
        raise ValueError(fault.kind)

    def _end(self, active: ActiveFault) -> None:
        kind, started = active.kind, active.started
        if kind == "cancel":
            if active.outcome:
                self.journal.record(kind, None, started, started, **active.outcome)
            return
        if kind == "queue_pause":
            ended = self.journal.db_time()
            self._set_paused(False)
            self.journal.record(kind, None, started, ended)
            return
        if kind == "slow_completions" and active.lock is not None:
            active.lock.release()
            ended = active.lock.ended if active.lock.ended is not None else self.journal.db_time()
            self.journal.record(kind, None, started, ended, table="job_history", mode="ACCESS EXCLUSIVE",
                                **({"error": active.lock.error} if active.lock.error else {}))
            return
        pid = active.proc.pid if active.proc is not None else None
        if kind == "sigstop" and active.proc is not None:
            try:
                active.proc.popen.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
        elif kind.startswith("partition") and self.proxy is not None:
            self.proxy.set_mode("pass")
        self.journal.record(kind, pid, started, self.journal.db_time())

    def _set_paused(self, paused: bool) -> None:
        with connect(self.dsn, application_name="tenure-chaos-pause") as conn:
            control.set_paused(conn, QUEUE, paused, schema=self.schema, requested_by="chaos")

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

    def serve_restart_requests(self) -> None:
        """Restart PostgreSQL (``pg_ctl restart -m fast``) for each ``restart_in_gap`` request;
        requests that arrive together share one restart."""
        requests = [p for p in self.control_dir.iterdir()
                    if p.name.startswith("restart-") and not p.name.endswith(".tmp")]
        if not requests or self.server is None:
            return
        jobs = sorted(int(p.read_text() or 0) for p in requests)
        for p in requests:
            p.unlink()
        self.journal.say(f"chaos: pg_restart in the gap of job(s) {jobs}")
        started = self.journal.db_time()
        self.server.restart("fast")
        self.journal.record("pg_restart", None, started, self.journal.db_time(), aimed="gap", job_ids=jobs)
