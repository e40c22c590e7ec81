"""The reaper service (R7): recovers jobs whose lease expired more than ``grace`` ago.

Conservative: it only looks at ``status='running' AND lease_expires_at < now() - wait`` by the
database clock, where ``wait`` is the owner's heartbeat interval from the worker registry
(``heartbeat``, the floor, for an owner the registry does not know) plus the grace, at most
``batch`` rows a cycle, and each change is a compare-and-set on the token it read, so it can
never undo a completion or touch a job that was reclaimed or renewed meanwhile
(riverqueue/river#1302). Owners the registry still sees alive get ``alive_owner_grace`` extra seconds (a slow database rather than a dead worker). A job's first lease expiry is
requeued at once (and the queue notified), so a dead worker's job re-runs within
:func:`recovery_bound`; only repeated expiries of the same job wait a full-jitter backoff (a job
that keeps killing its workers must not crash-loop them). When attempts or lease expiries are
exhausted the job is dead-lettered with ``lease_expired``.
Several reapers may run at once (SKIP LOCKED). Recovery never depends on the worker row
surviving (procrastinate#1518): a missing owner counts as dead.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenure.core import tracing
from tenure.core.backoff import RetryPolicy, full_jitter_delay
from tenure.core.db import connect
from tenure.core.errors import ConfigError
from tenure.core.repository import ReapCandidate, ReapDecision, Reaped, ReapingStore, Repository
from tenure.core.service import ServiceConnection, run_service
from tenure.reaper.depth import DepthSampler, SamplerStore
from tenure.reaper.history import HistoryKeeper, KeeperStore

log = logging.getLogger("tenure.reaper")


class CycleStore(ReapingStore, KeeperStore, SamplerStore, Protocol):
    """What one reaper cycle uses: the reaping area, then the history upkeep's (:class:`KeeperStore`)
    and the queue depth sample's (:class:`SamplerStore`)."""

GRACE_DEFAULT = 10.0
BATCH_DEFAULT = 500
INTERVAL_DEFAULT = 5.0
ALIVE_OWNER_GRACE_DEFAULT = 0.0
MAX_LEASE_EXPIRIES_DEFAULT = 3


@dataclass(frozen=True)
class ReaperConfig:
    """Reaper policy."""

    grace: float = GRACE_DEFAULT
    """Seconds past lease expiry before a job counts as abandoned (covers heartbeat delay and skew)."""
    batch: int = BATCH_DEFAULT
    """Most jobs recovered per cycle, so a mass expiry cannot become a retry storm."""
    interval: float = INTERVAL_DEFAULT
    """Seconds between cycles when looping."""
    alive_owner_grace: float = ALIVE_OWNER_GRACE_DEFAULT
    """Extra seconds granted when the registry still sees the owner alive."""
    max_lease_expiries: int = MAX_LEASE_EXPIRIES_DEFAULT
    """Lease expiries after which the job is dead-lettered with ``lease_expired``."""
    retry: RetryPolicy = RetryPolicy()
    """Backoff for requeues after a job's second and later lease expiries (the first requeues
    at once); the same full-jitter function as handler retries, on the expiry count."""
    heartbeat: float | None = None
    """The floor for jobs whose owner is not in the registry (`tenure reaper --heartbeat`, default
    the workers' default): such a job waits this long plus ``grace`` past expiry, as a registered
    owner's job waits its owner's registered heartbeat interval plus ``grace``. None: ``grace``
    alone."""

    def validate(self) -> None:
        if self.grace < 0:
            raise ConfigError("reaper grace must be >= 0")
        if self.heartbeat is not None:
            if self.heartbeat <= 0:
                raise ConfigError("reaper heartbeat must be positive")
        if self.batch < 1:
            raise ConfigError("reaper batch must be >= 1")
        if self.interval <= 0:
            raise ConfigError("reaper interval must be positive")
        if self.alive_owner_grace < 0:
            raise ConfigError("alive-owner grace must be >= 0")
        if self.max_lease_expiries < 1:
            raise ConfigError("max lease expiries must be >= 1")
        self.retry.validate()


def recovery_bound(*, lease: float, heartbeat: float, grace: float, interval: float, poll_interval: float,
                   alive_owner_grace: float = 0.0) -> float:
    """Worst case, in seconds, from a worker's death to its job's re-run starting, for a job
    whose lease expires for the first time and a free worker.

    The lease runs out at most ``lease`` after the last heartbeat (which came no later than the
    death), the reaper acts on it after the owner's ``heartbeat`` interval plus ``grace`` (plus
    ``alive_owner_grace`` while the registry
    still sees the dead owner alive) within one ``interval``, requeues it with no delay and
    notifies the queue; a worker picks it up at once on the notification, or at its next poll
    (``poll_interval``) if the notification is lost. Not included: the reaper's own statement
    time and the claim statement (milliseconds on a healthy database).
    """
    return lease + heartbeat + grace + alive_owner_grace + interval + poll_interval


class Reaper:
    """Runs reaper cycles against one database schema."""

    def __init__(self, config: ReaperConfig, *, dsn: str, schema: str,
                 reaper_id: str | None = None, rng: random.Random | None = None) -> None:
        config.validate()
        self.config = config
        self.dsn, self.schema = dsn, schema
        self.reaper_id = reaper_id or f"reaper-{uuid.uuid4().hex[:12]}"
        self.rng = rng or random.Random()
        self.cycles = 0
        self.reaped_total = 0
        self.last_cycle_seconds = 0.0
        self.history = HistoryKeeper()
        """Partitions of job_history and the move of pre-0009 completed rows (reaper/history.py)."""
        self.depth = DepthSampler()
        """Each queue's depth once a minute, for the job browser's chart (reaper/depth.py)."""

    def decide(self, cand: ReapCandidate) -> ReapDecision | None:
        """Requeue (at once for a first expiry, else with backoff), dead-letter, or (None) leave
        it for a later cycle."""
        if (cand.owner_status == "alive"
                and cand.expired_for_seconds < max(self.config.grace, cand.wait_seconds) + self.config.alive_owner_grace):
            return None
        exhausted = (cand.attempt_count >= cand.max_attempts
                     or cand.lease_expiry_count + 1 >= self.config.max_lease_expiries)
        if exhausted:
            return ReapDecision(dead=True, delay=0.0)
        if cand.lease_expiry_count == 0:
            return ReapDecision(dead=False, delay=0.0)
        return ReapDecision(dead=False, delay=full_jitter_delay(cand.lease_expiry_count, self.config.retry, self.rng))

    def run_once(self, repo: CycleStore | None = None) -> list[Reaped]:
        """One cycle; returns the jobs it recovered (each with an audit event)."""
        started = time.monotonic()
        if repo is None:
            with connect(self.dsn, application_name=f"tenure-reaper:{self.reaper_id}") as conn:
                reaped = self._cycle(Repository(conn, self.schema), started)
        else:
            reaped = self._cycle(repo, started)
        self.cycles += 1
        self.reaped_total += len(reaped)
        # One summary line per cycle (the per-job audit trail is in job_events); per-job lines
        # at DEBUG, so a mass expiry cannot flood the logs.
        if reaped:
            dead = sum(1 for job in reaped if job.dead)
            log.warning("reaped %d job(s) with expired leases: %d requeued, %d dead-lettered (ids %s%s)",
                        len(reaped), len(reaped) - dead, dead, ",".join(str(j.id) for j in reaped[:10]),
                        "…" if len(reaped) > 10 else "", extra={"event": "reaped"})
        for job in reaped:
            log.debug("reaped job %s: %s", job.id, "dead-lettered (lease_expired)" if job.dead else "requeued",
                      extra={"job_id": job.id, "queue": job.queue, "event": "reaped"})
        self.last_cycle_seconds = time.monotonic() - started
        return reaped

    def _cycle(self, repo: CycleStore, started: float) -> list[Reaped]:
        """Reap, then count the cycle in ``reaper_cycles`` (the exporter's reaper figures: a
        CronJob pod has no metrics port of its own)."""
        reaped = repo.reap(self.reaper_id, grace=self.config.grace, batch=self.config.batch,
                           decide=self.decide, floor=self.config.heartbeat or 0.0)
        repo.record_reaper_cycle(self.reaper_id, seconds=time.monotonic() - started,
                                 reaped=len(reaped))
        self.history.run_once(repo)
        self.depth.run_once(repo)
        for job in reaped:  # a short span in each traced job's trace (a no-op without traces)
            if job.trace_context:
                tracing.record_outside(
                    "tenure.reap", queue=job.queue, job_id=job.id, trace_context=job.trace_context,
                    attempt_trace=None, attributes={"tenure.attempt": job.attempt, "tenure.fencing_token": job.fence,
                                                    "tenure.reap.dead_lettered": job.dead,
                                                    "tenure.reap.owner_status": job.owner_status})
        return reaped

    def run_forever(self, stop: threading.Event,
                    on_cycle: Callable[[list[Reaped], float], None] | None = None,
                    on_reconnect: Callable[[], None] | None = None) -> None:
        """Loop until ``stop`` is set; database errors are logged and retried next cycle.
        ``on_cycle(reaped, seconds)`` is called after each successful cycle (metrics), and
        ``on_reconnect()`` after each error that drops the connection (the next cycle re-opens it;
        the CLI counts it in ``tenure_db_reconnects_total{role="reaper"}``)."""
        def step(conn: ServiceConnection) -> float:
            started = time.monotonic()
            reaped = self.run_once(Repository(conn.get(retry=False), self.schema))
            if on_cycle is not None:
                on_cycle(reaped, self.last_cycle_seconds)
            # A fixed cadence: a slow cycle does not stretch the recovery bound by its own length.
            return max(0.0, self.config.interval - (time.monotonic() - started))

        run_service("reaper cycle", step, stop=stop, log=log, error_pause=self.config.interval,
                    max_error_pause=self.config.interval, on_error=on_reconnect,
                    conn=ServiceConnection(self.dsn, f"tenure-reaper:{self.reaper_id}", stop=stop, log=log))
