"""The producers of a chaos run: a thread that enqueues numbered chaos jobs at a pace, and one
that enqueues the run's workflows, batches and racing unique jobs (issue 39) when due.

Job ``n`` has idempotency key ``chaos-job:<n>``, so a batch whose commit was not confirmed (a
restart, a failover) is sent again as it was, and a job is never enqueued twice. The pace says how
many jobs are due after some seconds and when production is over; the job builder says what job
``n`` is. An error the producer cannot retry is kept in :attr:`Producer.error` for the main loop.

Limits: one connection, one batch in flight; ``enqueued`` is written by the producer thread only.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.chaos import STEP_TASK, UNIQUE_TASK, WF_QUEUE
from tenure.chaos.config import ChaosConfig
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository
from tenure.core.repository.plans import Step
from tenure.core.unique import Unique
from tenure.workflows import Batch, Workflow


@dataclass(frozen=True)
class Pace:
    """How fast a producer enqueues and what it retries."""

    due: Callable[[float], int]
    """Jobs that should be enqueued after this many seconds of production."""
    over: Callable[[int], bool]
    """True once production is over (given the jobs enqueued so far)."""
    idle: float
    """Seconds to wait when no job is due yet."""
    retry_on: type[psycopg.Error]
    """Errors after which the same batch is sent again (others end the producer)."""
    retry_wait: float
    """Seconds before the batch is sent again."""
    batch_max: int | None = None
    """Jobs per batch at most (None: every due job in one batch)."""


class Producer:
    """Enqueues ``job(n)`` for n = 0, 1, ... at ``pace`` until the pace is over or ``stop`` is set."""

    def __init__(self, dsn: str, schema: str, *, pace: Pace, job: Callable[[int], JobSpec],
                 stop: threading.Event, on_enqueued: Callable[[range], None] | None = None) -> None:
        self.dsn = dsn
        self.schema = schema
        self.pace = pace
        self.job = job
        self.stop = stop
        self.on_enqueued = on_enqueued
        self.enqueued = 0
        """Jobs whose enqueue committed."""
        self.error: BaseException | None = None
        """What ended the producer early, for the main loop to report."""
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _next_batch(self, started: float) -> list[JobSpec]:
        due = self.pace.due(time.monotonic() - started)
        if self.pace.batch_max is not None:
            due = min(due, self.enqueued + self.pace.batch_max)
        return [self.job(n) for n in range(self.enqueued, due)]

    def _run(self) -> None:
        pace = self.pace
        conn: psycopg.Connection[Any] | None = None
        started = time.monotonic()
        batch: list[JobSpec] = []
        try:
            while not pace.over(self.enqueued) and not self.stop.is_set():
                batch = batch or self._next_batch(started)
                if not batch:
                    self.stop.wait(pace.idle)
                    continue
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-producer")
                    Repository(conn, self.schema).enqueue_many(batch)
                except pace.retry_on:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self.stop.wait(pace.retry_wait)  # the same batch again: idempotency keys make it safe
                    continue
                done = range(self.enqueued, self.enqueued + len(batch))
                if self.on_enqueued is not None:
                    self.on_enqueued(done)
                self.enqueued, batch = done.stop, []
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.error = exc
        finally:
            if conn is not None:
                conn.close()


# -- issue 39: workflows, batches and unique jobs -------------------------------------------------
STEPS_MIN, STEPS_MAX = 3, 20
"""Steps of a random workflow."""
DEPS_MAX = 3
"""Earlier steps a step depends on, at most."""
BATCH_MIN, BATCH_MAX = 3, 10
"""Jobs of a batch."""
FAIL_SHARE = 0.04
"""Share of steps planned to dead-letter at once (``fail``), so dependents are cancelled or ignore it."""
IGNORE_SHARE = 0.15
"""Share of steps with deps that run even after a dep was dead-lettered (``ignore_failed``)."""
UNIQUE_BURSTS = 4
"""Bursts of racing enqueues per unique key; each of RACERS at once, then FOLLOWERS while the holder runs."""
RACERS, FOLLOWERS = 3, 2
CALLBACKS = ("completed", "exhausted", "finished")


@dataclass(frozen=True)
class ExtraJob:
    """A workflow's step, a batch's job or a unique burst's job, as planned."""

    deps: tuple[int, ...]
    """Positions of earlier steps."""
    ignore_failed: bool
    fail: bool
    work_ms: float


@dataclass(frozen=True)
class Extra:
    """One workflow, batch or burst of unique enqueues, due ``at`` seconds into production."""

    at: float
    kind: str
    """``workflow``, ``batch`` or ``unique``."""
    index: int
    steps: tuple[ExtraJob, ...] = ()
    """A workflow's steps, or a batch's jobs (no deps)."""
    key: str = ""
    """A unique burst's key."""


def plan_extras(*, workflows: int, batches: int, unique_keys: int, span: float, work_ms: tuple[float, float],
                rng: random.Random) -> list[Extra]:
    """The run's workflows, batches and unique bursts, due over ``span`` seconds, by ``at``."""
    def work() -> float:
        return round(rng.uniform(*work_ms), 1)

    extras: list[Extra] = []
    for i in range(workflows):
        steps: list[ExtraJob] = []
        for j in range(rng.randint(STEPS_MIN, STEPS_MAX)):
            deps = tuple(sorted(rng.sample(range(j), rng.randint(0, min(DEPS_MAX, j)))))
            steps.append(ExtraJob(deps, bool(deps) and rng.random() < IGNORE_SHARE, rng.random() < FAIL_SHARE,
                                     work()))
        extras.append(Extra(rng.uniform(0, span), "workflow", i, tuple(steps)))
    for i in range(batches):
        size = rng.randint(BATCH_MIN, BATCH_MAX)
        failing = rng.randrange(size) if i % 2 else -1  # every other batch has a job that dead-letters
        extras.append(Extra(rng.uniform(0, span), "batch", i,
                            tuple(ExtraJob((), False, k == failing, work()) for k in range(size))))
    for i in range(unique_keys * UNIQUE_BURSTS):
        extras.append(Extra(rng.uniform(0, span), "unique", i, (ExtraJob((), False, False, work()),),
                            key=f"u{i % unique_keys}"))
    return sorted(extras, key=lambda e: e.at)


class ExtrasProducer:
    """Enqueues the planned workflows, batches and unique bursts on ``WF_QUEUE`` when due.

    A workflow or batch whose commit was not confirmed (``retry_on``: a restart, or a failover on
    a multi-host DSN) is sent again on a new connection (it may then exist twice: they carry no
    idempotency key, and the checks hold over whatever was written). A unique burst sends RACERS
    enqueues at once from as many connections, then FOLLOWERS more half the job's work time
    later, when the first holder is likely running."""

    def __init__(self, dsn: str, schema: str, *, extras: list[Extra], stop: threading.Event,
                 retry_wait: float = 0.5, retry_on: type[psycopg.Error] = psycopg.OperationalError) -> None:
        self.dsn = dsn
        self.schema = schema
        self.extras = extras
        self.stop = stop
        self.retry_wait = retry_wait
        self.retry_on = retry_on
        self.counts: Counter[str] = Counter()
        """What was enqueued: workflows, steps, batches, batch_jobs, unique_enqueues, unique_created."""
        self.error: BaseException | None = None
        self._local = threading.local()
        self._conns: list[psycopg.Connection[Any]] = []
        """Every connection the producer's threads opened, closed when it ends (guarded by ``_lock``)."""
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=RACERS, thread_name_prefix="chaos-unique")
        self._thread = threading.Thread(target=self._run, name="chaos-extras", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self.dsn, application_name="tenure-chaos-extras")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _retrying(self, send: Callable[[psycopg.Connection[Any]], object]) -> None:
        while not self.stop.is_set():
            try:
                send(self._conn())
                return
            except self.retry_on:
                conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
                if conn is not None:  # None: this thread's first connect failed
                    conn.close()
                self.stop.wait(self.retry_wait)

    def _workflow(self, e: Extra) -> None:
        wf = Workflow(f"chaos-wf-{e.index}")
        handles: list[Step] = []
        for j, s in enumerate(e.steps):
            handles.append(wf.add(STEP_TASK, {"step": f"s{j}", "work_ms": s.work_ms, "fail": s.fail}, name=f"s{j}",
                                  deps=[handles[d] for d in s.deps], queue=WF_QUEUE, ignore_failed=s.ignore_failed))
        self._retrying(lambda conn: wf.enqueue(conn, schema=self.schema))
        self.counts.update(workflows=1, steps=len(e.steps))

    def _batch(self, e: Extra) -> None:
        batch = Batch(dict.fromkeys(CALLBACKS, STEP_TASK), callback_queue=WF_QUEUE)
        for s in e.steps:
            batch.add(STEP_TASK, {"work_ms": s.work_ms, "fail": s.fail}, queue=WF_QUEUE)
        self._retrying(lambda conn: batch.enqueue(conn, schema=self.schema))
        self.counts.update(batches=1, batch_jobs=len(e.steps))

    def _unique_one(self, e: Extra) -> None:
        def send(conn: psycopg.Connection[Any]) -> None:
            result = Repository(conn, self.schema).enqueue(UNIQUE_TASK, {"k": e.key, "work_ms": e.steps[0].work_ms},
                                                           queue=WF_QUEUE, unique=Unique(by=["k"]))
            self.counts.update(unique_enqueues=1, unique_created=int(result.created))
        self._retrying(send)

    def _unique(self, e: Extra) -> None:
        list(self._pool.map(lambda _: self._unique_one(e), range(RACERS)))
        self.stop.wait(e.steps[0].work_ms / 2000)
        list(self._pool.map(lambda _: self._unique_one(e), range(FOLLOWERS)))

    def _run(self) -> None:
        started = time.monotonic()
        try:
            for e in self.extras:
                if self.stop.wait(max(0.0, e.at - (time.monotonic() - started))):
                    return
                {"workflow": self._workflow, "batch": self._batch, "unique": self._unique}[e.kind](e)
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.error = exc
        finally:
            self._pool.shutdown(wait=True)
            with self._lock:
                for conn in self._conns:
                    conn.close()


def extras_for(config: ChaosConfig, dsn: str, schema: str, *, span: float, rng: random.Random,
               stop: threading.Event, retry_on: type[psycopg.Error] = psycopg.OperationalError) -> ExtrasProducer:
    """The run's :class:`ExtrasProducer`: ``config.workflows``, ``batches`` and ``unique_keys``
    planned over ``span`` seconds by a generator seeded from ``rng`` (one draw)."""
    extras = plan_extras(workflows=config.workflows, batches=config.batches, unique_keys=config.unique_keys,
                         span=span, work_ms=(config.work_ms_min, config.work_ms_max),
                         rng=random.Random(rng.getrandbits(64)))
    return ExtrasProducer(dsn, schema, extras=extras, stop=stop, retry_on=retry_on)
