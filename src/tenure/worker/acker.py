"""The acknowledgement thread (River's completer): writes outcomes in batches, on its own
connection, as compare-and-sets on each attempt's token.

All completions of a batch go in one statement; retries, dead-letters, releases and rate-limited
hand-backs one each.
A batch holds at most ``ACK_BATCH_MAX_DEFAULT`` outcomes: when outcomes pile up (a slow
statement, a lock, a failover) the thread writes them in bounded batches, one after another, so
no statement grows with the backlog (issue 40: an unbounded batch made each statement slower
than the last, and a drain collapsed).
A lost connection is retried until the outcome is written (a worker owes its verdicts even
while it stops). A batch the database *refuses* (a row it cannot store) must not block the
others: the rest of the batch is then written one by one, and an outcome that still fails is
given up (its lease expires and the reaper recovers the job). Limits: outcomes waiting here are
lost if the process dies; lease expiry covers that.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from tenure.core.db import Connection, needs_reconnect
from tenure.core.errors import first_line
from tenure.core.redaction import Redaction
from tenure.core.repository import Connected, LeaseStore, Repository
from tenure.core.service import ServiceConnection
from tenure.worker.metrics import WorkerMetrics, observe_many
from tenure.worker.outcomes import Outcome
from tenure.worker.recheck import OutcomeRecheck, RecheckStore
from tenure.worker.slots import Slots

log = logging.getLogger("tenure.worker")


class AckStore(Connected, LeaseStore, Protocol):
    """What the acknowledgement writes use: the lease area's fenced writes, and the connection
    (a batch that fails is written again one outcome at a time, each on its own)."""

RETRY_PAUSE_DEFAULT = 0.5
"""Seconds between two tries of a batch whose connection was lost."""
ACK_BATCH_MAX_DEFAULT = 500
"""Most outcomes written per batch. Measured (docs/performance.md, "Acknowledgements"): the
completion statement costs about the same per job from 200 to 2,000 jobs (linear in its batch),
while batches below 100 pay its fixed cost per few jobs; 500 keeps one statement within a few
milliseconds and covers a worker of concurrency 200 that finished everything at once with one
or two statements."""


_STALE_OPERATION = {"retry": "retry", "dead": "dead_letter", "release": "release", "rate_limited": "rate_limited"}
"""The ``operation`` label (metrics.STALE_WRITE_OPERATIONS) of a rejected outcome write."""


class _Interrupted(Exception):
    """An acknowledgement cut off by a reconnect-class error, with the outcomes still to write."""

    def __init__(self, rest: list[Outcome], cause: psycopg.Error) -> None:
        super().__init__(first_line(cause))
        self.rest, self.cause = rest, cause


class Acker:
    """Owns the outcome queue and the thread that drains it."""

    def __init__(self, *, dsn: str, schema: str, worker_id: str, slots: Slots, metrics: WorkerMetrics,
                 completed: Callable[[tuple[str, str]], Any],
                 runtime: Callable[[tuple[str, str]], Any] | None = None,
                 redaction: Redaction = Redaction(), recheck: OutcomeRecheck | None = None,
                 batch_max: int = ACK_BATCH_MAX_DEFAULT) -> None:
        self.schema, self.worker_id = schema, worker_id
        self.batch_max = batch_max
        self.slots, self.metrics, self.redaction = slots, metrics, redaction
        self._completed = completed
        """The completed-jobs counter child of a (queue, task), cached by the runtime."""
        self._runtime = runtime or (lambda labels: metrics.runtime.labels(*labels))
        """The runtime histogram child of a (queue, task): handler times are observed here, per batch."""
        self.recheck = recheck or OutcomeRecheck(worker_id=worker_id, counter=metrics.outcomes_in_doubt)
        """The last acknowledged outcomes, re-read after this thread reconnects (a failover)."""
        self.failure: str | None = None
        """Why the thread died of an unexpected error (a bug, not the database: those are retried)."""
        self.on_failure: Callable[[], None] = lambda: None
        """Called once the thread has died (the worker stops: it can acknowledge nothing more)."""
        self._queue: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._conn = ServiceConnection(dsn, f"tenure-ack:{worker_id}", log=log, retry_after_stop=True)
        self._thread: threading.Thread | None = None

    def put(self, outcome: Outcome) -> None:
        self._queue.put(outcome)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tenure-ack", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued, then end the thread."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def run(self) -> None:
        """Write outcomes until stopped. An unexpected error (not a database one) ends the
        thread: the outcomes it still owes are given up (their leases expire and the reaper
        recovers the jobs, instead of being renewed for ever by a worker that can write nothing),
        ``/healthz`` fails, and the worker stops."""
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - the worker must learn of it, not hang
            self.failure = first_line(exc)
            log.exception("the acknowledgement thread failed; giving up %d unwritten outcome(s)",
                          self.slots.unwritten)
            self.slots.give_up_unwritten()
            self._conn.close()
            self.on_failure()

    def _run(self) -> None:
        stopping = False
        # After the end marker, what is still queued (an outcome queued again after an
        # interrupted write, a batch past the cap) is written before the thread ends.
        while not (stopping and self._queue.empty()):
            batch, stop = self._next_batch()
            stopping = stopping or stop
            self._observe_runtimes(batch)
            while batch:
                try:
                    repo = Repository(self._conn.get(), self.schema)
                    if self.recheck.pending:
                        self._recheck(repo, batch)
                    batch = self.write(repo, batch)
                except _Interrupted as exc:
                    # Dead connection, or a demoted primary (25006): reconnect (a multi-host DSN
                    # finds the new primary) and write what is left again; never drop it. What
                    # the old connection acknowledged is re-checked first (recheck.py).
                    log.warning("acknowledgement failed, retrying: %s", first_line(exc.cause))
                    self.metrics.db_reconnects.labels("ack").inc()
                    batch = exc.rest
                    self.recheck.epoch_ended()
                    self._conn.reset()
                    threading.Event().wait(RETRY_PAUSE_DEFAULT)
        self._conn.close()

    def _recheck(self, repo: RecheckStore, batch: list[Outcome]) -> None:
        """Re-read what the previous connection acknowledged, before writing anything new."""
        try:
            self.recheck.run_once(repo)
        except psycopg.Error as exc:
            if needs_reconnect(exc):
                raise _Interrupted(batch, exc) from exc
            log.error("could not re-check the last acknowledged outcomes: %s", first_line(exc))
            self.recheck.forget()

    def _observe_runtimes(self, batch: list[Outcome]) -> None:
        """The handlers' wall times, one histogram update per (queue, task) of the batch; each
        outcome's once (one queued again after an interrupted write is not counted twice)."""
        by_labels: dict[tuple[str, str], list[float]] = {}
        for o in batch:
            if o.runtime is not None:
                by_labels.setdefault((o.ctx.job.queue, o.ctx.job.task), []).append(o.runtime)
                o.runtime = None
        for labels, seconds in by_labels.items():
            observe_many(self._runtime(labels), seconds)

    def _next_batch(self) -> tuple[list[Outcome], bool]:
        """What is queued, up to ``batch_max`` outcomes (waiting for the first); ``stop`` once the
        end marker is reached. Outcomes past the cap stay queued for the next batch."""
        first = self._queue.get()
        batch = [] if first is None else [first]
        stop = first is None
        while len(batch) < self.batch_max:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, stop
            if item is None:
                stop = True
            else:
                batch.append(item)
        return batch, stop

    def write(self, repo: AckStore, batch: list[Outcome]) -> list[Outcome]:
        """Write ``batch``. A lost connection or a demoted primary (``needs_reconnect``) raises
        :class:`_Interrupted` with what was not written, for the loop to write again after
        reconnecting. A refused batch falls back to one by one for what was not written."""
        done: list[Outcome] = []
        try:
            self._write(repo, batch, done)
        except psycopg.Error as exc:
            if done:
                self.slots.acked([o.ctx for o in done])
            rest = [o for o in batch if not any(o is d for d in done)]
            if needs_reconnect(exc):
                raise _Interrupted(rest, exc) from exc
            log.warning("acknowledgement batch refused, writing one by one: %s", first_line(exc))
            for outcome in rest:
                self._write_single(repo.conn, outcome)
        return []

    def _write_single(self, conn: Connection, outcome: Outcome) -> None:
        try:
            self._write(Repository(conn, self.schema), [outcome], [])
        except psycopg.Error as exc:
            if needs_reconnect(exc):
                # The connection died (or the primary was demoted) mid-way: not this row's fault.
                # Queue it again; the loop reconnects before writing it.
                log.warning("acknowledgement of job %s interrupted, retrying: %s", outcome.ctx.job.id,
                            first_line(exc))
                self._queue.put(outcome)
                return
            log.error("could not record the outcome (%s) of job %s; its lease will expire: %s",
                      outcome.kind, outcome.ctx.job.id, first_line(exc), extra=outcome.ctx.log_extra)
            self.slots.acked([outcome.ctx], written=False)

    def _write(self, repo: AckStore, batch: list[Outcome], done: list[Outcome]) -> None:
        completes = [o for o in batch if o.kind == "complete"]
        if completes:
            accepted = repo.complete_many(self.worker_id, [(o.ctx.job.id, o.ctx.lock_token) for o in completes])
            self.recheck.completed([(o.ctx.job.id, o.ctx.lock_token) for o in completes if accepted.get(o.ctx.job.id)])
            counts: dict[tuple[str, str], int] = {}
            for o in completes:
                labels = (o.ctx.job.queue, o.ctx.job.task)
                if accepted.get(o.ctx.job.id):
                    counts[labels] = counts.get(labels, 0) + 1
                else:
                    self.metrics.stale_writes.labels(*labels, "complete").inc()
                    log.warning("completion rejected: lease had moved", extra=o.ctx.log_extra)
            for labels, n in counts.items():  # one locked increment per (queue, task) of the batch
                self._completed(labels).inc(n)
            done.extend(completes)
        for o in batch:
            if o.kind == "complete":
                continue
            job, labels = o.ctx.job, (o.ctx.job.queue, o.ctx.job.task)
            ok = True
            if o.kind == "retry":
                ok = repo.retry(self.worker_id, job.id, job.lock_token, delay=o.delay, error=o.error,
                                error_code=o.error_code, queue=job.queue)
                if ok:
                    self.metrics.retried.labels(*labels, o.error_code).inc()
            elif o.kind == "dead":
                ok = repo.dead_letter(self.worker_id, job.id, job.lock_token, error=o.error,
                                      error_code=o.error_code, sanitised_payload=self.redaction.payload(job.payload),
                                      queue=job.queue)
                if ok:
                    self.metrics.dead_lettered.labels(*labels, o.error_code).inc()
                    log.error("dead-lettered (%s): %s", o.error_code, o.error.splitlines()[0] if o.error else "",
                              extra={**o.ctx.log_extra, "error_code": o.error_code})
            elif o.kind == "release":
                ok = repo.release(self.worker_id, job.id, job.lock_token, delay=o.delay, event=o.event,
                                  reason=o.reason, queue=job.queue)
                if ok:
                    (self.metrics.deferred if o.event == "deferred" else self.metrics.released).labels(*labels).inc()
            elif o.kind == "rate_limited":
                ok = repo.rate_limited(self.worker_id, job.id, job.lock_token, delay=o.delay, limit=o.rate_limit,
                                       reason=o.reason, queue=job.queue)
                if ok:
                    self.metrics.rate_limited.labels(*labels).inc()
            if not ok:
                self.metrics.stale_writes.labels(*labels, _STALE_OPERATION[o.kind]).inc()
            done.append(o)
        self.slots.acked([o.ctx for o in batch])
