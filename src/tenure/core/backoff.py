"""Exponential backoff with full jitter (R10), shared by handler retries and reaper requeues.

``cap = min(max_delay, base * 2**attempt)`` and ``delay = uniform(0, cap)``. Full jitter spreads
a burst of failures over the whole window, so retries do not stampede a recovering dependency.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenure.core.errors import ConfigError

BASE_DELAY_DEFAULT = 1.0
MAX_DELAY_DEFAULT = 300.0
MAX_ATTEMPTS_DEFAULT = 5


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed attempt is rescheduled."""

    base_delay: float = BASE_DELAY_DEFAULT
    """Seconds; the cap of the first retry's jitter window is ``base_delay * 2``."""
    max_delay: float = MAX_DELAY_DEFAULT
    """Seconds; upper bound of any jitter window."""
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    """Attempts (claims that ran the handler) before the job is dead-lettered."""

    def validate(self) -> None:
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError("retry delays must be >= 0")
        if self.max_delay < self.base_delay:
            raise ConfigError(f"max delay {self.max_delay}s is below base delay {self.base_delay}s")
        if self.max_attempts < 1:
            raise ConfigError("max attempts must be >= 1")


def backoff_cap(attempt: int, base_delay: float, max_delay: float) -> float:
    """Upper bound of the jitter window after ``attempt`` attempts (attempt >= 1)."""
    exponent = min(max(attempt, 0), 62)
    return float(min(max_delay, base_delay * (2 ** exponent)))


def full_jitter_delay(attempt: int, policy: RetryPolicy,
                      rng: random.Random | None = None) -> float:
    """A random delay in ``[0, cap]`` for the retry after ``attempt`` attempts."""
    cap = backoff_cap(attempt, policy.base_delay, policy.max_delay)
    return (rng or random).uniform(0.0, cap)
