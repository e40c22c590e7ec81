"""tenure: a PostgreSQL-backed job queue that ends zombie jobs.

Public API: :class:`App` (task registry), :class:`JobContext` (what a handler receives), the
error classes, :func:`enqueue` for enqueueing inside your own transaction (outbox, R17), and
:class:`Workflow` and :class:`Batch` (jobs that wait for others, jobs with callbacks: docs/workflows.md).

The names are imported on first use (:func:`__getattr__`), so that ``import tenure`` (and
`tenure sqs`, `tenure ui`, which never run a handler) does not load the worker runtime or the
database driver; ``from tenure import App`` works as ever.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tenure.core.version import __version__

if TYPE_CHECKING:
    import psycopg

    from tenure.control import CancelReport, cancel
    from tenure.core.errors import (
        AmbiguousError,
        ConfigError,
        InvalidPayload,
        LeaseLost,
        PermanentError,
        RetryableError,
    )
    from tenure.core.repository import EnqueueResult, JobSpec
    from tenure.core.unique import Unique
    from tenure.worker.app import App
    from tenure.worker.context import JobContext
    from tenure.workflows import Batch, Workflow

_LAZY = {
    "AmbiguousError": "tenure.core.errors", "ConfigError": "tenure.core.errors",
    "InvalidPayload": "tenure.core.errors", "LeaseLost": "tenure.core.errors",
    "PermanentError": "tenure.core.errors", "RetryableError": "tenure.core.errors",
    "EnqueueResult": "tenure.core.repository", "JobSpec": "tenure.core.repository",
    "CancelReport": "tenure.control", "cancel": "tenure.control", "Unique": "tenure.core.unique",
    "App": "tenure.worker.app", "JobContext": "tenure.worker.context",
    "Workflow": "tenure.workflows", "Batch": "tenure.workflows",
}
"""Each public name and the module it is imported from on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tenure' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def enqueue(conn: psycopg.Connection[Any], task: str, payload: Any = None, *, schema: str = "tenure",
            queue: str = "default", idempotency_key: str | None = None, delay: float = 0.0,
            max_attempts: int = 5, correlation_id: str | None = None, priority: int = 0,
            flow_key: str | None = None, rate_limit: str | None = None,
            unique: Unique | None = None) -> EnqueueResult:
    """Enqueue on the caller's connection, inside the caller's transaction if one is open.

    ``rate_limit`` names a rate limit, ``"NAME"`` (1 unit) or ``"NAME:UNITS"``: the claim takes
    that many tokens from its bucket (docs/flow.md); an unknown name is a JobSpecError.
    ``unique`` (:class:`tenure.Unique`) keeps at most one job per key: docs/unique.md.

    The job (and its NOTIFY) become visible only when that transaction commits, so a job can
    never refer to a business change that rolled back (transactional outbox, R17).
    """
    from tenure.core.repository import Repository
    result = Repository(conn, schema).enqueue(task, payload, queue=queue, idempotency_key=idempotency_key,
                                              delay=delay, max_attempts=max_attempts,
                                              correlation_id=correlation_id, priority=priority,
                                              flow_key=flow_key, rate_limit=rate_limit, unique=unique)
    if idempotency_key is not None:
        from tenure.observability.producer_metrics import count_enqueue_dedup
        count_enqueue_dedup(queue, task, hit=not result.created)
    return result


__all__ = ["AmbiguousError", "App", "Batch", "CancelReport", "ConfigError", "EnqueueResult", "InvalidPayload",
           "JobContext", "JobSpec", "LeaseLost", "PermanentError", "RetryableError", "Unique", "Workflow", "cancel",
           "enqueue", "__version__"]
