"""The task registry a worker serves: ``app = tenure.App()`` and ``@app.task("name")``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenure.core.backoff import RetryPolicy
from tenure.core.errors import ConfigError, ExceptionMapper
from tenure.worker.periodic import CATCH_UP_DEFAULT, Schedule

Validator = Callable[[Any], None]
"""Raises (any exception) when a payload violates the task's schema."""


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
             error_mappers: tuple[ExceptionMapper, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler under ``name`` (default: the function name).

        ``timeout`` bounds one attempt's run time in seconds: an async handler is cancelled, a
        sync one is abandoned (its slot freed, as for a lost lease), and the job is retried
        with error code ``task_timeout``.
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0 or timeout != timeout or timeout == float("inf")):
            raise ConfigError(f"task timeout must be a positive number of seconds, got {timeout!r}")

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
                timeout=float(timeout) if timeout is not None else None,
                overrides=tuple((k, float(v)) for k, v in (("base_delay", base_delay), ("max_delay", max_delay),
                                                           ("max_attempts", max_attempts)) if v is not None))
            return fn

        return register

    def get(self, name: str) -> Task | None:
        return self.tasks.get(name)

    @property
    def queues(self) -> list[str]:
        return sorted({t.queue for t in self.tasks.values()} or {self.default_queue})


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
