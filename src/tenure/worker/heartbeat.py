"""The heartbeat service: one statement per interval renews every lease this worker holds (R3).

Runs on its own thread and connection, so a handler that blocks (even an ``async`` one that
blocks the event loop) does not stop renewals. Renewal is bounded by ``max_lease_total`` (R4):
a hung handler cannot keep its job forever. Rows it failed to renew are leases lost; their
handlers are told at once. No per-job statements, no retries inside ``run_once``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from tenure.core.db import connect
from tenure.core.errors import ConfigError
from tenure.core.repository import Repository
from tenure.worker.context import JobContext
from tenure.worker.metrics import WorkerMetrics

log = logging.getLogger("tenure.heartbeat")

LEASE_DEFAULT = 30.0
HEARTBEAT_DEFAULT = 5.0
MAX_LEASE_TOTAL_DEFAULT = 3600.0
MAX_EFFECT_HOLD_DEFAULT = 7200.0
MIN_LEASE_TO_HEARTBEAT_RATIO = 3.0


@dataclass(frozen=True)
class HeartbeatConfig:
    """Lease and renewal timing (R4, R21)."""

    lease: float = LEASE_DEFAULT
    """Seconds each claim or renewal grants, judged by the database clock."""
    interval: float = HEARTBEAT_DEFAULT
    """Seconds between renewals; at most lease/3 so one or two late beats never lose a lease."""
    max_lease_total: float = MAX_LEASE_TOTAL_DEFAULT
    """Seconds an attempt may hold its job in total, however often it renews (bounded extension)."""
    max_effect_hold: float = MAX_EFFECT_HOLD_DEFAULT
    """Seconds an effect body may keep its idempotency key while its worker lives, even after the
    job's lease is lost; a redelivery meanwhile is deferred rather than running the effect twice."""

    def validate(self) -> None:
        if self.lease <= 0 or self.interval <= 0:
            raise ConfigError("lease and heartbeat interval must be positive")
        if self.interval * MIN_LEASE_TO_HEARTBEAT_RATIO > self.lease + 1e-9:
            raise ConfigError(
                f"heartbeat interval {self.interval:g}s must be at most lease/3 "
                f"({self.lease / MIN_LEASE_TO_HEARTBEAT_RATIO:g}s for a {self.lease:g}s lease)")
        if self.max_lease_total < self.lease:
            raise ConfigError(f"max total lease {self.max_lease_total:g}s is below the lease {self.lease:g}s")
        if self.max_effect_hold < self.lease:
            raise ConfigError(f"max effect hold {self.max_effect_hold:g}s is below the lease {self.lease:g}s")


class Heartbeater:
    """Renews the leases in ``held`` (job id -> context), a dict owned by the worker."""

    def __init__(self, config: HeartbeatConfig, *, dsn: str, schema: str, worker_id: str,
                 held: dict[int, JobContext], metrics: WorkerMetrics | None,
                 on_lost: Callable[[JobContext, str], None],
                 effects: dict[uuid.UUID, JobContext] | None = None) -> None:
        config.validate()
        self.config = config
        self.dsn, self.schema, self.worker_id = dsn, schema, worker_id
        self.held = held
        self.effects = effects if effects is not None else {}
        self.metrics = metrics
        self.on_lost = on_lost
        self.last_success = time.monotonic()
        self._conn: psycopg.Connection[dict[str, object]] | None = None
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _repo(self) -> Repository:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn, application_name=f"tenure-heartbeat:{self.worker_id}")
        return Repository(self._conn, self.schema)

    def run_once(self) -> int:
        """One renewal of every held lease; returns how many were lost. Raises on DB errors."""
        with self._lock:
            snapshot = dict(self.held)
            sent_at = time.monotonic()
            try:
                outcomes = self._repo().heartbeat(
                    self.worker_id, [(jid, ctx.lock_token) for jid, ctx in snapshot.items()],
                    self.config.lease, self.config.max_lease_total, list(self.effects.copy()),
                    self.config.max_effect_hold)
            except psycopg.Error:
                if self._conn is not None:
                    self._conn.close()
                raise
            rtt = time.monotonic() - sent_at
            if self.metrics:
                self.metrics.heartbeat_rtt.observe(rtt)
                self.metrics.heartbeat_timestamp.set_to_current_time()
            self.last_success = time.monotonic()
            lost = 0
            for outcome in outcomes:
                ctx = snapshot.get(outcome.id)
                if ctx is None:
                    continue
                labels = (ctx.job.queue, ctx.job.task)
                if outcome.outcome == "renewed":
                    # The DB granted `remaining` seconds from its own now(); counting them from our
                    # send time is a safe lower bound, whatever the clocks say.
                    ctx.lease_deadline = sent_at + (outcome.remaining_seconds or 0.0)
                    if self.metrics:
                        self.metrics.lease_extensions.labels(*labels).inc()
                    continue
                if self.held.get(outcome.id) is not ctx:
                    continue  # finished while we were renewing: not a loss
                lost += 1
                reason = {"max_lease_reached": "maximum total lease reached",
                          "cancelled": "job cancelled: token revoked"}.get(outcome.outcome, "token no longer current")
                self._repo().record_stale_write(outcome.id, ctx.lock_token, self.worker_id, "heartbeat", reason)
                if self.metrics:
                    self.metrics.leases_lost.labels(*labels).inc()
                    if outcome.outcome == "cancelled":
                        self.metrics.cancelled_running.labels(*labels).inc()
                    if outcome.outcome in ("lost", "cancelled"):
                        self.metrics.stale_writes.labels(*labels, "heartbeat").inc()
                self.on_lost(ctx, reason)
            return lost

    def beat_now(self) -> None:
        """A manual heartbeat from a handler (``ctx.heartbeat()``); synchronous."""
        try:
            self.run_once()
        except psycopg.Error as exc:
            log.warning("manual heartbeat failed: %s", exc)

    def healthy(self) -> tuple[bool, str]:
        """Liveness: the loop succeeded within three intervals."""
        silent = time.monotonic() - self.last_success
        if silent > 3 * self.config.interval + 1:
            return False, f"heartbeat loop silent for {silent:.1f}s"
        return True, "ok"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tenure-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._conn is not None:
            self._conn.close()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.run_once()
                failures = 0
            except psycopg.Error as exc:
                failures += 1
                log.warning("heartbeat failed (%d in a row): %s", failures, str(exc).splitlines()[0] if str(exc) else exc)
            self._stop.wait(self.config.interval if failures == 0 else min(self.config.interval, 1.0))
