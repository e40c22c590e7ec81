"""The processes under test: real ``tenure worker`` and ``tenure reaper`` processes of a chaos run.

:class:`Fleet` spawns them (``reapers`` reapers, ``workers`` workers running
``tenure.chaos.tasks:app``), watches them and replaces one that dies at once (a Deployment would),
restarts a worker gracefully once it holds too many hung handlers (a liveness probe would), and shuts
them all down at the end: SIGCONT and SIGTERM, then SIGKILL after 15 s. Every exit is journaled.

Limits: one host; a process's environment is the harness's own plus what ``extra_env`` adds per slot.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from tenure.chaos import QUEUE, WF_QUEUE
from tenure.chaos.config import POLL_INTERVAL, ChaosConfig
from tenure.chaos.journal import Journal
from tenure.chaos.store import ChaosStore

Role = Literal["worker", "reaper"]
HUNG_PER_WORKER_LIMIT = 2
"""Hung handlers past recovery after which a worker is restarted."""
SHUTDOWN_TIMEOUT = 15.0
"""Seconds the processes get to exit on SIGTERM before SIGKILL."""
HARNESS_ONLY_ENV = ("TENURE_LOG_JSON", "LD_PRELOAD", "FAKETIME", "TENURE_CHAOS_CLOCK_OFFSET",
                    "TENURE_CHAOS_CONTROL_DIR")
"""Variables of the harness's own environment a process under test never inherits."""

ExtraEnv = Callable[[int | None], dict[str, str]]
"""Variables added to a worker's environment by slot (None: a reaper's)."""


@dataclass
class Proc:
    """One process under test."""

    role: Role
    slot: int
    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    stopping: bool = False
    """Asked to stop by the harness (recycled): its exit is not a fault."""

    @property
    def pid(self) -> int:
        return self.popen.pid


def _no_extra_env(slot: int | None) -> dict[str, str]:
    return {}


class Fleet:
    """Spawns, watches, recycles and shuts down the run's worker and reaper processes."""

    def __init__(self, config: ChaosConfig, journal: Journal, *, dsn: str, schema: str,
                 log_dir: Path | None = None, extra_env: ExtraEnv = _no_extra_env) -> None:
        self.config = config
        self.journal = journal
        self.dsn = dsn
        self.schema = schema
        self.log_dir = log_dir
        self.extra_env = extra_env
        self.procs: list[Proc] = []
        self.closed = False
        """Set by :meth:`shutdown`: an exit is no longer replaced."""
        self._hung: dict[int, list[float]] = {}
        self._faults_seen = 0

    # -- spawning ---------------------------------------------------------------------------
    def start(self) -> None:
        """Every reaper, then every worker."""
        for i in range(self.config.reapers):
            self.spawn("reaper", i)
        for i in range(self.config.workers):
            self.spawn("worker", i)

    def env(self, slot: int | None) -> dict[str, str]:
        """The environment of the worker in ``slot`` (None: of a reaper)."""
        env = {**os.environ, "TENURE_DATABASE_URL": self.dsn, "TENURE_SCHEMA": self.schema,
               "PYTHONUNBUFFERED": "1"}
        for key in HARNESS_ONLY_ENV:
            env.pop(key, None)
        env.update(self.extra_env(slot))
        return env

    def _command(self, role: Role) -> list[str]:
        c = self.config
        if role == "worker":
            args = ["worker", "--app", "tenure.chaos.tasks:app", "--queue", QUEUE, "--queue", WF_QUEUE,
                    "--concurrency", str(c.concurrency), "--lease", str(c.lease), "--heartbeat", str(c.heartbeat),
                    "--grace", str(c.grace), "--max-lease-total", str(c.max_lease_total),
                    "--poll-interval", str(POLL_INTERVAL), "--drain-timeout", "2"]
        else:
            args = ["reaper", "--interval", str(c.reaper_interval), "--grace", str(c.grace),
                    "--heartbeat", str(c.heartbeat),
                    "--backoff-base", "0.2", "--backoff-max", "1", "--batch", "200",
                    "--max-lease-expiries", str(c.max_lease_expiries)]
        return [sys.executable, "-m", "tenure.cli", *args]

    def _log_file(self, name: str) -> IO[bytes] | int:
        if self.log_dir is None:
            return subprocess.DEVNULL
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")

    def spawn(self, role: Role, slot: int) -> Proc:
        """Start one process; its output goes to ``<log_dir>/<role>-<slot>.log`` when logging."""
        env = self.env(slot if role == "worker" else None)
        out = self._log_file(f"{role}-{slot}")
        try:
            popen = subprocess.Popen(self._command(role), env=env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        finally:
            if not isinstance(out, int):
                out.close()
        proc = Proc(role, slot, popen)
        self.procs.append(proc)
        return proc

    # -- watching ---------------------------------------------------------------------------
    def live(self, role: Role) -> list[Proc]:
        """Running processes of ``role`` the harness has not asked to stop."""
        return [p for p in self.procs if p.role == role and p.popen.poll() is None and not p.stopping]

    def watch(self) -> None:
        """Journal every exit; replace the process unless the fleet is shutting down."""
        for proc in list(self.procs):
            code = proc.popen.poll()
            if code is None:
                continue
            self.procs.remove(proc)
            kind = "worker_recycled" if proc.stopping else "process_exit"
            self.journal.record(kind, proc.pid, self.journal.db_time(), role=proc.role, slot=proc.slot,
                                exit_code=code)
            if not self.closed:
                self.spawn(proc.role, proc.slot)

    def recycle_hung(self, store: ChaosStore) -> None:
        """A worker holding HUNG_PER_WORKER_LIMIT hung handlers, each past the point where bounded
        extension let the reaper recover its job, is restarted (a liveness probe would)."""
        faults = store.faults()
        for f in faults[self._faults_seen:]:
            if f["kind"] == "hang" and f["pid"] is not None:
                self._hung.setdefault(int(f["pid"]), []).append(float(f["started_at"]))
        self._faults_seen = len(faults)
        c = self.config
        settled = self.journal.db_time() - (c.max_lease_total + c.grace + 2 * c.reaper_interval + c.recovery_margin)
        for proc in self.live("worker"):
            if sum(1 for t in self._hung.get(proc.pid, []) if t < settled) >= HUNG_PER_WORKER_LIMIT:
                proc.stopping = True
                proc.popen.send_signal(signal.SIGTERM)

    # -- the end ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop every process: SIGCONT (a stopped one must see the TERM), SIGTERM, SIGKILL after the timeout."""
        self.closed = True
        for proc in self.procs:
            if proc.popen.poll() is None:
                try:
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=10)

