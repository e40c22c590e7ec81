"""The queue depth samples behind the job browser's depth chart (issue 36 item 5): once a
minute, a reaper cycle records each queue's ready (runnable), blocked (held by a flow limit) and
running jobs, as ``tenure stats`` counts them, in ``queue_depth_samples`` (one row per queue and
minute, whichever reaper writes first; 8 days kept). Depth history therefore starts when a
reaper of this version first ran, and has a gap wherever no reaper ran.
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


class SamplerStore(Connected, ReadStore, SeriesStore, Protocol):
    """What a sample uses: the queue figures (reads) and the samples' write (series)."""


class DepthSampler:
    """Samples at most every :data:`SAMPLE_INTERVAL` seconds; a database error is logged,
    never raised (reaping goes on). Not thread-safe (a reaper runs its cycles on one thread)."""

    def __init__(self, interval: float = SAMPLE_INTERVAL) -> None:
        self.interval = interval
        self._next = 0.0

    def run_once(self, repo: SamplerStore) -> int:
        """The queues sampled (0 when not due)."""
        now = time.monotonic()
        if now < self._next:
            return 0
        self._next = now + self.interval
        try:
            stats = repo.queue_stats(completed=False)
            repo.series_depth_sample([(s.queue, s.ready, s.blocked, s.running) for s in stats])
        except psycopg.Error as exc:
            if not repo.conn.autocommit:
                repo.conn.rollback()
            log.warning("queue depth sample failed (reaping goes on): %s", first_line(exc),
                        extra={"event": "depth_sample_failed"})
            return 0
        return len(stats)
