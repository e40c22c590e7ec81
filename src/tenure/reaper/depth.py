"""The queue depth samples behind the job browser's depth chart (issue 36 item 5): once a
minute, a reaper cycle records each queue's ready (runnable), blocked (held by a flow limit) and
running jobs, as ``tenure stats`` counts them, in ``queue_depth_samples`` (one row per queue and
minute, whichever reaper writes first; 8 days kept). Depth history therefore starts when a
reaper of this version first ran, and has a gap wherever no reaper ran.

The same cycle then rolls up the charts' closed periods (0016): each hour of the last 8 days and
each quarter hour of the last 25 hours (:data:`ROLLUP_PERIODS`) that ended :data:`ROLLUP_LAG`
seconds ago or more and is not rolled up yet, newest first, at most
:data:`ROLLUP_PERIODS_PER_CYCLE` per cycle and none once :data:`ROLLUP_BUDGET` seconds are
spent, one statement per period that only the first reaper to insert the period's row fills in.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import psycopg

from tenure.core.errors import first_line
from tenure.core.repository import Connected, ReadStore, SeriesStore

log = logging.getLogger("tenure.reaper")
SAMPLE_INTERVAL = 60.0
"""Seconds between two samples of one reaper (the table keeps one per minute and queue)."""
ROLLUP_LAG = 300.0
"""Seconds after its end before a period is rolled up: a completion or event whose transaction
commits later than this after its timestamp (the transaction's start) is left out of the rollup."""
ROLLUP_PERIODS = {3600: 8 * 86400.0, 900: 25 * 3600.0}
"""The periods rolled up (seconds: an hour for the 7-day window's buckets, a quarter hour for the
24-hour window's) and how long each is kept (seconds)."""
ROLLUP_PERIODS_PER_CYCLE = 12
"""At most this many periods rolled up per cycle (8 days of hours and 25 hours of quarter hours,
292 periods, take 25 cycles)."""
ROLLUP_BUDGET = 1.0
"""Seconds of rollup per cycle after which no further period is started."""


class SamplerStore(Connected, ReadStore, SeriesStore, Protocol):
    """What a sample uses: the queue figures (reads), and the samples' and the rollup's writes (series)."""


class DepthSampler:
    """Samples, then rolls up, at most every :data:`SAMPLE_INTERVAL` seconds; a database error
    is logged, never raised (reaping goes on). Not thread-safe (a reaper runs its cycles on one
    thread)."""

    def __init__(self, interval: float = SAMPLE_INTERVAL) -> None:
        self.interval = interval
        self._next = 0.0
        self.rolled = 0
        """Periods this sampler rolled up."""

    def run_once(self, repo: SamplerStore) -> int:
        """The queues sampled (0 when not due); then the rollup (:meth:`roll_up`)."""
        now = time.monotonic()
        if now < self._next:
            return 0
        self._next = now + self.interval
        try:
            stats = repo.queue_stats(completed=False)
            repo.series_depth_sample([(s.queue, s.ready, s.blocked, s.running) for s in stats])
        except psycopg.Error as exc:
            self._failed(repo, "queue depth sample", "depth_sample_failed", exc)
            return 0
        self.roll_up(repo)
        return len(stats)

    def roll_up(self, repo: SamplerStore, *, limit: int = ROLLUP_PERIODS_PER_CYCLE, budget: float = ROLLUP_BUDGET) -> int:
        """Roll up the closed periods not rolled up yet (hours first, each newest first, at most
        ``limit`` in all, none started after ``budget`` seconds), and delete those kept long
        enough: the periods this call rolled up (another reaper's are skipped)."""
        started, rolled, tried = time.monotonic(), 0, 0
        try:
            for seconds, keep in ROLLUP_PERIODS.items():
                for period in repo.series_rollup_due(seconds, keep=keep, lag=ROLLUP_LAG, limit=max(0, limit - tried)):
                    if time.monotonic() - started > budget:
                        limit = tried  # no further period this cycle (the next kind still deletes its old ones)
                        break
                    tried += 1
                    rolled += repo.series_rollup_period(period, seconds, lag=ROLLUP_LAG)
        except psycopg.Error as exc:
            self._failed(repo, "charts rollup", "series_rollup_failed", exc)
        self.rolled += rolled
        return rolled

    @staticmethod
    def _failed(repo: SamplerStore, what: str, event: str, exc: psycopg.Error) -> None:
        if not repo.conn.autocommit:
            repo.conn.rollback()
        log.warning("%s failed (reaping goes on): %s", what, first_line(exc), extra={"event": event})
