"""Error types shared by every tenure component.

Handler-facing classes (R11) decide what happens to a failed attempt:
``RetryableError`` backs off and retries, ``PermanentError`` dead-letters at once,
``AmbiguousError`` (the request may have taken effect) retries only when the effect is
guarded by an idempotency key. Anything else a handler raises is classified by
:func:`classify_exception`.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable


class TenureError(Exception):
    """Base class of tenure's own errors."""


class ConfigError(TenureError, ValueError):
    """Invalid configuration: the CLI prints it on one line and exits 2."""


class UniqueKeyHeldError(ConfigError):
    """A failed or cancelled job cannot go back to pending: another live job holds its unique key
    (docs/unique.md). The CLI exits 2; the UI's API answers 409."""


class JobSpecError(TenureError, ValueError):
    """An enqueue request tenure refuses (empty task or queue, negative delay, attempts below 1,
    a payload it cannot store...). Raised before anything is written; the CLI exits 2."""


class PayloadError(JobSpecError):
    """A payload that cannot be stored: not JSON, NaN/Infinity, a NUL character, or too large.
    Raised before anything is written."""


class SchemaTooNewError(TenureError):
    """The database schema was migrated by a newer tenure than this one; refusing to run."""


class LeaseLost(TenureError):
    """The job's lease is gone (token moved, row reaped, or the maximum total lease reached).

    Raised by ``ctx.check_lease()``; the handler must stop side effects.
    """


class JobFailure(TenureError):
    """Base of the handler-facing failure classes; ``code`` is a bounded error code."""

    default_code = "handler_error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class RetryableError(JobFailure):
    """Transient failure (timeout, rate limit, upstream 5xx): retry with backoff.

    ``retry_after`` (seconds) overrides the computed backoff, e.g. a Retry-After header.
    """

    default_code = "retryable"

    def __init__(self, message: str = "", *, code: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, code=code)
        if retry_after is not None and retry_after < 0:
            raise ValueError("retry_after must be >= 0")
        self.retry_after = retry_after


class TaskTimeout(RetryableError):
    """An attempt ran longer than its task's ``timeout``: retried with backoff like any
    retryable failure, under its own error code (and metric label) ``task_timeout``."""

    default_code = "task_timeout"


class PermanentError(JobFailure):
    """Failure that retrying cannot fix (invalid payload, bad credentials): dead-letter now."""

    default_code = "permanent"


class AmbiguousError(JobFailure):
    """The request was sent and may have taken effect (e.g. timeout after send).

    Retried only when the effect is guarded by an idempotency key (``ctx.effect``);
    otherwise the job is dead-lettered with code ``ambiguous_unguarded``.
    """

    default_code = "ambiguous"


class EffectUnrecorded(AmbiguousError):
    """The effect's body returned, but its success could not be recorded (the database stayed
    unreachable through the bounded retry). The key is left in flight, so the next attempt sees
    the effect *in doubt* instead of running the body again blindly."""

    default_code = "effect_unrecorded"


class EffectInDoubt(AmbiguousError):
    """An earlier attempt may have performed the effect without recording it (its worker died or
    could not reach the database), and the handler gave no ``reconcile``: the job is dead-lettered
    as ambiguous (``effect_in_doubt``) and the key stays in doubt for whoever replays it."""

    default_code = "effect_in_doubt"

    def __init__(self, key: str) -> None:
        super().__init__(f"effect {key!r} is in doubt: an earlier attempt may have performed it without "
                         f"recording it; reconcile with the provider (ctx.effect(..., reconcile=...))")
        self.key = key


class InvalidPayload(PermanentError):
    """The payload violates the task's schema."""

    default_code = "invalid_payload"


ExceptionMapper = Callable[[BaseException], JobFailure | None]


def classify_exception(exc: BaseException,
                       mappers: tuple[ExceptionMapper, ...] = ()) -> JobFailure:
    """Map any exception to a handler failure class with a bounded error code.

    User ``mappers`` are consulted first (the first non-None answer wins); then timeouts and
    connection errors are retryable, and everything else is retryable with ``handler_error``
    (the attempt budget bounds it).
    """
    if isinstance(exc, JobFailure):
        return exc
    for mapper in mappers:
        mapped = mapper(exc)
        if mapped is not None:
            return mapped
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return RetryableError(text, code="timeout")
    if isinstance(exc, (ConnectionError, ssl.SSLError, socket.gaierror)):
        return RetryableError(text, code="connection_error")
    if isinstance(exc, LeaseLost):
        return RetryableError(text, code="lease_lost")
    return RetryableError(text, code="handler_error")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (database errors span several), or its type name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
