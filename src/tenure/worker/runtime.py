"""The worker process: claims in batches, runs handlers, acknowledges in batches.

Threads, each with its own connection: the claim loop (main), a LISTEN thread that wakes it,
the heartbeat service, an acknowledgement thread that writes completions in one statement per
batch, and optionally an in-process reaper. Sync handlers run on a thread pool; async handlers
on one event-loop thread. A handler whose lease is lost is told at once (``ctx.lease_lost``;
async handlers are also cancelled); its slot is freed, and a sync handler thread that never
returns is abandoned and counted, and the worker reports itself unhealthy when too many are.

On SIGTERM (R8): stop claiming, let in-flight jobs finish within ``drain_timeout``, release the
rest (CAS, no attempt used) and exit 0. On SIGKILL the lease expires and a reaper recovers.
No job is ever written without its token.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import random
import select
import socket
import threading
import time
import traceback
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

from tenure.core.backoff import RetryPolicy, full_jitter_delay
from tenure.core.db import Connection, connect
from tenure.core.errors import (AmbiguousError, ConfigError, JobFailure, LeaseLost, PermanentError,
                                TaskTimeout, classify_exception)
from tenure.core.redaction import Redaction
from tenure.core.queries import notify_channel
from tenure.core.repository import PRIORITY_AGING_DEFAULT as PRIORITY_AGING_DEFAULT
from tenure.core.repository import ClaimedJob, Repository
from tenure.core.version import __version__
from tenure.reaper.reaper import Reaper, ReaperConfig
from tenure.worker.app import App, Task
from tenure.worker.context import EffectDeferred, JobContext
from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
from tenure.worker.periodic import Schedule, Scheduler
from tenure.worker.timeouts import Deadlines
from tenure.worker.metrics import WorkerMetrics

log = logging.getLogger("tenure.worker")

CONCURRENCY_DEFAULT = 10
CLAIM_BATCH_DEFAULT = 100
POLL_INTERVAL_DEFAULT = 1.0
DRAIN_TIMEOUT_DEFAULT = 30.0
REAPER_INTERVAL_DEFAULT = 0.0
MAX_ABANDONED_DEFAULT = 0
RECONNECT_MAX_DEFAULT = 5.0
CLAIM_COALESCE_SECONDS = 0.002
"""Pause once before claiming fewer than half a batch while handlers run (one statement, many slots)."""


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
        if self.retry is not None:
            self.retry.validate()
        if self.reaper is None:
            return
        self.reaper.validate()
        if self.reaper.grace < self.heartbeat.interval:
            raise ConfigError(
                f"grace {self.reaper.grace:g}s must cover at least one heartbeat interval "
                f"({self.heartbeat.interval:g}s)")


@dataclass(frozen=True)
class _TaskMetrics:
    """Metric children of one (queue, task), cached by :meth:`Worker._tm`."""

    claimed: Any
    completed: Any
    wait: Any
    attempts: Any
    in_flight: Any
    claim_to_start: Any
    runtime: Any


@dataclass
class _Outcome:
    ctx: JobContext
    kind: str  # complete | retry | dead | release | drop
    delay: float = 0.0
    error: str = ""
    error_code: str = ""
    event: str = "released"
    reason: str = ""


class Wakeup:
    """A self-pipe: ``set()`` takes no lock, so signal handlers and any thread may call it while
    the claim loop waits (threading.Event.set from a signal handler can deadlock the main thread)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._pending = False

    def set(self) -> None:
        # Skip the syscall while a wake-up is already pending (a drain finishes thousands of
        # jobs a second, each calling set); a plain bool store keeps this signal-safe.
        if self._pending:
            return
        self._pending = True
        try:
            os.write(self._w, b"x")
        except BlockingIOError:
            pass  # already pending

    def wait(self, timeout: float) -> None:
        readable, _, _ = select.select([self._r], [], [], timeout)
        if readable:
            self._pending = True  # a byte is there (even one written after a racing clear): drain it next

    def clear(self) -> None:
        if not self._pending:
            return
        self._pending = False
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        if self._pending:
            # A set() raced with the drain above and its byte may be gone: re-arm it.
            try:
                os.write(self._w, b"x")
            except BlockingIOError:
                pass

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


@dataclass
class WorkerState:
    in_flight: int = 0
    abandoned: int = 0
    draining: bool = False
    ready: bool = False
    processed: int = 0
    stop_requested: threading.Event = field(default_factory=threading.Event)


class Worker:
    """One worker process (or an in-process worker in tests)."""

    def __init__(self, app: App, config: WorkerConfig, *, dsn: str, schema: str = "tenure",
                 registry: CollectorRegistry | None = None, worker_id: str | None = None) -> None:
        config.validate()
        self.app = app
        self.config = config
        self.dsn, self.schema = dsn, schema
        # A fresh identity per process, never a host or pod name (oban#862, procrastinate#1518).
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.metrics = WorkerMetrics(registry or CollectorRegistry())
        self.state = WorkerState()
        self.held: dict[int, JobContext] = {}
        self.open_effects: dict[uuid.UUID, JobContext] = {}
        self._lock = threading.Lock()
        self._wakeup = Wakeup()
        self._stop_signalled = False
        self._idle = threading.Condition(self._lock)
        self._acks: queue.SimpleQueue[_Outcome | None] = queue.SimpleQueue()
        self._pending_acks = 0
        self._futures: dict[int, Future[Any]] = {}
        self._task_metrics: dict[tuple[str, str], _TaskMetrics] = {}
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency * 2 + 1, thread_name_prefix="tenure-job")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handler_conns: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._rng = random.Random()
        self.heartbeater = Heartbeater(config.heartbeat, dsn=dsn, schema=schema, worker_id=self.worker_id,
                                       held=self.held, metrics=self.metrics, on_lost=self._lease_lost,
                                       effects=self.open_effects)
        self._threads: list[threading.Thread] = []
        self._abandoned_ids: set[int] = set()
        self._deadlines = Deadlines(self._timed_out)

    # -- probes -------------------------------------------------------------------------------
    def healthz(self) -> tuple[bool, str]:
        ok, why = self.heartbeater.healthy()
        if not ok:
            return ok, why
        limit = self.config.max_abandoned or self.config.concurrency
        if self.state.abandoned >= limit:
            return False, f"{self.state.abandoned} handler threads outlived their lease"
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
        claim_conn = self._connect_retrying("claim")
        repo = Repository(claim_conn, self.schema)
        repo.check_schema()
        repo.worker_register(self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                             queues=list(self.config.queues), concurrency=self.config.concurrency,
                             heartbeat_seconds=self.config.heartbeat.interval, version=__version__,
                             lease_seconds=self.config.heartbeat.lease)
        log.info("worker %s serving %s (concurrency %d, lease %gs, heartbeat %gs)", self.worker_id,
                 ",".join(self.config.queues), self.config.concurrency, self.config.heartbeat.lease,
                 self.config.heartbeat.interval, extra={"worker_id": self.worker_id})
        self.heartbeater.start()
        self._start_thread(self._ack_loop, "tenure-ack")
        self._start_thread(self._listen_loop, "tenure-listen")
        if any(t.is_async for t in self.app.tasks.values()):
            self._start_async_loop()
        reaper_stop = threading.Event()
        if self.app.schedules and self.config.scheduler:
            scheduler = Scheduler(self.app.schedules, dsn=self.dsn, schema=self.schema,
                                  on_enqueue=self._periodic_enqueued)
            self._start_thread(lambda: scheduler.run_forever(reaper_stop), "tenure-scheduler")
        if self.config.reaper is not None:
            reaper = Reaper(self.config.reaper, dsn=self.dsn, schema=self.schema, reaper_id=f"reaper-{self.worker_id}")
            self._start_thread(lambda: reaper.run_forever(reaper_stop), "tenure-reaper")
        self.state.ready = True
        try:
            repo = self._claim_loop(claim_conn, repo)
            self._drain(repo)
        finally:
            reaper_stop.set()
            self._deadlines.stop()
            self.state.ready = False
            self._acks.put(None)
            for t in self._threads:
                if t.name in ("tenure-ack", "tenure-listen"):
                    t.join(timeout=30)
            self.heartbeater.stop()
            try:
                with connect(self.dsn, application_name=f"tenure-stop:{self.worker_id}") as conn:
                    Repository(conn, self.schema).worker_stop(self.worker_id)
            except psycopg.Error as exc:
                log.warning("could not deregister: %s", exc)
            repo.conn.close()
            claim_conn.close()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                for t in self._threads:
                    if t.name == "tenure-asyncio":
                        t.join(timeout=5)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._wakeup.close()
            while not self._handler_conns.empty():
                self._handler_conns.get().close()
        return self.state.processed

    def _start_thread(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_async_loop(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            ready.set()
            try:
                loop.run_forever()
            finally:
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()

        self._start_thread(run, "tenure-asyncio")
        ready.wait()

    def _connect_retrying(self, role: str) -> Connection:
        delay = 0.2
        while True:
            try:
                return connect(self.dsn, application_name=f"tenure-{role}:{self.worker_id}")
            except psycopg.OperationalError as exc:
                if self.state.stop_requested.is_set() and role != "ack":
                    raise
                log.warning("%s connection failed, retrying in %.1fs: %s", role, delay,
                            str(exc).splitlines()[0] if str(exc) else exc)
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_DEFAULT)

    # -- claiming -----------------------------------------------------------------------------
    def _claim_loop(self, conn: Connection, repo: Repository) -> Repository:
        cfg = self.config
        coalesce_below = min(cfg.claim_batch, cfg.concurrency) // 2
        coalesced = False
        while not self._stop_signalled:
            # Clear before looking: a wake-up that lands after this line is kept for the wait.
            self._wakeup.clear()
            with self._lock:
                free = cfg.concurrency - self.state.in_flight
            claimed: list[ClaimedJob] = []
            want = min(free, cfg.claim_batch)
            if 0 < want < coalesce_below and free < cfg.concurrency and not coalesced:
                # Only a few slots are free while others run: wait a moment once, so one claim
                # statement fills many slots instead of one statement per finished job.
                coalesced = True
                time.sleep(CLAIM_COALESCE_SECONDS)
                continue
            coalesced = False
            try:
                if want > 0:
                    claimed = repo.claim(self.worker_id, cfg.queues, want, cfg.heartbeat.lease,
                                         aging=cfg.priority_aging)
                    spawn = [a for job in claimed if (a := self._dispatch(job)) is not None]
                    if spawn:
                        self._spawn_async(spawn)
                    if len(claimed) == want:
                        continue
                if cfg.burst and not claimed and self._burst_done(repo):
                    break
            except psycopg.Error as exc:
                # Never crash-loop on a database hiccup: reconnect and carry on. Jobs a lost
                # claim may have taken are recovered by lease expiry.
                log.warning("claim loop: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                conn.close()
                time.sleep(min(cfg.poll_interval, 1.0))
                conn = self._connect_retrying("claim")
                repo = Repository(conn, self.schema)
                continue
            self._wakeup.wait(cfg.poll_interval)
        self.state.stop_requested.set()
        log.info("stop requested: draining (up to %gs)", cfg.drain_timeout)
        return repo

    def _burst_done(self, repo: Repository) -> bool:
        with self._lock:
            if self.state.in_flight > 0 or self._pending_acks > 0:
                return False
        stats = repo.queue_stats(completed=False)
        return not any(s.ready or s.running or s.scheduled for s in stats if s.queue in self.config.queues)

    def _dispatch(self, job: ClaimedJob) -> tuple[Task, JobContext] | None:
        """Register a claimed job and start a sync handler; an async one is returned for
        :meth:`_spawn_async`, which starts a whole claim batch with one cross-thread call."""
        ctx = JobContext(job=job, worker_id=self.worker_id, lease_seconds=self.config.heartbeat.lease,
                         _repo=self._borrow_repo, _on_stale=self._count_stale,
                         _heartbeat_now=self.heartbeater.beat_now)
        labels = (job.queue, job.task)
        ctx._dedup_hook = lambda hit: self._count_dedup(labels, "effect", hit)
        ctx._effect_hook = self._effect_open_close
        tm = self._tm(labels)
        tm.claimed.inc()
        tm.wait.observe(job.wait_seconds)
        tm.attempts.observe(job.attempt)
        with self._lock:
            self.state.in_flight += 1
            self.held[job.id] = ctx
        tm.in_flight.inc()
        task = self.app.get(job.task)
        if task is not None and task.timeout is not None:
            self._deadlines.add(ctx, task.timeout)
        if task is not None and task.is_async and self._loop is not None:
            return task, ctx
        self._futures[job.id] = self._pool.submit(self._run_sync, task, ctx)
        return None

    def _spawn_async(self, batch: list[tuple[Task, JobContext]]) -> None:
        loop = self._loop
        assert loop is not None

        def spawn() -> None:
            for task, ctx in batch:
                handle = loop.create_task(self._run_async(task, ctx))

                def cancel(handle: asyncio.Task[None] = handle) -> None:
                    loop.call_soon_threadsafe(handle.cancel)

                ctx._on_lost.append(cancel)
                if ctx.lease_lost.is_set():
                    handle.cancel()

        loop.call_soon_threadsafe(spawn)

    def _tm(self, labels: tuple[str, str]) -> _TaskMetrics:
        """The per-(queue, task) metric children, resolved once: ``labels()`` costs a lock and a
        dict build per call, and the hot path makes several per job."""
        tm = self._task_metrics.get(labels)
        if tm is None:
            m = self.metrics
            tm = _TaskMetrics(m.claimed.labels(*labels), m.completed.labels(*labels), m.wait.labels(*labels),
                              m.attempts.labels(*labels), m.in_flight.labels(*labels),
                              m.claim_to_start.labels(*labels), m.runtime.labels(*labels))
            self._task_metrics[labels] = tm
        return tm

    # -- running handlers ---------------------------------------------------------------------
    def _preflight(self, task: Task | None, ctx: JobContext) -> _Outcome | None:
        job = ctx.job
        if task is None:
            return _Outcome(ctx, "dead", error=f"unknown task {job.task!r}: no handler registered in this app",
                            error_code="unknown_task")
        why = task.check_payload(job.payload)
        if why is not None:
            return _Outcome(ctx, "dead", error=f"invalid payload for {job.task!r}: {why}", error_code="invalid_payload")
        return None

    def _run_sync(self, task: Task | None, ctx: JobContext) -> None:
        started = time.monotonic()
        outcome = self._preflight(task, ctx)
        if outcome is None:
            assert task is not None
            self._tm((ctx.job.queue, ctx.job.task)).claim_to_start.observe(started - ctx.claimed_at)
            try:
                task.fn(ctx)
                outcome = _Outcome(ctx, "complete")
            except BaseException as exc:  # noqa: BLE001 - the worker must survive any handler
                outcome = self._on_error(task, ctx, exc)
        self._finish(ctx, outcome, started)

    async def _run_async(self, task: Task, ctx: JobContext) -> None:
        started = time.monotonic()
        outcome = self._preflight(task, ctx)
        if outcome is None:
            self._tm((ctx.job.queue, ctx.job.task)).claim_to_start.observe(started - ctx.claimed_at)
            try:
                await task.fn(ctx)
                outcome = _Outcome(ctx, "complete")
            except asyncio.CancelledError:
                outcome = _Outcome(ctx, "drop", reason="cancelled: lease lost")
            except BaseException as exc:  # noqa: BLE001
                outcome = self._on_error(task, ctx, exc)
        self._finish(ctx, outcome, started)

    def _on_error(self, task: Task, ctx: JobContext, exc: BaseException) -> _Outcome:
        job = ctx.job
        if isinstance(exc, EffectDeferred):
            return _Outcome(ctx, "release", delay=exc.delay, event="deferred", reason=str(exc))
        if isinstance(exc, LeaseLost) or ctx.lease_lost.is_set():
            # Not ours any more: writing would be rejected; the reaper or the new owner decides.
            return _Outcome(ctx, "drop", reason=f"lease lost: {exc}")
        failure: JobFailure = classify_exception(exc, task.error_mappers) if isinstance(exc, Exception) \
            else PermanentError(f"{type(exc).__name__}", code="interrupted")
        text = self.config.redaction.error_text(
            f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc)[-3:])}")
        code = failure.code
        self.metrics.failed.labels(job.queue, job.task, code).inc()
        if isinstance(failure, AmbiguousError) and not ctx.used_effect:
            return _Outcome(ctx, "dead", error=text, error_code="ambiguous_unguarded")
        if isinstance(failure, PermanentError):
            return _Outcome(ctx, "dead", error=text, error_code=code)
        policy = task.retry_policy(self.config.retry)
        if job.attempt >= min(job.max_attempts, policy.max_attempts):
            return _Outcome(ctx, "dead", error=f"attempts exhausted ({job.attempt}): {text}", error_code=code)
        retry_after = getattr(failure, "retry_after", None)
        delay = retry_after if retry_after is not None else full_jitter_delay(job.attempt, policy, self._rng)
        return _Outcome(ctx, "retry", delay=delay, error=text, error_code=code)

    def _finish(self, ctx: JobContext, outcome: _Outcome, started: float) -> None:
        labels = (ctx.job.queue, ctx.job.task)
        tm = self._tm(labels)
        tm.runtime.observe(time.monotonic() - started)
        with self._lock:
            if self.held.get(ctx.job.id) is ctx:
                del self.held[ctx.job.id]
                self.state.in_flight -= 1
                tm.in_flight.dec()
            # else: the slot was already freed when its lease was lost
            self._futures.pop(ctx.job.id, None)
            self._abandoned_ids.discard(ctx.job.id)
            self.state.abandoned = len(self._abandoned_ids)
            self._pending_acks += 1
            self._idle.notify_all()
        self._acks.put(outcome)
        self._wakeup.set()

    def _periodic_enqueued(self, schedule: Schedule, slot: object, job_id: int, skipped: int) -> None:
        self.metrics.periodic_enqueued.labels(schedule.queue, schedule.name).inc()
        if skipped:
            self.metrics.periodic_skipped.labels(schedule.queue, schedule.name).inc(skipped)

    def _timed_out(self, ctx: JobContext, seconds: float) -> None:
        """Called by the deadline thread: free the slot as for a lost lease, write a retry
        classified ``task_timeout`` (CAS on the token), then tell the handler (async: cancelled)."""
        task = self.app.get(ctx.job.task)
        labels = (ctx.job.queue, ctx.job.task)
        with self._lock:
            if self.held.get(ctx.job.id) is not ctx or task is None:
                return  # finished (or lost its lease) first
            del self.held[ctx.job.id]
            self.state.in_flight -= 1
            self.metrics.in_flight.labels(*labels).dec()
            fut = self._futures.get(ctx.job.id)
            if fut is not None and not fut.done() and not task.is_async:
                self._abandoned_ids.add(ctx.job.id)
                self.state.abandoned = len(self._abandoned_ids)
            self._pending_acks += 1
            self._idle.notify_all()
        self.metrics.timeouts.labels(*labels).inc()
        log.warning("attempt exceeded its %gs timeout", seconds, extra=ctx.log_extra)
        outcome = self._on_error(task, ctx, TaskTimeout(f"attempt exceeded its {seconds:g}s timeout"))
        self._acks.put(outcome)
        ctx.signal_lease_lost(f"task timeout after {seconds:g}s")
        self._wakeup.set()

    def _lease_lost(self, ctx: JobContext, reason: str) -> None:
        """Called by the heartbeat: tell the handler, free the slot so the worker keeps serving."""
        ctx.signal_lease_lost(reason)
        labels = (ctx.job.queue, ctx.job.task)
        with self._lock:
            if self.held.get(ctx.job.id) is ctx:
                del self.held[ctx.job.id]
                self.state.in_flight -= 1
                self.metrics.in_flight.labels(*labels).dec()
                fut = self._futures.get(ctx.job.id)
                task = self.app.get(ctx.job.task)
                if fut is not None and not fut.done() and not (task and task.is_async):
                    self._abandoned_ids.add(ctx.job.id)
                    self.state.abandoned = len(self._abandoned_ids)
                self._idle.notify_all()
        self._wakeup.set()

    # -- acknowledgements ---------------------------------------------------------------------
    def _ack_loop(self) -> None:
        conn: Connection | None = None
        stop = False
        while not stop:
            first = self._acks.get()
            batch: list[_Outcome] = []
            if first is None:
                stop = True
            else:
                batch.append(first)
            while True:
                try:
                    item = self._acks.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            while batch:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = self._connect_retrying("ack")
                    self._write_outcomes(Repository(conn, self.schema), batch)
                    batch = []
                except psycopg.OperationalError as exc:
                    log.warning("acknowledgement failed, retrying: %s", str(exc).splitlines()[0] if str(exc) else exc)
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.5)
                except psycopg.Error as exc:
                    # A row the database refuses must not block the others: write one by one,
                    # and give up on the one that fails (its lease expires; the reaper recovers it).
                    log.warning("acknowledgement batch refused, writing one by one: %s", exc)
                    for outcome in batch:
                        self._ack_single(conn, outcome)
                    batch = []
        if conn is not None:
            conn.close()

    def _ack_single(self, conn: Connection | None, outcome: _Outcome) -> None:
        try:
            assert conn is not None
            self._write_outcomes(Repository(conn, self.schema), [outcome])
        except psycopg.Error as exc:
            log.error("could not record the outcome (%s) of job %s; its lease will expire: %s",
                      outcome.kind, outcome.ctx.job.id, exc, extra=outcome.ctx.log_extra)
            with self._lock:
                self._pending_acks -= 1
                self._idle.notify_all()

    def _write_outcomes(self, repo: Repository, batch: list[_Outcome]) -> None:
        completes = [o for o in batch if o.kind == "complete"]
        if completes:
            accepted = repo.complete_many(self.worker_id, [(o.ctx.job.id, o.ctx.lock_token) for o in completes])
            for o in completes:
                labels = (o.ctx.job.queue, o.ctx.job.task)
                if accepted.get(o.ctx.job.id):
                    self._tm(labels).completed.inc()
                else:
                    self.metrics.stale_writes.labels(*labels, "complete").inc()
                    log.warning("completion rejected: lease had moved", extra=o.ctx.log_extra)
        for o in batch:
            job, labels = o.ctx.job, (o.ctx.job.queue, o.ctx.job.task)
            ok = True
            if o.kind == "retry":
                ok = repo.retry(self.worker_id, job.id, job.lock_token, delay=o.delay, error=o.error,
                                error_code=o.error_code)
                if ok:
                    self.metrics.retried.labels(*labels, o.error_code).inc()
            elif o.kind == "dead":
                ok = repo.dead_letter(self.worker_id, job.id, job.lock_token, error=o.error,
                                      error_code=o.error_code,
                                      sanitised_payload=self.config.redaction.payload(job.payload))
                if ok:
                    self.metrics.dead_lettered.labels(*labels, o.error_code).inc()
                    log.error("dead-lettered (%s): %s", o.error_code, o.error.splitlines()[0] if o.error else "",
                              extra={**o.ctx.log_extra, "error_code": o.error_code})
            elif o.kind == "release":
                ok = repo.release(self.worker_id, job.id, job.lock_token, delay=o.delay, event=o.event,
                                  reason=o.reason)
                if ok:
                    self.metrics.released.labels(*labels).inc()
            if not ok:
                self.metrics.stale_writes.labels(*labels, o.kind).inc()
        with self._lock:
            self._pending_acks -= len(batch)
            self.state.processed += len(batch)
            self._idle.notify_all()

    def _effect_open_close(self, ctx: JobContext, opened: bool) -> None:
        if opened:
            self.open_effects[ctx.lock_token] = ctx
        else:
            self.open_effects.pop(ctx.lock_token, None)

    def _count_stale(self, ctx: JobContext, operation: str) -> None:
        self.metrics.stale_writes.labels(ctx.job.queue, ctx.job.task, operation).inc()

    def _count_dedup(self, labels: tuple[str, str], source: str, hit: bool) -> None:
        self.metrics.dedup_checks.labels(*labels, source).inc()
        if hit:
            self.metrics.dedup_hits.labels(*labels, source).inc()

    def _borrow_repo(self) -> Any:
        worker = self

        class _Lease:
            def __enter__(self) -> Repository:
                try:
                    self.conn = worker._handler_conns.get_nowait()
                except queue.Empty:
                    self.conn = connect(worker.dsn, application_name=f"tenure-handler:{worker.worker_id}")
                return Repository(self.conn, worker.schema)

            def __exit__(self, *exc: object) -> None:
                if self.conn.closed or self.conn.broken:
                    return
                worker._handler_conns.put(self.conn)

        return _Lease()

    # -- LISTEN -------------------------------------------------------------------------------
    def _listen_loop(self) -> None:
        channel = notify_channel(self.schema)
        while not self.state.stop_requested.is_set():
            try:
                with connect(self.dsn, application_name=f"tenure-listen:{self.worker_id}") as conn:
                    conn.execute(f'LISTEN "{channel}"')
                    self._wakeup.set()
                    while not self.state.stop_requested.is_set():
                        for note in conn.notifies(timeout=0.2):
                            if note.payload in self.config.queues:
                                self._wakeup.set()
            except psycopg.Error as exc:
                log.debug("listen connection lost: %s", exc)
                self.state.stop_requested.wait(1.0)

    # -- draining -----------------------------------------------------------------------------
    def _drain(self, repo: Repository) -> None:
        self.state.draining = True
        deadline = time.monotonic() + self.config.drain_timeout
        with self._lock:
            while self.state.in_flight > 0 and time.monotonic() < deadline:
                self._idle.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            leftovers = list(self.held.values())
            for ctx in leftovers:
                del self.held[ctx.job.id]
                self.state.in_flight -= 1
                self.metrics.in_flight.labels(ctx.job.queue, ctx.job.task).dec()
                self._pending_acks += 1
        for ctx in leftovers:
            # Release first, then tell the handler: its own late write will be rejected.
            self._acks.put(_Outcome(ctx, "release", event="released", reason="shutdown: drain timeout"))
            ctx.signal_lease_lost("worker shutting down: job released")
        with self._lock:
            end = time.monotonic() + 30
            while self._pending_acks > 0 and time.monotonic() < end:
                self._idle.wait(timeout=0.2)
        if leftovers:
            log.warning("released %d unfinished job(s) on shutdown", len(leftovers))
