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
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from tenure.core.errors import ConfigError, first_line
from tenure.core.repository import HeartbeatOutcome, LeaseStore, Repository
from tenure.core.service import ServiceConnection, run_service
from tenure.worker.context import JobContext
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.slots import Slots

log = logging.getLogger("tenure.heartbeat")

LEASE_DEFAULT = 30.0
HEARTBEAT_DEFAULT = 5.0
MAX_LEASE_TOTAL_DEFAULT = 3600.0
MAX_EFFECT_HOLD_DEFAULT = 7200.0
MIN_LEASE_TO_HEARTBEAT_RATIO = 3.0
LOSS_REASONS = {"max_lease_reached": "maximum total lease reached", "cancelled": "job cancelled: token revoked"}
"""What the handler is told (``ctx.lease_lost``) and the audit records, per heartbeat outcome."""
LOSS_REASON_DEFAULT = "token no longer current"


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
    """Renews the leases of the jobs ``slots`` holds; reads them as a snapshot, never the live state."""

    def __init__(self, config: HeartbeatConfig, *, dsn: str, schema: str, worker_id: str, slots: Slots,
                 metrics: WorkerMetrics | None, on_lost: Callable[..., None]) -> None:
        config.validate()
        self.config = config
        self.schema, self.worker_id = schema, worker_id
        self.slots = slots
        self.metrics = metrics
        self.on_lost = on_lost
        self.last_success = time.monotonic()
        self._stop = threading.Event()
        self._conn = ServiceConnection(dsn, f"tenure-heartbeat:{worker_id}", stop=self._stop, log=log)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._unconfirmed: dict[int, JobContext] = {}
        """Leases lost locally (deadline passed) whose database verdict is still to be recorded."""

    def _repo(self) -> LeaseStore:
        return Repository(self._conn.get(retry=False), self.schema)

    def run_once(self) -> int:
        """One renewal of every held lease; returns how many were lost. Raises on DB errors.

        Finished jobs whose outcome is not yet written are renewed too (their slots stay taken
        until it is), so a slow acknowledgement never lets the reaper re-run them; their leases
        are never judged lost here, since no handler is left to tell."""
        with self._lock:
            taken = self.slots.snapshot()
            snapshot, effects, finished = taken.held, taken.effects, taken.finished
            sent_at = time.monotonic()
            overdue = {jid for jid, held in snapshot.items() if sent_at >= held.lease_deadline}
            for jid in overdue:
                self._unconfirmed[jid] = snapshot[jid]
                # Not renewed in time (a freeze, an unreachable database): the lease may have
                # moved, so it is lost as far as this worker knows, whatever the database says.
                # It still goes into the statement, so a real loss is recorded as evidence.
                held = snapshot[jid]
                self.on_lost(held, held.deadline_reason(), local=True)  # counts the loss once
            lost = len(overdue)
            # Locally lost leases ride along until the database answers (a restart may fail
            # several beats), so a real loss is recorded as heartbeat_lost evidence.
            for jid, held in self._unconfirmed.items():
                snapshot.setdefault(jid, held)
            overdue = set(self._unconfirmed)
            beat = {**finished, **snapshot}  # a running attempt wins over a finished one of the same id
            try:
                outcomes = self._repo().heartbeat(
                    self.worker_id, [(jid, ctx.lock_token) for jid, ctx in beat.items()],
                    self.config.lease, self.config.max_lease_total, list(effects),
                    self.config.max_effect_hold, abandoned=self.slots.abandoned)
            except Exception:
                self._conn.reset()
                raise
            rtt = time.monotonic() - sent_at
            key_deadline = sent_at + self.config.lease
            for holder in effects.values():
                holder.effect_deadline = max(holder.effect_deadline, key_deadline)
            if self.metrics:
                self.metrics.heartbeat_rtt.observe(rtt)
                self.metrics.heartbeat_timestamp.set_to_current_time()
            self.last_success = time.monotonic()
            for outcome in outcomes:
                ctx = beat.get(outcome.id)
                if ctx is None:
                    continue
                if outcome.id in overdue:
                    self._unconfirmed.pop(outcome.id, None)
                    if outcome.outcome not in ("renewed", "busy"):  # already told; the database confirms: record it
                        self._record_loss(ctx, outcome.outcome)
                    continue  # a renewal of a lease already given up changes nothing here
                if outcome.outcome == "renewed":
                    self._renewed(ctx, outcome, sent_at)
                    continue
                if outcome.outcome == "busy" or outcome.id not in snapshot or not self.slots.holds(ctx):
                    # Locked by another transaction (this worker's own completion, most likely):
                    # its deadline stands. Or finished while we were renewing: not a loss (the
                    # outcome's own write is refused and recorded if the lease really moved).
                    continue
                lost += 1
                self._record_loss(ctx, outcome.outcome)
                self.on_lost(ctx, LOSS_REASONS.get(outcome.outcome, LOSS_REASON_DEFAULT))
            return lost

    def _renewed(self, ctx: JobContext, outcome: HeartbeatOutcome, sent_at: float) -> None:
        # The DB granted `remaining` seconds from its own now(); counting them from our send
        # time is a safe lower bound, whatever the clocks say.
        remaining = outcome.remaining_seconds or 0.0
        ctx.lease_deadline = sent_at + remaining
        # now() is fixed within the statement: less than a full lease means the cap.
        ctx.lease_capped = remaining < self.config.lease - 1e-6
        if self.metrics:
            self.metrics.lease_extensions.labels(ctx.job.queue, ctx.job.task).inc()

    def _record_loss(self, ctx: JobContext, verdict: str) -> None:
        """The database's verdict on a lease this worker no longer holds: audited as
        ``heartbeat_lost`` and counted (tenure_leases_lost_total is counted by on_lost, once per
        attempt)."""
        why = LOSS_REASONS.get(verdict, LOSS_REASON_DEFAULT)
        self._repo().record_stale_write(ctx.job.id, ctx.lock_token, self.worker_id, "heartbeat", why,
                                        queue=ctx.job.queue)
        if self.metrics:
            labels = (ctx.job.queue, ctx.job.task)
            if verdict == "cancelled":
                self.metrics.cancelled_running.labels(*labels).inc()
            if verdict in ("lost", "cancelled"):
                self.metrics.stale_writes.labels(*labels, "heartbeat").inc()

    def beat_now(self) -> None:
        """A manual heartbeat from a handler (``ctx.heartbeat()``); synchronous."""
        try:
            self.run_once()
        except psycopg.Error as exc:
            log.warning("manual heartbeat failed: %s", first_line(exc))

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
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._conn.close()

    def _loop(self) -> None:
        retry = min(self.config.interval, 1.0)
        metrics = self.metrics
        run_service("heartbeat", self._step, stop=self._stop, conn=self._conn, log=log,
                    error_pause=retry, max_error_pause=retry,
                    on_error=(lambda: metrics.db_reconnects.labels("heartbeat").inc()) if metrics else None)

    def _step(self, conn: ServiceConnection) -> float:
        self.run_once()
        return max(0.0, min(self.config.interval, self._until_next_deadline()))

    def _until_next_deadline(self) -> float:
        """Seconds until the earliest local lease deadline (so lease loss is signalled, and async
        handlers cancelled, at the deadline even while renewals fail)."""
        taken, now = self.slots.snapshot(), time.monotonic()
        # A finished job's deadline counts while it is ahead (one already past, its renewal
        # refused or skipped, must not make the loop spin; the interval renews it again).
        deadlines = [ctx.lease_deadline for ctx in taken.held.values()]
        deadlines += [ctx.lease_deadline for ctx in taken.finished.values() if ctx.lease_deadline > now]
        return (min(deadlines) - now + 0.001) if deadlines else float("inf")
