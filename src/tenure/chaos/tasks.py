"""The tasks chaos workers serve (``tenure worker --app tenure.chaos.tasks:app``).

``chaos.job`` records two side effects per attempt: one guarded by the execution store
(``ctx.effect``), sent to a sink that honours the idempotency key the way R14 asks of external
providers, and one unguarded counter row (a plain insert). Its payload may carry a fault
marker, fired once per job (recorded in ``chaos_faults`` just before it acts) by the first
attempt that reaches it: ``kill_before_effect``; ``kill_after_effect`` (effects done, before
the acknowledgement); ``kill_during_ack`` (the process dies within a few milliseconds of the
worker starting the acknowledgement statement: before it is sent, in flight, or just after the
commit; done by wrapping ``Repository.complete_many`` in this process only); ``hang`` (the
handler never returns and ignores lease loss while the heartbeat thread stays alive);
``overrun`` (``chaos.timed`` only: the first attempt outlives the task timeout);
``restart_in_gap`` (after the guarded body, before ``eff.succeeded()``, the task asks the harness
to restart PostgreSQL with ``pg_ctl restart -m fast`` and waits ``GAP_SECONDS``; only when the
harness owns the server and passes ``TENURE_CHAOS_CONTROL_DIR``). The guarded effect is
reconciled with the sink when it is in doubt (the sink answers by key, as a provider's lookup
would). An
attempt that stops on ``LeaseLost`` writes nothing the database could reject, so it is noted in
``chaos_fences`` for the stale-write invariant. An attempt whose handler returns successfully
notes that in ``chaos_returns`` as its last act (best effort), for ``success_not_rerun``: a
finished attempt must keep its lease until the worker has written its outcome (issue 40).

The worker's database comes from ``TENURE_DATABASE_URL``/``TENURE_SCHEMA`` (set by the
harness; the partitioned worker's URL points at the TCP proxy, so its effects are partitioned
too). ``TENURE_CHAOS_CLOCK_OFFSET`` (seconds) shifts ``time.time`` in this process when
libfaketime is not available: the injected-clock form of the clock-skew fault.

HA runs (``tenure chaos --ha patroni``) also set ``TENURE_CHAOS_LEDGER_URL``: a server outside
the cluster where the task appends what a failover must not undo (handler starts, calls to the
guarded effect's external provider, acknowledged ``eff.succeeded()`` and acknowledged
completions), so losses on the cluster can be counted afterwards.

``chaos.step`` (issue 39) runs the workflow steps, the batch jobs and the batch callbacks:
it sleeps the payload's ``work_ms`` (a callback's payload is the batch summary: 100 ms), stores a
step's output with ``ctx.output``, and dead-letters at once (``PermanentError``) when the payload
says ``fail``. ``chaos.unique`` (``tenure.Unique(by=["k"])``) sleeps its ``work_ms``. Both run on
``WF_QUEUE``, so the process-level faults hit them like any job.

``chaos.validated`` only exists for the bad-input tests: its validator rejects payloads that
lack an integer ``n``.
"""

from __future__ import annotations

import os
import queue
import random
import select
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, SupportsIndex

import psycopg

from tenure.chaos import QUEUE, STEP_TASK, TIMED_TASK, TIMED_TIMEOUT, UNIQUE_TASK, WF_QUEUE
from tenure.chaos.store import ChaosStore
from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.errors import LeaseLost, PermanentError
from tenure.core.repository import Repository
from tenure.core.unique import Unique
from tenure.worker.app import App
from tenure.worker.context import JobContext

EXIT_CODE_KILLED = 137
GAP_SECONDS = 3.0
"""Seconds between a guarded body and ``eff.succeeded()`` under ``restart_in_gap`` (the tester's 3 s)."""
ACK_KILL_MAX_DELAY = 0.003
"""Upper bound (seconds) of the delay after which ``kill_during_ack`` kills the process."""

app = App("chaos", default_queue=QUEUE, retry=RetryPolicy(base_delay=0.2, max_delay=2.0, max_attempts=10))

_local = threading.local()
_rng = random.Random()

_offset = float(os.environ.get("TENURE_CHAOS_CLOCK_OFFSET", "0") or 0)
if _offset:
    _real_time = time.time
    time.time = lambda: _real_time() + _offset  # the injected clock: wall time only, never monotonic

if "faketime" in os.environ.get("LD_PRELOAD", "") and os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1":
    # libfaketime 0.9.10 with an unfaked monotonic clock makes clock_nanosleep(TIMER_ABSTIME), which
    # time.sleep uses, fail with EINVAL; faking the monotonic clock instead hangs sem_clockwait (every
    # threading wait). Route sleeps through select(), whose timeout is relative: only the wall clock
    # is skewed, which is the fault under test.
    def _select_sleep(seconds: float | SupportsIndex) -> None:
        select.select([], [], [], max(0.0, float(seconds)))

    time.sleep = _select_sleep


def effect_key(n: int) -> str:
    """The business identity of job ``n``'s guarded effect (R13)."""
    return f"chaos:{n}:v1"


def _store() -> ChaosStore:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = connect(os.environ["TENURE_DATABASE_URL"], application_name="tenure-chaos-task")
        _local.conn = conn
    return ChaosStore(conn, os.environ.get("TENURE_SCHEMA", "tenure"))


_LEDGER_URL = os.environ.get("TENURE_CHAOS_LEDGER_URL") or None
_job_n: dict[int, tuple[int, uuid.UUID]] = {}
"""Job id -> (n, token) of the attempts this process started (for the acknowledgement ledger)."""


def _ledger() -> ChaosStore | None:
    if _LEDGER_URL is None:
        return None
    conn: psycopg.Connection[Any] | None = getattr(_local, "ledger", None)
    if conn is None or conn.closed or conn.broken:
        conn = connect(_LEDGER_URL, application_name="tenure-chaos-ledger")
        _local.ledger = conn
    return ChaosStore(conn, os.environ.get("TENURE_SCHEMA", "tenure"))


def _ledger_record(kind: str, n: int, job_id: int, token: uuid.UUID) -> None:
    ledger = _ledger()
    if ledger is not None:
        ledger.ledger_record(kind, n=n, job_id=job_id, token=token, pid=os.getpid())


def _fire(ctx: JobContext, kind: str, **detail: Any) -> bool:
    """Record the fault once per job; False (do not fire) if already fired or the DB is unreachable.

    Retries once on a fresh connection: after a PostgreSQL restart the thread's connection is
    stale, and a marker must not be skipped for that."""
    for _ in range(2):
        try:
            return _store().fault_fire(kind, job_id=ctx.job_id, token=ctx.lock_token, pid=os.getpid(),
                                       detail=detail)
        except psycopg.OperationalError:
            conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
        except psycopg.Error:
            return False
    return False


_notes: queue.SimpleQueue[tuple[str, int, uuid.UUID, int]] = queue.SimpleQueue()


def _write_notes() -> None:
    """Deliver LeaseLost notes, retrying while the database is unreachable (a partition)."""
    conn: psycopg.Connection[Any] | None = None
    while True:
        kind, job_id, token, pid = _notes.get()
        while True:
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(os.environ["TENURE_DATABASE_URL"], application_name="tenure-chaos-notes")
                ChaosStore(conn, os.environ.get("TENURE_SCHEMA", "tenure")).fence_note(
                    kind, job_id=job_id, token=token, pid=pid)
                break
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.5)


_notes_thread: threading.Thread | None = None
_notes_lock = threading.Lock()


def _note(kind: str, ctx: JobContext) -> None:
    global _notes_thread
    with _notes_lock:
        if _notes_thread is None:
            _notes_thread = threading.Thread(target=_write_notes, name="tenure-chaos-notes", daemon=True)
            _notes_thread.start()
    _notes.put((kind, ctx.job_id, ctx.lock_token, os.getpid()))


def _reconcile(key: str) -> str | None:
    """Ask the sink whether the guarded effect under ``key`` was applied (an in-doubt key).
    Retries on a fresh connection once, like the markers (the thread's may predate a restart)."""
    for attempt in range(2):
        try:
            return _store().effect_lookup(key)
        except psycopg.OperationalError:
            conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
            if attempt:
                raise
    return None


def _returned(ctx: JobContext) -> None:
    """Note that this attempt's handler returns successfully now; retried once on a fresh
    connection (like the markers), else left out: a missing note only weakens the check."""
    for _ in range(2):
        try:
            _store().returned(job_id=ctx.job_id, token=ctx.lock_token, attempt=ctx.attempt, pid=os.getpid())
            return
        except psycopg.OperationalError:
            conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
        except psycopg.Error:
            return


def _control_dir() -> str:
    return os.environ.get("TENURE_CHAOS_CONTROL_DIR", "")


def _request_restart(ctx: JobContext) -> None:
    """Ask the harness (which owns the server) to restart PostgreSQL now."""
    path = os.path.join(_control_dir(), f"restart-{ctx.job_id}-{uuid.uuid4().hex[:8]}")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        fh.write(str(ctx.job_id))
    os.replace(path + ".tmp", path)


def _die() -> None:
    os._exit(EXIT_CODE_KILLED)


@app.task("chaos.job")
def chaos_job(ctx: JobContext) -> None:
    payload = ctx.payload
    n = int(payload["n"])
    fault = payload.get("fault")  # fires once per job (recorded), on the first attempt that reaches it
    work = float(payload.get("work_ms", 20)) / 1000.0
    if _LEDGER_URL is not None:
        _job_n[ctx.job_id] = (n, ctx.lock_token)
        _ledger_record("handler_start", n, ctx.job_id, ctx.lock_token)
    time.sleep(work / 2)
    if fault == "hang" and _fire(ctx, "hang"):
        while True:  # an upstream call that never returns; deliberately deaf to ctx.lease_lost
            time.sleep(3600)
    if fault == "kill_before_effect" and _fire(ctx, fault):
        _die()
    if fault == "overrun" and _fire(ctx, fault):
        # Outlive the task timeout (chaos.timed), then carry on as a late handler would: the
        # effect guard's check_lease must stop it (the timeout already freed and retried the job).
        time.sleep(TIMED_TIMEOUT + 1.0)
    pid = os.getpid()
    stage = "self_fenced"
    try:
        with ctx.effect(effect_key(n), reconcile=_reconcile) as eff:
            if not eff.already_succeeded:
                ledger = _ledger()
                if ledger is not None:  # the external provider (HA runs): outlives any failover
                    ledger.ledger_provider_call(n=n, job_id=ctx.job_id, key=effect_key(n), token=ctx.lock_token,
                                                pid=pid)
                applied = _store().effect_guarded(n=n, job_id=ctx.job_id, key=effect_key(n),
                                                  token=ctx.lock_token, fence=ctx.fencing_token,
                                                  attempt=ctx.attempt, pid=pid, wall=time.time())
                stage = "effect_succeed_rejected"
                if fault == "restart_in_gap" and _control_dir() and _fire(ctx, fault):
                    _request_restart(ctx)
                    time.sleep(GAP_SECONDS)
                eff.succeeded(f"effect-{n}" if applied else f"effect-{n}-dedup")
                if ledger is not None:
                    _ledger_record("effect_acked", n, ctx.job_id, ctx.lock_token)
    except LeaseLost:
        # The worker drops this attempt without writing anything to the job, so no rejection
        # can be recorded by the database; note why, for the stale-write invariant.
        _note(stage, ctx)
        raise
    _store().effect_unguarded(n=n, job_id=ctx.job_id, token=ctx.lock_token, fence=ctx.fencing_token,
                              attempt=ctx.attempt, pid=pid, wall=time.time())
    time.sleep(work / 2)
    if fault == "kill_after_effect" and _fire(ctx, fault):
        _die()
    if fault == "kill_during_ack" and _fire(ctx, fault):
        _kill_on_ack.add(ctx.job_id)
    _returned(ctx)


app.task(TIMED_TASK, timeout=TIMED_TIMEOUT)(chaos_job)

_kill_on_ack: set[int] = set()
_complete_many = Repository.complete_many


def _complete_many_then_die(self: Repository, worker_id: str,
                            done: Sequence[tuple[int, uuid.UUID]]) -> dict[int, bool]:
    """The worker's acknowledgement, with a kill timed to land while it is in flight.

    Installed only in chaos worker processes (this module is their --app): when the batch holds a
    ``kill_during_ack`` job, the process dies 0..ACK_KILL_MAX_DELAY seconds after the statement
    starts, so it is lost before sending, in flight, or just after the commit, at random.
    """
    if any(job_id in _kill_on_ack for job_id, _ in done):
        timer = threading.Timer(_rng.uniform(0.0, ACK_KILL_MAX_DELAY), _die)
        timer.daemon = True
        timer.start()
    accepted = _complete_many(self, worker_id, done)
    if _LEDGER_URL is not None:
        for job_id, token in done:
            known = _job_n.pop(job_id, None)
            if accepted.get(job_id) and known is not None and known[1] == token:
                _ledger_record("completion_acked", known[0], job_id, token)
    return accepted


Repository.complete_many = _complete_many_then_die  # type: ignore[method-assign,assignment]


def _validate_n(payload: Any) -> None:
    if not isinstance(payload, dict) or not isinstance(payload.get("n"), int):
        raise ValueError("payload must be an object with an integer 'n'")


@app.task("chaos.validated", validate=_validate_n)
def chaos_validated(ctx: JobContext) -> None:
    return None


CALLBACK_WORK_MS = 100.0
"""Milliseconds a batch callback (whose payload is the batch's summary) sleeps."""
UNIQUE_BY = Unique(by=["k"])
"""The unique jobs' declaration: one job per key ``k`` among pending and running jobs."""


@app.task(STEP_TASK, queue=WF_QUEUE)
def chaos_step(ctx: JobContext) -> None:
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    time.sleep(float(payload.get("work_ms", CALLBACK_WORK_MS)) / 1000.0)
    if payload.get("fail"):
        raise PermanentError("chaos: this step or batch job is planned to fail")
    if payload.get("step") is not None:
        ctx.output({"step": payload["step"], "attempt": ctx.attempt})


@app.task(UNIQUE_TASK, queue=WF_QUEUE, unique=UNIQUE_BY)
def chaos_unique(ctx: JobContext) -> None:
    time.sleep(float(ctx.payload.get("work_ms", CALLBACK_WORK_MS)) / 1000.0)
