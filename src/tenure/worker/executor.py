"""The executor (River's executor): runs claimed jobs' handlers and hands their outcomes on.

Sync handlers run on a thread pool, async ones on one event-loop thread (a claim batch starts
with one cross-thread call). Each job takes a slot in :class:`~tenure.worker.slots.Slots`
before it starts and frees it when it ends (or when its lease is lost: the handler is told,
an async one cancelled, and a sync thread that never returns is counted as abandoned). The
verdict comes from :mod:`~tenure.worker.outcomes`; the :class:`~tenure.worker.acker.Acker`
writes it. Handlers borrow pooled connections for checkpoints and effects.

A task's ``timeout`` (issue 14) is timed by :class:`~tenure.worker.timeouts.Deadlines` from
dispatch: when it passes first, the slot is freed exactly as for a lost lease (a sync thread
that keeps running is abandoned and counted), a retry classified ``task_timeout`` is written
with the attempt's token, and the handler is told (an async one is cancelled).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tenure.core import tracing
from tenure.core.backoff import RetryPolicy
from tenure.core.db import Connection, connect
from tenure.core.errors import TaskTimeout
from tenure.core.redaction import Redaction
from tenure.core.repository import ClaimedJob, Repository
from tenure.worker import outcomes
from tenure.worker.acker import Acker
from tenure.worker.app import App, Task
from tenure.worker.context import AttemptStore, JobContext
from tenure.worker.metrics import WorkerMetrics, observe_many
from tenure.worker.outcomes import Outcome
from tenure.worker.recheck import OutcomeRecheck, RecheckConfig
from tenure.worker.slots import Slots
from tenure.worker.timeouts import Deadlines

log = logging.getLogger("tenure.worker")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The async handlers' loop: uvloop's when it is installed (a dependency on Linux and macOS:
    fewer microseconds per task and per cross-thread call than asyncio's default loop), else
    asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@dataclass(frozen=True)
class _TaskMetrics:
    """Metric children of one (queue, task), resolved once (``labels()`` costs a lock and a dict)."""

    claimed: Any
    completed: Any
    wait: Any
    attempts: Any
    claim_to_start: Any
    runtime: Any


class Executor:
    """Runs handlers for the jobs the claim loop dispatches."""

    def __init__(self, app: App, *, dsn: str, schema: str, worker_id: str, lease: float, concurrency: int,
                 metrics: WorkerMetrics, retry: RetryPolicy | None, redaction: Redaction,
                 heartbeat_now: Callable[[], None], on_done: Callable[[], None],
                 recheck: RecheckConfig = RecheckConfig()) -> None:
        self.app, self.dsn, self.schema, self.worker_id, self.lease = app, dsn, schema, worker_id, lease
        self.metrics, self.retry, self.redaction = metrics, retry, redaction
        self._on_done = on_done
        self._task_metrics: dict[tuple[str, str], _TaskMetrics] = {}
        self.slots = Slots(concurrency, on_acked=on_done)
        metrics.outcomes_unwritten.set_function(lambda: self.slots.unwritten)
        self.recheck = OutcomeRecheck(recheck, worker_id=worker_id, counter=metrics.outcomes_in_doubt)
        self.acker = Acker(dsn=dsn, schema=schema, worker_id=worker_id, slots=self.slots, metrics=metrics,
                           completed=lambda labels: self._tm(labels).completed,
                           runtime=lambda labels: self._tm(labels).runtime, redaction=redaction,
                           recheck=self.recheck)
        self._pool = ThreadPoolExecutor(max_workers=concurrency * 2 + 1, thread_name_prefix="tenure-job")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._handler_conns: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._rng = random.Random()
        self._deadlines = Deadlines(self._timed_out)
        self._context = JobContext.maker(worker_id=worker_id, lease_seconds=lease, _repo=self._borrow_repo,
                                         _on_stale=self._count_stale, _heartbeat_now=heartbeat_now,
                                         _on_lease_lost=self._count_lease_lost,
                                         _dedup_hook=self._count_effect_dedup,
                                         _effect_hook=self.slots.effect_changed,
                                         _on_effect_recorded=self._effect_recorded)
        if any(t.is_async for t in app.tasks.values()):
            self._start_async_loop()

    def _start_async_loop(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = new_event_loop()
            asyncio.set_event_loop(loop)
            ready.set()
            try:
                loop.run_forever()
            finally:
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()

        self._loop_thread = threading.Thread(target=run, name="tenure-asyncio", daemon=True)
        self._loop_thread.start()
        ready.wait()

    def dispatch(self, claimed: list[ClaimedJob]) -> None:
        """Start the handlers of a claim batch: every job takes its slot first (one lock for the
        batch), claim metrics are counted once per (queue, task) of the batch, then sync handlers
        go to the pool and async ones start with one cross-thread call (:meth:`_spawn_async`)."""
        if not claimed:
            return
        claimed_at, context = time.monotonic(), self._context
        ctxs = [context(job, claimed_at) for job in claimed]
        self.slots.take_many(ctxs)
        by_labels: dict[tuple[str, str], list[ClaimedJob]] = {}
        spawn: list[tuple[Task, JobContext]] = []
        for ctx in ctxs:
            job = ctx.job
            labels = (job.queue, job.task)
            jobs = by_labels.get(labels)
            if jobs is None:
                by_labels[labels] = [job]
            else:
                jobs.append(job)
            task = self.app.get(job.task)
            if task is not None and task.timeout is not None:
                self._deadlines.add(ctx, task.timeout)
            if task is not None and task.is_async and self._loop is not None:
                spawn.append((task, ctx))
            else:
                self.slots.attach(ctx, self._pool.submit(self._run_sync, task, ctx))
        for labels, jobs in by_labels.items():  # one locked update per series of the batch
            tm = self._tm(labels)
            tm.claimed.inc(len(jobs))
            observe_many(tm.wait, [j.wait_seconds for j in jobs])
            observe_many(tm.attempts, [j.attempt for j in jobs])
        if spawn:
            self._spawn_async(spawn)

    def _spawn_async(self, batch: list[tuple[Task, JobContext]]) -> None:
        loop = self._loop
        assert loop is not None

        def spawn() -> None:
            for task, ctx in batch:
                handle = loop.create_task(self._run_async(task, ctx))

                ctx._on_lost.append(functools.partial(loop.call_soon_threadsafe, handle.cancel))
                if ctx.lease_lost.is_set():
                    handle.cancel()

        loop.call_soon_threadsafe(spawn)

    def _tm(self, labels: tuple[str, str]) -> _TaskMetrics:
        tm = self._task_metrics.get(labels)
        if tm is None:
            m = self.metrics
            m.prime_task(*labels)
            # In flight: read from the slots when scraped, not counted up and down per job.
            m.in_flight.labels(*labels).set_function(functools.partial(self.slots.held_count, *labels))
            tm = _TaskMetrics(m.claimed.labels(*labels), m.completed.labels(*labels), m.wait.labels(*labels),
                              m.attempts.labels(*labels), m.claim_to_start.labels(*labels),
                              m.runtime.labels(*labels))
            self._task_metrics[labels] = tm
        return tm

    # -- running handlers ---------------------------------------------------------------------
    def _run_sync(self, task: Task | None, ctx: JobContext) -> None:
        started = time.monotonic()
        self._trace(ctx)
        failure: BaseException | None = None
        outcome = outcomes.preflight(task, ctx)
        if outcome is None:
            assert task is not None
            self._tm((ctx.job.queue, ctx.job.task)).claim_to_start.observe(started - ctx.claimed_at)
            try:
                task.fn(ctx)
                outcome = Outcome(ctx, "complete")
            except BaseException as exc:  # noqa: BLE001 - the worker must survive any handler
                outcome, failure = self._on_error(task, ctx, exc), exc
        self._finish(ctx, outcome, started, failure)

    async def _run_async(self, task: Task, ctx: JobContext) -> None:
        started = time.monotonic()
        self._trace(ctx)
        failure: BaseException | None = None
        outcome = outcomes.preflight(task, ctx)
        if outcome is None:
            self._tm((ctx.job.queue, ctx.job.task)).claim_to_start.observe(started - ctx.claimed_at)
            try:
                await task.fn(ctx)
                outcome = Outcome(ctx, "complete")
            except asyncio.CancelledError:
                outcome = outcomes.lost(task, ctx, "cancelled: lease lost", queue_policy=self.retry)
            except BaseException as exc:  # noqa: BLE001
                outcome, failure = self._on_error(task, ctx, exc), exc
        self._finish(ctx, outcome, started, failure)

    def _trace(self, ctx: JobContext) -> None:
        """Start the attempt's CONSUMER span and make it current for the handler (a no-op
        without opentelemetry-api); :meth:`_finish` ends it in the same thread or task."""
        if tracing.enabled():
            job = ctx.job
            ctx.trace = tracing.start_attempt(queue=job.queue, task=job.task, job_id=job.id, attempt=job.attempt,
                                              fence=job.fence, trace_context=job.trace_context,
                                              worker_id=self.worker_id)
            ctx.trace.activate()

    def _on_error(self, task: Task, ctx: JobContext, exc: BaseException) -> Outcome:
        outcome = outcomes.on_error(task, ctx, exc, queue_policy=self.retry, redaction=self.redaction,
                                    rng=self._rng)
        if outcome.failure_code:
            self.metrics.failed.labels(ctx.job.queue, ctx.job.task, outcome.failure_code).inc()
        return outcome

    def _finish(self, ctx: JobContext, outcome: Outcome, started: float, failure: BaseException | None = None) -> None:
        outcome.runtime = time.monotonic() - started  # observed by the acker, a batch at a time
        ctx.trace.finish(outcome.kind, failure)
        self.slots.finish(ctx)
        self.acker.put(outcome)
        self._on_done()

    def lease_lost(self, ctx: JobContext, reason: str, *, local: bool = False) -> None:
        """Called by the heartbeat: tell the handler, free the slot so the worker keeps serving."""
        ctx.signal_lease_lost(reason, local=local)
        task = self.app.get(ctx.job.task)
        if self.slots.lose(ctx, is_async=bool(task and task.is_async)):
            self._on_done()

    def _timed_out(self, ctx: JobContext, seconds: float) -> None:
        """Called by the deadline thread: free the slot as for a lost lease, write a retry
        classified ``task_timeout`` (CAS on the token), then tell the handler (async: cancelled).
        Nothing happens when the attempt already finished or lost its lease."""
        task = self.app.get(ctx.job.task)
        if task is None or not self.slots.lose(ctx, is_async=task.is_async, owe_ack=True):
            return
        self.metrics.timeouts.labels(ctx.job.queue, ctx.job.task).inc()
        log.warning("attempt exceeded its %gs timeout", seconds, extra=ctx.log_extra)
        self.acker.put(self._on_error(task, ctx, TaskTimeout(f"attempt exceeded its {seconds:g}s timeout")))
        ctx.signal_lease_lost(f"task timeout after {seconds:g}s", counted=False)  # counted as a timeout, not a lost lease
        self._on_done()

    # -- what handlers borrow -----------------------------------------------------------------
    def _count_lease_lost(self, ctx: JobContext) -> None:
        self.metrics.leases_lost.labels(ctx.job.queue, ctx.job.task).inc()

    def _count_stale(self, ctx: JobContext, operation: str) -> None:
        self.metrics.stale_writes.labels(ctx.job.queue, ctx.job.task, operation).inc()

    def _count_effect_dedup(self, ctx: JobContext, hit: bool) -> None:
        labels = (ctx.job.queue, ctx.job.task, "effect")
        self.metrics.dedup_checks.labels(*labels).inc()
        if hit:
            self.metrics.dedup_hits.labels(*labels).inc()

    def _effect_recorded(self, ctx: JobContext, key: str) -> None:
        """An effect's success was acknowledged: remember it for the re-check after a reconnect."""
        self.recheck.effect_succeeded(key, ctx.job.id, ctx.lock_token)

    def _borrow_repo(self, fresh: bool = False) -> _Borrowed:
        return _Borrowed(self, fresh)

    def wait_async_settled(self, deadline: float) -> None:
        """Until every handler task on the event loop has finished, or the monotonic
        ``deadline``. No-op without async handlers."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return

        async def settle() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            if tasks:
                await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))

        future = asyncio.run_coroutine_threadsafe(settle(), loop)
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        except TimeoutError:
            future.cancel()

    def shutdown(self) -> None:
        self._deadlines.stop()
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        while not self._handler_conns.empty():
            self._handler_conns.get().close()


class _Borrowed:
    """A handler's connection for checkpoints and effects, from the worker's pool; ``fresh``
    opens a new one (after a lost connection the pooled ones are suspect too)."""

    def __init__(self, worker: Executor, fresh: bool) -> None:
        self.worker, self.fresh = worker, fresh
        self.conn: Connection | None = None

    def __enter__(self) -> AttemptStore:
        w = self.worker
        try:
            if self.fresh:
                raise queue.Empty
            self.conn = w._handler_conns.get_nowait()
        except queue.Empty:
            self.conn = connect(w.dsn, application_name=f"tenure-handler:{w.worker_id}")
        return Repository(self.conn, w.schema)

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None and not (self.conn.closed or self.conn.broken):
            self.worker._handler_conns.put(self.conn)
