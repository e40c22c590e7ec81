"""Pure helpers of the flow-control scenarios (bench/fairness.py, bench/flow_rate.py): Jain's
fairness index, the order of the claims, the window in which every key has work, the steady rate
of a rate-limited drain and which pg_stat_statements rows are tenure's claim.

No I/O and no database here, so tests/unit/test_bench_flowmath.py can check them directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def jain_index(shares: Sequence[float]) -> float:
    """Jain's fairness index of ``shares`` (x_k >= 0): ``(sum x)^2 / (n * sum x^2)``; 1 when
    every key got the same, ``1/n`` when one key got everything. Raises ValueError for no keys
    or all zeros (nothing ran: no index)."""
    if not shares:
        raise ValueError("Jain's index of no keys")
    if any(x < 0 for x in shares):
        raise ValueError("Jain's index of a negative share")
    squares = sum(float(x) * x for x in shares)
    if squares == 0:
        raise ValueError("Jain's index when nothing ran")
    return float(sum(shares)) ** 2 / (len(shares) * squares)


@dataclass(frozen=True)
class FairWindow:
    """From the first claim to the one in which the first key runs out of jobs (its last job)."""

    first: float
    last: float
    """The window's first and last claim (their order values, as given)."""
    counts: dict[str, int]
    """Per key: its jobs claimed in the window, both ends included."""
    first_out: str
    """The key whose last job was claimed first (the one that ran out)."""

    @property
    def jain(self) -> float:
        return jain_index(list(self.counts.values()))


def fair_window(claims: Mapping[str, Sequence[float]]) -> FairWindow:
    """The window in which every key of ``claims`` (key → the claim order of each of its jobs,
    see :func:`claim_order`) still had work, and each key's jobs claimed in it. The jobs of the
    claim that takes the first key's last job count (the end is inclusive)."""
    if not claims or any(not c for c in claims.values()):
        raise ValueError("every key needs at least one job")
    first_out = min(claims, key=lambda k: (max(claims[k]), k))
    last = max(claims[first_out])
    first = min(min(c) for c in claims.values())
    return FairWindow(first, last, {k: sum(1 for t in c if t <= last) for k, c in claims.items()}, first_out)


def claim_order(started: Sequence[float], fences: Sequence[int]) -> list[int]:
    """Each job's claim, numbered in the order the claims took their jobs. A claim stamps its
    jobs with its transaction's start (``started_at = now()``), and jobs get their fences from a
    sequence as they are claimed: claims of one queue through ``flow_claim`` wait for its lock,
    so one that began first may claim second, and ``started_at`` alone can misorder them. The
    jobs of one start time are one claim; claims are ordered by their first fence."""
    if len(started) != len(fences):
        raise ValueError("one fence per start")
    first_fence: dict[float, int] = {}
    for s, f in zip(started, fences):
        first_fence[s] = min(f, first_fence.get(s, f))
    rank = {s: i for i, s in enumerate(sorted(first_fence, key=lambda s: first_fence[s]))}
    return [rank[s] for s in started]


@dataclass(frozen=True)
class SteadyRate:
    jobs: int
    """Jobs started after the window's first start (its own claim's jobs were paid before it)."""
    seconds: float
    rate: float


def steady_rate(starts: Iterable[float], skip: int) -> SteadyRate | None:
    """Jobs started per second once the first ``skip`` starts (a bucket's initial burst) are
    left out: with ``t0`` the first start left, the jobs started after ``t0`` over ``last - t0``.
    The jobs stamped ``t0`` are left out too: a claim stamps all its jobs with its own time, and
    the tokens they took were there before ``t0``; those after ``t0`` were earned in the window.
    None when fewer than two distinct start times remain."""
    rest = sorted(starts)[max(0, skip):]
    if not rest:
        return None
    t0, last = rest[0], rest[-1]
    if last <= t0:
        return None
    jobs = sum(1 for t in rest if t > t0)
    return SteadyRate(jobs, last - t0, jobs / (last - t0))


CLAIM_MARKERS = (
    ("queue_claim_gate", "SELECT name, flow, has_row FROM asked"),
    ("job_claim_flow", "flow_claim("),
    ("job_claim_gated", "CASE WHEN s.max_running IS NULL THEN"),
    ("queue_flow_lock", "ORDER BY s.name FOR UPDATE"),
    ("job_claim", "FROM blocked WHERE blocked"),
)
"""A text in each of the claim's statements (src/tenure/core/sql/queries/claim.sql) free of
literals (pg_stat_statements replaces those with $n); the first that matches names it."""
_SPACE = re.compile(r"\s+")


def claim_statement(query: str) -> str | None:
    """Which of the claim's statements a pg_stat_statements text is (None: not a claim)."""
    text = _SPACE.sub(" ", query)
    return next((name for name, marker in CLAIM_MARKERS if marker in text), None)
