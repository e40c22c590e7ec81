"""The task registry a worker serves: ``app = tenure.App()`` and ``@app.task("name")``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenure.core.backoff import RetryPolicy
from tenure.core.errors import ConfigError, ExceptionMapper, JobSpecError
from tenure.worker.periodic import CATCH_UP_DEFAULT, Schedule

if TYPE_CHECKING:
    import psycopg

    from tenure.core.repository import EnqueueResult
    from tenure.core.unique import Unique

Validator = Callable[[Any], None]
"""Raises (any exception) when a payload violates the task's schema."""
FlowKeyOf = Callable[[Any], str | None]
"""Derives a job's flow key from its payload (None: the job has no key); see :meth:`App.enqueue`."""


@dataclass(frozen=True)
class Task:
    """A registered handler and its per-task policy."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    queue: str
    retry: RetryPolicy
    """The app's policy with this task's own overrides applied."""
    validate: Validator | None = None
    payload_version: int = 1
    error_mappers: tuple[ExceptionMapper, ...] = ()
    overrides: tuple[tuple[str, float], ...] = ()
    """Retry fields the task set itself; they win over a queue policy given to the worker."""
    timeout: float | None = None
    """Seconds one attempt may run (from its start in the worker), separate from the lease;
    None: unbounded (only ``--max-lease-total`` bounds it)."""
    flow_key: FlowKeyOf | None = None
    """Derives the flow key of a job enqueued with :meth:`App.enqueue` from its payload."""
    rate_limit: str | None = None
    """The rate limit a job enqueued with :meth:`App.enqueue` names (docs/flow.md)."""
    rate_units: int = 1
    """The tokens such a job takes from it."""
    unique: Unique | None = None
    """The unique declaration of a job enqueued with :meth:`App.enqueue` (docs/unique.md)."""

    @property
    def rate_ref(self) -> str | None:
        """``"NAME:UNITS"`` of the task's rate limit, None without one."""
        return f"{self.rate_limit}:{self.rate_units}" if self.rate_limit is not None else None

    def derive_flow_key(self, payload: Any) -> str | None:
        """The flow key the task's ``flow_key`` callable gives ``payload`` (None without one).
        A callable that raises, or returns neither a string nor None, or a key enqueue would
        refuse (empty, over 200 bytes, a NUL) is a JobSpecError naming the task."""
        if self.flow_key is None:
            return None
        try:
            key = self.flow_key(payload)
        except Exception as exc:  # noqa: BLE001 - any error of user code is the task's to report
            raise JobSpecError(f"task {self.name!r}: its flow_key callable raised "
                               f"{type(exc).__name__}: {exc}"[:500]) from exc
        if key is None:
            return None
        if not isinstance(key, str):
            raise JobSpecError(f"task {self.name!r}: its flow_key callable must return a string or None, "
                               f"got {type(key).__name__} {key!r}"[:500])
        from tenure.core.repository.specs import check_flow_key
        try:
            return check_flow_key(key)
        except JobSpecError as exc:
            raise JobSpecError(f"task {self.name!r}: its flow_key callable gave a bad key: {exc}") from None

    def retry_policy(self, queue_policy: RetryPolicy | None) -> RetryPolicy:
        """The effective policy: task overrides, else the worker's queue policy, else the app's."""
        if queue_policy is None:
            return self.retry
        own = dict(self.overrides)
        return RetryPolicy(base_delay=own.get("base_delay", queue_policy.base_delay),
                           max_delay=own.get("max_delay", queue_policy.max_delay),
                           max_attempts=int(own.get("max_attempts", queue_policy.max_attempts)))

    def check_payload(self, payload: Any) -> str | None:
        """None when the payload is valid, else the reason (used by the worker and DLQ replay)."""
        if self.validate is None:
            return None
        try:
            self.validate(payload)
        except Exception as exc:  # noqa: BLE001 - any validator error means invalid
            return f"{type(exc).__name__}: {exc}"[:500]
        return None


@dataclass
class App:
    """A set of tasks plus defaults. Handlers take ``(ctx)`` and may be sync or ``async``."""

    name: str = "tenure"
    default_queue: str = "default"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    error_mappers: tuple[ExceptionMapper, ...] = ()
    tasks: dict[str, Task] = field(default_factory=dict)
    schedules: list[Schedule] = field(default_factory=list)
    """Periodic jobs declared with :meth:`periodic`; every worker of the app runs the scheduler."""

    def periodic(self, cron: str, *, name: str, payload: Any = None, task: str | None = None,
                 queue: str | None = None, timezone: str = "UTC", priority: int = 0,
                 catch_up: int = CATCH_UP_DEFAULT, max_attempts: int | None = None,
                 **task_options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Enqueue ``task`` (default: ``name``) with ``payload`` at every slot of ``cron``,
        exactly once per slot however many workers run (see :mod:`tenure.worker.periodic`).

        Used as a decorator it also registers the function as that task (unless a task of that
        name exists); ``task_options`` (e.g. ``timeout=``) go to :meth:`task`. An invalid cron
        expression, time zone or payload raises ConfigError at import time.
        """
        task_name = task or name
        schedule = Schedule(cron=cron, name=name, task=task_name, payload=payload,
                            queue=queue or (self.tasks[task_name].queue if task_name in self.tasks
                                            else self.default_queue),
                            timezone=timezone, priority=priority, catch_up=catch_up,
                            max_attempts=max_attempts or self.retry.max_attempts)
        schedule.validate()
        if any(s.name == name for s in self.schedules):
            raise ConfigError(f"periodic job {name!r} declared twice")
        self.schedules.append(schedule)

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if task_name not in self.tasks:
                self.task(task_name, queue=schedule.queue, max_attempts=max_attempts, **task_options)(fn)
            return fn

        return register

    def task(self, name: str | None = None, *, queue: str | None = None,
             max_attempts: int | None = None, base_delay: float | None = None,
             max_delay: float | None = None, validate: Validator | None = None,
             payload_version: int = 1, timeout: float | None = None,
             error_mappers: tuple[ExceptionMapper, ...] = (),
             flow_key: FlowKeyOf | None = None, rate_limit: str | None = None,
             rate_units: int = 1, unique: Unique | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler under ``name`` (default: the function name).

        ``timeout`` bounds one attempt's run time in seconds: an async handler is cancelled, a
        sync one is abandoned (its slot freed, as for a lost lease), and the job is retried
        with error code ``task_timeout``.

        ``flow_key`` is a function of the payload returning the job's flow key (a string) or
        None, e.g. ``flow_key=lambda p: f"tenant:{p['tenant']}"``: :meth:`enqueue` derives the
        key of each job of this task with it (docs/flow.md).

        ``rate_limit`` names a rate limit (``tenure flow rate NAME``) that each job of this task
        enqueued with :meth:`enqueue` takes ``rate_units`` tokens of when claimed (docs/flow.md).

        ``unique`` (``tenure.Unique(by=["customer_id"], period=300)``) keeps at most one job of
        this task per key among jobs enqueued with :meth:`enqueue` (docs/unique.md).
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0 or timeout != timeout or timeout == float("inf")):
            raise ConfigError(f"task timeout must be a positive number of seconds, got {timeout!r}")
        if flow_key is not None and not callable(flow_key):
            raise ConfigError(f"task flow_key must be a function of the payload, got {flow_key!r}")
        _check_task_rate(rate_limit, rate_units)
        from tenure.core.unique import Unique as UniqueType
        if unique is not None and not isinstance(unique, UniqueType):
            raise ConfigError(f"task unique must be a tenure.Unique, got {unique!r}"[:300])

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            task_name = name or fn.__name__
            if task_name in self.tasks:
                raise ConfigError(f"task {task_name!r} registered twice")
            policy = RetryPolicy(
                base_delay=self.retry.base_delay if base_delay is None else base_delay,
                max_delay=self.retry.max_delay if max_delay is None else max_delay,
                max_attempts=self.retry.max_attempts if max_attempts is None else max_attempts)
            policy.validate()
            self.tasks[task_name] = Task(
                name=task_name, fn=fn, is_async=inspect.iscoroutinefunction(fn),
                queue=queue or self.default_queue, retry=policy, validate=validate,
                payload_version=payload_version, error_mappers=error_mappers + self.error_mappers,
                timeout=float(timeout) if timeout is not None else None, flow_key=flow_key,
                rate_limit=rate_limit, rate_units=rate_units, unique=unique,
                overrides=tuple((k, float(v)) for k, v in (("base_delay", base_delay), ("max_delay", max_delay),
                                                           ("max_attempts", max_attempts)) if v is not None))
            return fn

        return register

    def get(self, name: str) -> Task | None:
        return self.tasks.get(name)

    def enqueue_options(self, task: str, payload: Any = None, *, queue: str | None = None,
                        flow_key: str | None = None) -> tuple[Task, str, str | None]:
        """The registered task, the queue and the flow key :meth:`enqueue` gives a job: the
        task's queue unless ``queue`` is given, the given ``flow_key``, else the one the task's
        ``flow_key`` callable derives from ``payload``. An unknown task is a ConfigError; a
        callable that fails, or gives a non-string or a bad key, a JobSpecError naming the task.
        Pure: no database."""
        registered = self.tasks.get(task)
        if registered is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise ConfigError(f"unknown task {task!r} in app {self.name!r} (registered: {known})")
        key = flow_key if flow_key is not None else registered.derive_flow_key(payload)
        return registered, queue if queue is not None else registered.queue, key

    def enqueue(self, conn: psycopg.Connection[Any], task: str, payload: Any = None, *, schema: str = "tenure",
                queue: str | None = None, flow_key: str | None = None, idempotency_key: str | None = None,
                delay: float = 0.0, max_attempts: int | None = None, correlation_id: str | None = None,
                priority: int = 0, rate_limit: str | None = None, unique: Unique | None = None) -> EnqueueResult:
        """:func:`tenure.enqueue` for a task of this app, on the caller's connection (inside its
        transaction if one is open): the job goes to the task's queue unless ``queue`` is
        given, carries the task's payload version, ``max_attempts`` defaults to the task's, and
        its flow key is ``flow_key`` when given, else what the task's ``flow_key`` callable
        derives from the payload (see :meth:`enqueue_options`); its rate limit is ``rate_limit``
        (``"NAME"`` or ``"NAME:UNITS"``) when given, else the task's, and so is its unique
        declaration (``unique``, else the task's ``unique=``). Refuses what
        :func:`tenure.enqueue` refuses (JobSpecError) before writing anything."""
        registered, target, key = self.enqueue_options(task, payload, queue=queue, flow_key=flow_key)
        from tenure.core.repository import Repository
        return Repository(conn, schema).enqueue(
            task, payload, queue=target, idempotency_key=idempotency_key, delay=delay,
            max_attempts=registered.retry.max_attempts if max_attempts is None else max_attempts,
            payload_version=registered.payload_version, correlation_id=correlation_id, priority=priority,
            flow_key=key, rate_limit=rate_limit if rate_limit is not None else registered.rate_ref,
            unique=unique if unique is not None else registered.unique)

    @property
    def queues(self) -> list[str]:
        return sorted({t.queue for t in self.tasks.values()} or {self.default_queue})


def _check_task_rate(rate_limit: Any, rate_units: Any) -> None:
    """ConfigError for a task's bad rate limit name or units (or units without a limit)."""
    from tenure.core.repository.specs import check_rate_limit_name, check_rate_units
    try:
        if rate_limit is not None:
            check_rate_limit_name(rate_limit)
        check_rate_units(rate_units)
    except JobSpecError as exc:
        raise ConfigError(f"task {exc}") from None
    if rate_limit is None and rate_units != 1:
        raise ConfigError("task rate_units needs a rate_limit")


def load_app(spec: str) -> App:
    """Import ``MODULE:ATTR`` and return the App there; a clear ConfigError otherwise."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app must look like MODULE:ATTR, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import app module {module_name!r}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise ConfigError(f"{spec!r} is not a tenure.App (found {type(app).__name__})")
    return app
