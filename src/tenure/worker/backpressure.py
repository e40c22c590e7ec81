"""Back-pressure from a handler (issue 38, item 4): ``ctx.rate_limited(retry_after=S, limit=NAME)``.

A handler told by an API to slow down (HTTP 429, a Retry-After header) hands its job back: it is
pending again, available ``S`` seconds later by the database clock, and the attempt is not
counted. With ``limit``, the named rate limit's bucket (the job's flow key's bucket for a per-key
limit) is emptied and paused until then, so no other job that consumes it is claimed meanwhile.
The handler unwinds with :class:`RateLimited`; the executor turns it into the outcome
``rate_limited``, which the acker writes as one compare-and-set on the attempt's token (a stale
attempt changes nothing and is recorded as a stale write, operation ``rate_limited``).
"""

from __future__ import annotations

import math
from typing import Any

RATE_LIMITED_DELAY_MAX = 86_400.0
"""The longest ``retry_after`` accepted, in seconds (one day): a longer one is a unit mistake
(milliseconds given as seconds), not an API's answer."""


class RateLimited(Exception):
    """Raised by ``ctx.rate_limited``: the job goes back to pending for ``delay`` seconds without
    using an attempt, and the bucket of ``limit`` (if given) is paused as long. Do not catch it."""

    def __init__(self, delay: float, limit: str | None) -> None:
        super().__init__(f"rate limited: retry after {delay:g}s" + (f" (limit {limit!r})" if limit else ""))
        self.delay = delay
        self.limit = limit


def check_retry_after(retry_after: Any) -> float:
    """Seconds as a float: a finite number from 0 to :data:`RATE_LIMITED_DELAY_MAX`; ValueError otherwise."""
    if isinstance(retry_after, bool) or not isinstance(retry_after, int | float) or not math.isfinite(retry_after) \
            or not 0 <= retry_after <= RATE_LIMITED_DELAY_MAX:
        raise ValueError(f"retry_after must be a finite number of seconds from 0 to {RATE_LIMITED_DELAY_MAX:g}, "
                         f"got {retry_after!r}")
    return float(retry_after)


def check_limit(limit: Any) -> str:
    """A rate limit's name as given (its existence is checked against the database next)."""
    if not isinstance(limit, str) or not limit:
        raise ValueError(f"limit must be the name of a rate limit, got {limit!r}")
    return limit


def event_reason(delay: float, limit: str | None) -> str:
    """The ``reason`` of the job's ``rate_limited`` event."""
    return f"retry after {delay:g}s" + (f", limit {limit}" if limit else "")
