"""What a handler receives: the job, its receipt (lock token), a fencing token, the lease-lost
signal, checkpoints (R16) and the idempotent effect guard (R14).

Limits: a sync handler cannot be interrupted from outside; it must poll ``lease_lost`` or call
``check_lease()`` before irreversible effects. An async handler is also cancelled on lease loss.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, NoReturn, Protocol

import psycopg

from tenure.core import tracing
from tenure.core.errors import (
    AmbiguousError,
    EffectInDoubt,
    EffectUnrecorded,
    JobFailure,
    LeaseLost,
    PermanentError,
    classify_exception,
    first_line,
)
from tenure.core.repository import ClaimedJob, ExecutionStore, LeaseStore, WorkflowStore
from tenure.worker.backpressure import RateLimited, check_limit, check_retry_after
from tenure.worker.steps import StepContext

log = logging.getLogger("tenure.worker")


class AttemptStore(LeaseStore, ExecutionStore, WorkflowStore, Protocol):
    """What a handler's context writes: checkpoints and stale-write records (lease area), its
    effects' keys (executions area), a workflow step's output and added steps (workflows area)."""

EFFECT_RECORD_RETRY_MIN = 5.0
"""Seconds ``succeeded()`` keeps retrying on fresh connections at least, even when the key's
lease may already have run out (a PostgreSQL restart takes a second or two; the write is a
compare-and-set on the attempt's token, so a late success is still safe to record)."""
EFFECT_RECORD_BACKOFF_MAX = 1.0
"""Seconds between two tries to record an effect's success, at most."""

Reconcile = Callable[[str], str | None]
"""``reconcile(key)``: ask the provider whether the effect keyed ``key`` happened; return its
reference (the effect is recorded as succeeded and skipped) or None (not done: run the body)."""


IN_DOUBT_FAILURE_CODES = frozenset({"timeout", "connection_error"})
"""Failure codes (``classify_exception``) of an exception that may come after the request left:
a timeout or a broken connection says nothing about whether the provider applied it."""


def may_have_applied(exc: BaseException, failure: JobFailure | None) -> bool:
    """Whether an exception raised inside an effect body leaves the effect in doubt.

    True for :class:`AmbiguousError` (the handler says the request was sent), timeouts and
    connection errors, including a database connection lost in the body (``psycopg``'s
    ``OperationalError``: a server can commit a statement and then end the connection before
    its answer, as a fast shutdown does). Any other exception means the body failed before its
    effect, and the key may be retried at once. Limits: a handler whose provider reports a lost
    answer some other way should raise ``AmbiguousError``.
    """
    if isinstance(failure, AmbiguousError) or isinstance(exc, psycopg.OperationalError):
        return True
    return failure is not None and failure.code in IN_DOUBT_FAILURE_CODES


class LeaseSignal:
    """A one-way flag with ``is_set()``/``wait()``/``set()`` like ``threading.Event``, which
    builds its Condition only when someone waits: one is created per claimed job, and most jobs
    finish without anybody waiting (a measurable share of a no-op job's cost).

    Bound to a :class:`JobContext`, it is also set the moment the context's local lease
    deadline passes, whoever looks first (the handler after a freeze, or the heartbeat): a
    handler never sees ``lease_lost`` False while ``check_lease()`` would raise.
    """

    __slots__ = ("_flag", "_event", "_ctx")
    _create = threading.Lock()

    def __init__(self, ctx: JobContext | None = None) -> None:
        self._flag = False
        self._event: threading.Event | None = None
        self._ctx = ctx

    def is_set(self) -> bool:
        if self._flag:
            return True
        ctx = self._ctx
        if ctx is not None and time.monotonic() >= ctx.lease_deadline:
            ctx.signal_lease_lost(ctx.deadline_reason(), local=True)
            return True
        return False

    def set(self) -> None:
        self._flag = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            with LeaseSignal._create:
                if self._event is None:
                    self._event = threading.Event()
                event = self._event
            if self._flag:  # set() may have run before the event existed
                return True
            now = time.monotonic()
            limit = None if end is None else end - now
            if self._ctx is not None:  # wake at the deadline (a renewal moves it: look again)
                until = max(0.0, self._ctx.lease_deadline - now) + 0.001
                limit = until if limit is None else min(limit, until)
            if limit is not None and limit <= 0:
                return self.is_set()
            if event.wait(limit):
                return True
            if end is not None and time.monotonic() >= end:
                return self.is_set()
        return True


class EffectDeferred(Exception):
    """Raised when another live attempt holds the idempotency key: defer the job briefly."""

    def __init__(self, key: str, delay: float) -> None:
        super().__init__(f"effect {key!r} is leased by another worker; deferring")
        self.key = key
        self.delay = delay


@dataclass
class Effect:
    """The outcome of claiming an idempotency key: ``already_succeeded`` or ``claimed``.

    When claimed, run the side effect passing ``key`` to the provider, then call
    :meth:`succeeded` with the provider's reference (e.g. its message id). ``in_doubt`` is True
    when an earlier attempt may have performed the effect without recording it; ``reconcile``
    then decided (already_succeeded: the provider had it; claimed: it did not).
    """

    key: str
    outcome: str
    result_ref: str | None
    _ctx: JobContext
    _done: bool = False
    in_doubt: bool = False
    _unrecorded: bool = False

    @property
    def already_succeeded(self) -> bool:
        return self.outcome == "already_succeeded"

    def succeeded(self, result_ref: str | None = None) -> None:
        """Record the effect as done; raises LeaseLost if another attempt took the key over.

        A lost connection (a database restart, a failover) is retried on fresh connections
        until the key's lease would have run out, and at least ``EFFECT_RECORD_RETRY_MIN``
        seconds. If it still cannot be recorded, raises :class:`EffectUnrecorded` and leaves
        the key in flight: the next attempt finds the effect in doubt.
        """
        ctx = self._ctx
        give_up = max(ctx.effect_deadline, time.monotonic() + EFFECT_RECORD_RETRY_MIN)
        delay, fresh = 0.1, False
        while True:
            try:
                with ctx._repo(fresh=fresh) as repo:
                    ok = repo.execution_succeed(self.key, ctx.lock_token, result_ref)
                    if not ok:
                        repo.record_stale_write(ctx.job.id, ctx.lock_token, ctx.worker_id, "effect_succeed",
                                                f"idempotency key {self.key!r} taken over by another attempt",
                                                queue=ctx.job.queue)
                break
            except psycopg.OperationalError as exc:
                if time.monotonic() + delay > give_up:
                    self._unrecorded = True
                    raise EffectUnrecorded(f"effect {self.key!r} ran but its success could not be recorded: "
                                           f"{first_line(exc)}") from exc
                log.warning("recording effect %r failed, retrying on a fresh connection: %s", self.key,
                            first_line(exc), extra=ctx.log_extra)
                time.sleep(delay)
                delay, fresh = min(delay * 2, EFFECT_RECORD_BACKOFF_MAX), True
        self._done = True
        if not ok:
            ctx._count_stale("effect_succeed")
            raise LeaseLost(f"effect {self.key!r} was taken over by another attempt")
        self.result_ref = result_ref
        ctx._recorded(self.key)


@dataclass
class JobContext(StepContext):
    """One delivery attempt of one job, as seen by its handler."""

    job: ClaimedJob
    worker_id: str
    lease_seconds: float
    _repo: Callable[..., AbstractContextManager[AttemptStore]]
    _on_stale: Callable[[JobContext, str], None]
    _heartbeat_now: Callable[[], None]
    _on_lease_lost: Callable[[JobContext], None] | None = None
    """Called once when the lease is lost (counts ``tenure_leases_lost_total``), whoever noticed."""
    lease_lost: LeaseSignal = field(default_factory=LeaseSignal)
    lease_lost_reason: str | None = None
    lease_lost_locally: bool = False
    """The loss was judged here (local deadline passed), not confirmed by the database: the
    attempt's outcome is then written as a CAS (the job is handed back at once, or the rejection
    is recorded) instead of being dropped."""
    lease_deadline: float = 0.0
    """Monotonic time by which the current lease surely ends unless renewed (local estimate)."""
    effect_deadline: float = 0.0
    """Monotonic time by which the open effect's key lease surely ends unless renewed."""
    lease_capped: bool = False
    """The last renewal was cut short by the maximum total lease (R4): no further extension."""
    used_effect: bool = False
    claimed_at: float = field(default_factory=time.monotonic)
    _on_lost: list[Callable[[], object]] = field(default_factory=list)
    trace: tracing.AttemptSpan = tracing.NO_ATTEMPT
    """This attempt's span (set by the executor when traces are on; the shared no-op otherwise)."""

    def __post_init__(self) -> None:
        self.lease_deadline = self.claimed_at + self.lease_seconds
        self.lease_lost._ctx = self

    _PER_ATTEMPT = frozenset({"lease_lost", "claimed_at", "_on_lost"})
    """The fields built afresh for each context (every other default is shared or immutable)."""

    @classmethod
    def maker(cls, **shared: Any) -> Callable[[ClaimedJob, float], JobContext]:
        """A maker of contexts for one worker: ``make(job, claimed_at)`` equals
        ``JobContext(job=job, claimed_at=claimed_at, **shared)``, without running the dataclass
        ``__init__`` per job (a fifth of a no-op job's worker CPU went to building contexts).

        Limits: ``shared`` values are shared by every context made (the worker's hooks). A new
        field with a mutable default must be listed in ``_PER_ATTEMPT`` and built below; this
        refuses to run otherwise."""
        fresh = {f.name for f in fields(cls) if f.default_factory is not MISSING}
        if fresh != cls._PER_ATTEMPT:
            raise TypeError(f"JobContext.maker builds {sorted(cls._PER_ATTEMPT)} per attempt, "
                            f"the dataclass has {sorted(fresh)}")
        proto = dict(cls(job=None, claimed_at=0.0, **shared).__dict__)  # type: ignore[arg-type]
        lease, new = proto["lease_seconds"], object.__new__

        def make(job: ClaimedJob, claimed_at: float) -> JobContext:
            ctx: JobContext = new(cls)
            d = ctx.__dict__
            d.update(proto)
            d["job"], d["claimed_at"], d["lease_deadline"] = job, claimed_at, claimed_at + lease
            d["lease_lost"], d["_on_lost"] = LeaseSignal(ctx), []
            return ctx

        return make

    # identity ----------------------------------------------------------------------------
    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def payload(self) -> Any:
        return self.job.payload

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def lock_token(self) -> uuid.UUID:
        """This attempt's receipt: every write of this attempt is a CAS on it."""
        return self.job.lock_token

    @property
    def fencing_token(self) -> int:
        """Strictly increasing per claim (R5): pass it to conditional writes in external systems."""
        return self.job.fence

    @property
    def checkpoint_step(self) -> str | None:
        """The last committed step of an earlier attempt (R16), or None."""
        return self.job.checkpoint_step

    @property
    def checkpoint_data(self) -> Any:
        return self.job.checkpoint_data

    @property
    def flow_key(self) -> str | None:
        """The job's flow key (docs/flow.md), None when it has none."""
        return self.job.flow_key

    @property
    def log_extra(self) -> dict[str, Any]:
        return {"job_id": self.job.id, "attempt": self.job.attempt, "lock_token": self.job.lock_token,
                "fence": self.job.fence, "worker_id": self.worker_id, "queue": self.job.queue,
                "task": self.job.task, "correlation_id": self.job.correlation_id}

    # lease -------------------------------------------------------------------------------
    def deadline_reason(self) -> str:
        """Why a passed local deadline means the lease is lost."""
        if self.lease_capped:
            return "maximum total lease reached"
        return "lease not renewed in time (local deadline passed); it may have moved"

    def signal_lease_lost(self, reason: str, *, local: bool = False, counted: bool = True) -> None:
        if self.lease_lost._flag:
            return
        self.lease_lost_reason = reason
        self.lease_lost_locally = local
        if counted and self._on_lease_lost is not None:
            self._on_lease_lost(self)
        self.lease_lost.set()
        self.trace.event(_loss_event(reason), {"tenure.reason": reason})
        log.warning("lease lost (%s)", reason, extra=self.log_extra)
        for callback in list(self._on_lost):
            callback()

    def check_lease(self) -> None:
        """Raise LeaseLost if the lease is gone or can no longer be trusted (R5).

        Call it before any irreversible effect. Uses the signal from the heartbeat and a local
        monotonic deadline (a duration, not a wall-clock time) for when heartbeats cannot reach
        the database.
        """
        if self.lease_lost.is_set():  # also true, and signalled, once the local deadline has passed
            raise LeaseLost(f"lease of job {self.job.id} lost: {self.lease_lost_reason}")

    def heartbeat(self) -> None:
        """Renew now (all of this worker's leases, in one statement) and check the outcome."""
        self._heartbeat_now()
        self.check_lease()

    # checkpoints and effects -------------------------------------------------------------
    def checkpoint(self, step: str, data: Any = None) -> None:
        """Record that ``step``'s effect is committed; raises LeaseLost if this attempt is stale."""
        self.check_lease()
        with self._repo() as repo:
            ok = repo.checkpoint(self.worker_id, self.job.id, self.job.lock_token, step, data, queue=self.job.queue)
        if not ok:
            self._refuse_stale("checkpoint")
        self.job = replace(self.job, checkpoint_step=step, checkpoint_data=data)

    def rate_limited(self, retry_after: float, *, limit: str | None = None) -> NoReturn:
        """Hand the job back after an API said to slow down (HTTP 429): pending again in
        ``retry_after`` seconds (database clock), without counting this attempt; with ``limit``,
        that rate limit's bucket (the job's key's, if per key) is emptied and paused as long.
        Raises :class:`~tenure.worker.backpressure.RateLimited` (let it propagate), or ValueError
        for a bad ``retry_after`` (0 to one day) or an unknown limit, before anything changes."""
        delay = check_retry_after(retry_after)
        if limit is not None:
            with self._repo() as repo:
                if not repo.rate_limit_known(check_limit(limit)):
                    raise ValueError(f"no rate limit named {limit!r} (tenure.flow.set_rate_limit creates one)")
        raise RateLimited(delay, limit)

    @contextmanager
    def effect(self, key: str, *, defer_seconds: float = 1.0,
               reconcile: Reconcile | None = None) -> Iterator[Effect]:
        """Guard a side effect with the execution store (R14).

        ``with ctx.effect("invoice:42:email:v1") as eff:`` — if ``eff.already_succeeded`` skip
        the body and use ``eff.result_ref``; otherwise perform the effect with ``key`` as the
        provider's idempotency key and call ``eff.succeeded(ref)``. If another live attempt holds
        the key, the job is deferred (no attempt used). An exception inside marks the key
        ``retrying`` so a later attempt may take it over at once.

        If an earlier attempt may have performed the effect without recording it (its worker
        died, or its success could not be written), the key is *in doubt*: ``reconcile(key)``
        asks the provider (a reference: recorded as succeeded, body skipped; None: run the body,
        with ``eff.in_doubt`` True). Without ``reconcile`` the attempt raises
        :class:`EffectInDoubt` and the job is dead-lettered as ambiguous.

        Traced as a child span ``tenure.effect`` of the attempt, with ``tenure.effect.key`` and
        ``tenure.effect.outcome`` (``ran``, ``already_succeeded``, ``reconciled``, ``in_doubt``
        or ``deferred``).
        """
        with self.trace.effect(key) as span, self._effect(key, span, defer_seconds, reconcile) as eff:
            yield eff

    @contextmanager
    def _effect(self, key: str, span: tracing.EffectSpan, defer_seconds: float,
                reconcile: Reconcile | None) -> Iterator[Effect]:
        self.check_lease()
        self.used_effect = True
        sent = time.monotonic()
        with self._repo() as repo:
            row = repo.execution_claim(key, self.job.id, self.job.lock_token, self.lease_seconds)
        self.effect_deadline = sent + self.lease_seconds
        outcome, in_doubt = row["outcome"], row["outcome"] == "in_doubt"
        if outcome == "leased_by_other_worker":
            self._dedup(False)
            span.outcome("deferred")
            raise EffectDeferred(key, defer_seconds)
        ref = row["result_ref"]
        if in_doubt:
            span.outcome("in_doubt")
            outcome, ref = self._settle_doubt(key, reconcile)
            span.outcome("reconciled" if outcome == "already_succeeded" else "in_doubt")
        else:
            span.outcome("already_succeeded" if outcome == "already_succeeded" else "ran")
        self._dedup(outcome == "already_succeeded")
        eff = Effect(key, outcome, ref, self, in_doubt=in_doubt)
        if self._effect_hook is not None and eff.outcome == "claimed":
            self._effect_hook(self, True)
        try:
            yield eff
        except BaseException as exc:
            if eff.outcome == "claimed" and not eff._done and not eff._unrecorded:
                failure = classify_exception(exc) if isinstance(exc, Exception) else None
                if may_have_applied(exc, failure):
                    # The request may have reached the provider (its answer was lost): the next
                    # attempt must reconcile, not re-run the body blindly (issue 22, item 7).
                    self._give_up_key(key, retrying=True, error_code="in_doubt")
                else:
                    permanent = isinstance(failure, PermanentError)
                    self._give_up_key(key, retrying=not permanent,
                                      error_code=failure.code if failure else "interrupted")
            raise
        finally:
            if self._effect_hook is not None and eff.outcome == "claimed":
                self._effect_hook(self, False)
        if eff.outcome == "claimed" and not eff._done:
            raise RuntimeError(f"effect {key!r}: call eff.succeeded(result_ref) inside the with block")

    def _settle_doubt(self, key: str, reconcile: Reconcile | None) -> tuple[str, str | None]:
        """The key is ours but in doubt: ask ``reconcile``; (``already_succeeded``, its reference)
        or (``claimed``, None)."""
        log.warning("effect %r is in doubt: an earlier attempt may have performed it", key, extra=self.log_extra)
        if reconcile is None:
            self._give_up_key(key, retrying=False, error_code="in_doubt")
            raise EffectInDoubt(key)
        try:
            ref = reconcile(key)
        except BaseException:
            self._give_up_key(key, retrying=False, error_code="in_doubt")
            raise
        if ref is None:
            return "claimed", None
        with self._repo() as repo:
            ok = repo.execution_succeed(key, self.job.lock_token, ref)
        if not ok:
            self._count_stale("effect_succeed")
            raise LeaseLost(f"effect {key!r} was taken over by another attempt")
        self._recorded(key)
        return "already_succeeded", ref

    def _give_up_key(self, key: str, *, retrying: bool, error_code: str) -> None:
        """Best effort: a key that cannot be given up stays in flight, and in doubt for the next attempt."""
        try:
            with self._repo() as repo:
                repo.execution_fail(key, self.job.lock_token, retrying=retrying, error_code=error_code)
        except psycopg.Error as exc:
            log.warning("could not give up effect %r (%s); the next attempt finds it in doubt", key,
                        first_line(exc), extra=self.log_extra)

    _dedup_hook: Callable[[JobContext, bool], None] | None = None
    """Counts an effect's idempotency check (hit: the effect already succeeded)."""
    _effect_hook: Callable[[JobContext, bool], None] | None = None
    """Told when a claimed effect opens (True) and closes (False): the heartbeat keeps its key."""

    _on_effect_recorded: Callable[[JobContext, str], None] | None = None
    """Told when an effect's success was acknowledged (re-checked after a reconnect)."""

    def _recorded(self, key: str) -> None:
        if self._on_effect_recorded is not None:
            self._on_effect_recorded(self, key)

    def _dedup(self, hit: bool) -> None:
        if self._dedup_hook is not None:
            self._dedup_hook(self, hit)

    def _refuse_stale(self, operation: str) -> NoReturn:
        """End this attempt's write ``operation`` that the database refused because the token no
        longer holds the job: count and trace it, signal the lost lease, raise LeaseLost."""
        self._count_stale(operation)
        self.signal_lease_lost(f"{operation} rejected: token no longer current")
        raise LeaseLost(f"{operation} of job {self.job.id} rejected: token no longer current")

    def _count_stale(self, operation: str) -> None:
        self._on_stale(self, operation)
        self.stale_traced(operation)

    def stale_traced(self, operation: str) -> None:
        """Put a refused write of this attempt into its trace (:meth:`tracing.AttemptSpan.stale_write`)."""
        job = self.job
        self.trace.stale_write(operation, queue=job.queue, job_id=job.id, trace_context=job.trace_context,
                               fence=job.fence)


def _loss_event(reason: str) -> str:
    """The span event of a lost lease: ``tenure.cancel``, ``tenure.timeout`` or ``tenure.lease_lost``."""
    if reason.startswith("job cancelled"):
        return "tenure.cancel"
    if reason.startswith("task timeout"):
        return "tenure.timeout"
    return "tenure.lease_lost"
