"""The worker process, as wiring: claims in batches, runs handlers, acknowledges in batches.

The parts, each with its own file and owner (River's producer/executor/completer split):
:class:`~tenure.worker.slots.Slots` owns the shared state (held jobs, futures, abandoned
handler threads, pending acknowledgements, open effects) behind one lock;
:mod:`~tenure.worker.outcomes` decides what a handler's result means;
:class:`~tenure.worker.acker.Acker` writes outcomes in batches;
:class:`~tenure.worker.heartbeat.Heartbeater` renews leases from a snapshot of the slots;
:class:`~tenure.worker.notify.Listener` wakes the claim loop on NOTIFY;
:class:`~tenure.worker.periodic.Scheduler` enqueues the app's periodic schedules (unless
``scheduler`` is off); per-task timeouts are the executor's. This module claims
(the main thread), runs handlers (sync on a thread pool, async on one event-loop thread) and
ties the parts together. A handler whose lease is lost is told at once (``ctx.lease_lost``;
async handlers are also cancelled); its slot is freed, and a sync handler thread that never
returns is abandoned and counted, and the worker reports itself unhealthy when too many are.

On SIGTERM (R8): stop claiming, let in-flight jobs finish within ``drain_timeout``, release the
rest (CAS, no attempt used) and exit 0. On SIGKILL the lease expires and a reaper recovers.
No job is ever written without its token.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

import psycopg
from prometheus_client import CollectorRegistry

from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.errors import ConfigError, first_line
from tenure.core.redaction import Redaction
from tenure.core.repository import PRIORITY_AGING_DEFAULT as PRIORITY_AGING_DEFAULT
from tenure.core.repository import (
    ClaimedJob,
    ClaimStore,
    Connected,
    HistoryStore,
    LeaseStore,
    ReadStore,
    RegistryStore,
    Repository,
    SchemaStore,
)
from tenure.core.service import ServiceConnection
from tenure.core.version import __version__
from tenure.reaper.history import HistoryConfig, HistoryKeeper
from tenure.reaper.reaper import Reaper, ReaperConfig
from tenure.reaper.vacuum import HotTableVacuum, VacuumConfig
from tenure.worker.app import App
from tenure.worker.executor import Executor
from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.notify import Listener, Wakeup
from tenure.worker.outcomes import Outcome
from tenure.worker.periodic import Schedule, Scheduler

log = logging.getLogger("tenure.worker")


class StartStore(Connected, SchemaStore, HistoryStore, RegistryStore, Protocol):
    """What a worker's start uses: the schema check and claim statistics, the history upkeep
    (:class:`~tenure.reaper.history.KeeperStore`), its registration."""


class ClaimLoopStore(Connected, ClaimStore, LeaseStore, ReadStore, Protocol):
    """What the claim loop uses: the claim (lease area), the burst mode's look at the queues
    (reads area), and the connection it was built on (one per connection: the gate hint)."""

CONCURRENCY_DEFAULT = 32
"""Measured (docs/performance.md, issue 13): one process with sync no-op handlers drained 10,000
jobs in 10-11 s at 10, 5.1-5.4 s at 32 and 3.9-4.0 s at 100 (a thread each, up to twice that
while abandoned threads are replaced); 32 takes most of the gain for a third of the threads."""
CLAIM_BATCH_DEFAULT = 100
POLL_INTERVAL_DEFAULT = 1.0
DRAIN_TIMEOUT_DEFAULT = 30.0
REAPER_INTERVAL_DEFAULT = 0.0
MAX_ABANDONED_DEFAULT = 0
CLAIM_COALESCE_SECONDS = 0.002
"""Pause once before claiming fewer than half a batch while handlers run (one statement, many slots)."""
BURST_TAIL_POLL_SECONDS = 0.05
"""A burst worker with nothing left to claim while other workers' jobs still run looks again
this often (instead of every poll interval), so it exits soon after the last one finishes."""
RATE_WAIT_MIN_SECONDS = 0.01
"""Shortest wait before claiming again when a rate limit held a job back (its tokens refill
continuously, so this bounds the claims a short bucket costs)."""
RATE_HOLD_MAX_SECONDS = 0.05
"""After a claim that a rate limit held a job back in, the next claim waits for the bucket's
tokens even when a finished job frees a slot, up to this long: claims a bucket would answer with
nothing or one job cost a statement each, and a long pause must not hold the worker's other queues."""


ASYNC_SETTLE_SECONDS = 5.0
"""Longest wait on shutdown for cancelled async handlers to unwind and hand in their outcome
(one that swallows its cancellation does not hold the exit longer)."""


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker process needs besides its App."""

    queues: tuple[str, ...] = ("default",)
    """Queues to claim from."""
    concurrency: int = CONCURRENCY_DEFAULT
    """Handlers running at once in this process."""
    claim_batch: int = CLAIM_BATCH_DEFAULT
    """Most jobs claimed by one statement."""
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    """Lease, renewal interval and bounded extension."""
    poll_interval: float = POLL_INTERVAL_DEFAULT
    """Seconds between claims when no NOTIFY arrives (delayed jobs, lost notifications)."""
    drain_timeout: float = DRAIN_TIMEOUT_DEFAULT
    """Seconds in-flight jobs get to finish after SIGTERM before they are released."""
    burst: bool = False
    """Exit once the queues have no pending (ready or scheduled) or running jobs."""
    reaper: ReaperConfig | None = None
    """The in-process reaper (grace, batch, backoff, interval); None leaves reaping to `tenure reaper`."""
    max_abandoned: int = MAX_ABANDONED_DEFAULT
    """Sync handler threads that outlived their lease before /healthz fails (0: concurrency)."""
    redaction: Redaction = Redaction()
    """What is masked in dead-lettered payloads and error texts."""
    retry: RetryPolicy | None = None
    """The queue's retry policy (e.g. from a JobQueue spec); tasks' own overrides still win."""
    priority_aging: float = PRIORITY_AGING_DEFAULT
    """Seconds a job may wait ready before it is claimed ahead of every priority (starvation bound)."""
    scheduler: bool = True
    """Run the app's periodic schedules in this process (any number of processes may: each slot
    is enqueued exactly once)."""
    vacuum: VacuumConfig = VacuumConfig()
    """When this process vacuums the jobs table (one worker at a time; reaper/vacuum.py)."""

    def validate(self) -> None:
        if not self.queues:
            raise ConfigError("at least one queue is required")
        if not all(self.queues):
            raise ConfigError("queue names must not be empty")
        if self.concurrency < 1:
            raise ConfigError("concurrency must be >= 1")
        if self.claim_batch < 1:
            raise ConfigError("claim batch must be >= 1")
        if self.poll_interval <= 0:
            raise ConfigError("poll interval must be positive")
        if self.drain_timeout < 0:
            raise ConfigError("drain timeout must be >= 0")
        if self.priority_aging < 0:
            raise ConfigError("priority aging must be >= 0")
        self.heartbeat.validate()
        self.vacuum.validate()
        if self.retry is not None:
            self.retry.validate()
        if self.reaper is None:
            return
        self.reaper.validate()
        if self.reaper.grace < self.heartbeat.interval:
            raise ConfigError(
                f"grace {self.reaper.grace:g}s must cover at least one heartbeat interval "
                f"({self.heartbeat.interval:g}s)")


@dataclass
class WorkerState:
    draining: bool = False
    ready: bool = False
    stop_requested: threading.Event = field(default_factory=threading.Event)


class Worker:
    """One worker process (or an in-process worker in tests)."""

    def __init__(self, app: App, config: WorkerConfig, *, dsn: str, schema: str = "tenure",
                 registry: CollectorRegistry | None = None, worker_id: str | None = None) -> None:
        config.validate()
        self.app, self.config = app, config
        self.dsn, self.schema = dsn, schema
        # A fresh identity per process, never a host or pod name (oban#862, procrastinate#1518).
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.metrics = WorkerMetrics(registry or CollectorRegistry())
        self.state = WorkerState()
        self._wakeup = Wakeup()
        self._stop_signalled = False
        self.executor = Executor(app, dsn=dsn, schema=schema, worker_id=self.worker_id, lease=config.heartbeat.lease,
                                 concurrency=config.concurrency, metrics=self.metrics, retry=config.retry,
                                 redaction=config.redaction, heartbeat_now=lambda: self.heartbeater.beat_now(),
                                 on_done=self._wakeup.set)
        self.slots, self.acker = self.executor.slots, self.executor.acker
        self.acker.on_failure = self.request_stop
        self.heartbeater = Heartbeater(config.heartbeat, dsn=dsn, schema=schema, worker_id=self.worker_id,
                                       slots=self.slots, metrics=self.metrics, on_lost=self.executor.lease_lost)
        self.listener = Listener(dsn=dsn, schema=schema, worker_id=self.worker_id, queues=config.queues,
                                 wakeup=self._wakeup, stop=self.state.stop_requested)

    # -- probes -------------------------------------------------------------------------------
    def healthz(self) -> tuple[bool, str]:
        ok, why = self.heartbeater.healthy()
        if not ok:
            return ok, why
        if self.acker.failure is not None:
            return False, f"the acknowledgement thread failed: {self.acker.failure}"
        limit = self.config.max_abandoned or self.config.concurrency
        if self.slots.abandoned >= limit:
            return False, f"{self.slots.abandoned} handler threads outlived their lease"
        return True, "ok"

    def readyz(self) -> tuple[bool, str]:
        if self.state.draining:
            return False, "draining"
        return (True, "ok") if self.state.ready else (False, "starting")

    # -- lifecycle ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Begin a graceful drain (what SIGTERM does). Async-signal-safe: no locks taken."""
        self._stop_signalled = True
        self._wakeup.set()

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until the queues are empty). Returns processed count."""
        claim = ServiceConnection(self.dsn, f"tenure-claim:{self.worker_id}", stop=self.state.stop_requested, log=log)
        repo: StartStore = Repository(claim.get(), self.schema)
        repo.check_schema()
        if repo.refresh_stale_claim_statistics():
            log.info("analyzed the jobs table: its statistics lagged a bulk enqueue")
        # The day partitions of job_history this worker's completions go to (reaper/history.py;
        # best effort: logged and ignored without the CREATE privilege; moving pre-0009 rows is
        # the reaper's job).
        HistoryKeeper(HistoryConfig(move_batch=0)).run_once(repo)
        cfg = self.config
        repo.worker_register(self.worker_id, host=socket.gethostname(), pid=os.getpid(), queues=list(cfg.queues),
                             concurrency=cfg.concurrency, heartbeat_seconds=cfg.heartbeat.interval,
                             version=__version__, lease_seconds=cfg.heartbeat.lease)
        log.info("worker %s serving %s (concurrency %d, lease %gs, heartbeat %gs)", self.worker_id,
                 ",".join(cfg.queues), cfg.concurrency, cfg.heartbeat.lease, cfg.heartbeat.interval,
                 extra={"worker_id": self.worker_id})
        self.heartbeater.start()
        self.acker.start()
        self.listener.start()
        reaper_stop = threading.Event()
        if self.app.schedules and cfg.scheduler:
            scheduler = Scheduler(self.app.schedules, dsn=self.dsn, schema=self.schema,
                                  on_enqueue=self._periodic_enqueued)
            threading.Thread(target=scheduler.run_forever, args=(reaper_stop,), name="tenure-scheduler",
                             daemon=True).start()
        if cfg.vacuum.enabled:
            vacuum = HotTableVacuum(cfg.vacuum, dsn=self.dsn, schema=self.schema,
                                    name=f"tenure-vacuum:{self.worker_id}")
            threading.Thread(target=vacuum.run_forever, args=(reaper_stop,), name="tenure-vacuum", daemon=True).start()
        if cfg.reaper is not None:
            reaper = Reaper(cfg.reaper, dsn=self.dsn, schema=self.schema, reaper_id=f"reaper-{self.worker_id}")
            threading.Thread(target=reaper.run_forever, args=(reaper_stop,), name="tenure-reaper", daemon=True).start()
        self.state.ready = True
        try:
            self._claim_loop(claim)
            self._drain()
        finally:
            reaper_stop.set()
            self.state.ready = False
            self.state.stop_requested.set()
            self.acker.stop()
            self.listener.stop_and_join(timeout=30)
            self.heartbeater.stop()
            try:
                with connect(self.dsn, application_name=f"tenure-stop:{self.worker_id}") as conn:
                    Repository(conn, self.schema).worker_stop(self.worker_id)
            except psycopg.Error as exc:
                log.warning("could not deregister: %s", first_line(exc))
            claim.close()
            self.executor.shutdown()
            self._wakeup.close()
        return self.slots.processed

    # -- claiming -----------------------------------------------------------------------------
    def _claim_loop(self, claim: ServiceConnection) -> None:
        cfg = self.config
        coalesce_below = min(cfg.claim_batch, cfg.concurrency) // 2
        coalesced = False
        rate_hold_until = 0.0
        repo: ClaimLoopStore | None = None
        while not self._stop_signalled:
            # Clear before looking: a wake-up that lands after this line is kept for the wait.
            self._wakeup.clear()
            free = self.slots.free()
            claimed: list[ClaimedJob] = []
            want = min(free, cfg.claim_batch)
            if 0 < want < coalesce_below and free < cfg.concurrency and not coalesced:
                # Only a few slots are free while others run: wait a moment once, so one claim
                # statement fills many slots instead of one statement per finished job.
                coalesced = True
                time.sleep(CLAIM_COALESCE_SECONDS)
                continue
            coalesced = False
            held = rate_hold_until - time.monotonic()
            if want > 0 and held > 0:
                time.sleep(held)  # at most RATE_HOLD_MAX_SECONDS
                continue
            wait = cfg.poll_interval
            try:
                conn = claim.get()
                if repo is None or repo.conn is not conn:
                    repo = Repository(conn, self.schema)  # one per connection: it keeps the claim's gate hint
                if want > 0:
                    claimed = repo.claim(self.worker_id, cfg.queues, want, cfg.heartbeat.lease,
                                         aging=cfg.priority_aging)
                    self.executor.dispatch(claimed)
                    if len(claimed) == want:
                        continue
                    if repo.rate_wait is not None:
                        # A rate limit held a job back: look again when its bucket has the tokens.
                        wait = min(wait, max(repo.rate_wait, RATE_WAIT_MIN_SECONDS))
                        rate_hold_until = time.monotonic() + min(wait, RATE_HOLD_MAX_SECONDS)
                if cfg.burst and not claimed and not self.slots.busy():
                    pending, running = repo.queue_work(cfg.queues)
                    if not pending and not running:
                        break
                    if not pending:
                        # Only other workers' jobs are left: their completions send no NOTIFY,
                        # so look again soon instead of a poll interval later.
                        wait = min(wait, BURST_TAIL_POLL_SECONDS)
            except psycopg.Error as exc:
                # Never crash-loop on a database hiccup: reconnect and carry on. Jobs a lost
                # claim may have taken are recovered by lease expiry.
                log.warning("claim loop: %s", first_line(exc))
                claim.reset()
                self.metrics.db_reconnects.labels("claim").inc()
                time.sleep(min(cfg.poll_interval, 1.0))
                continue
            self._wakeup.wait(wait)
        self.state.stop_requested.set()
        log.info("stop requested: draining (up to %gs)", cfg.drain_timeout)

    def _periodic_enqueued(self, schedule: Schedule, slot: object, job_id: int, skipped: int) -> None:
        """Called by the scheduler for each slot this process enqueued (and the ones it skipped)."""
        self.metrics.periodic_enqueued.labels(schedule.queue, schedule.name).inc()
        if skipped:
            self.metrics.periodic_skipped.labels(schedule.queue, schedule.name).inc(skipped)

    # -- draining -----------------------------------------------------------------------------
    def _drain(self) -> None:
        self.state.draining = True
        self.slots.wait_idle(time.monotonic() + self.config.drain_timeout)
        leftovers = self.slots.take_all()
        for ctx in leftovers:
            # Release first, then tell the handler: its own late write will be rejected.
            self.acker.put(Outcome(ctx, "release", event="released", reason="shutdown: drain timeout"))
            ctx.signal_lease_lost("worker shutting down: job released", counted=False)
        # An async handler cancelled on a lost lease freed its slot at once but writes its
        # outcome only when its task has unwound: let those finish before the acker stops.
        self.executor.wait_async_settled(time.monotonic() + ASYNC_SETTLE_SECONDS)
        self.slots.wait_acked(time.monotonic() + 30)
        if leftovers:
            log.warning("released %d unfinished job(s) on shutdown", len(leftovers))
