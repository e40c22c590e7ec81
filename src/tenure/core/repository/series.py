"""The job browser's charts (issue 36 item 5): per-bucket counts over a window, the queue
depth samples a reaper writes once a minute, and the rollup a reaper writes for each closed
hour and quarter hour (0016). The window and its buckets are the caller's
(:mod:`tenure.ui.series`, from the database clock); each query answers ``{bucket: row}`` with
``bucket = floor((t - since) / step)``, missing buckets being empty. The raw reads take
``span``, the completion (or event) times ``[lo, hi)`` to read, by default the window.
Unprepared, as the browse area's queries are: a NULL queue folds away at plan time, and a
span's bounds prune job_history's day partitions.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row

ROLLUP_LOCK_TIMEOUT = 1.0
"""Seconds a rollup waits for a lock on what it reads (job_history, job_events) before it fails."""
ROLLUP_STATEMENT_TIMEOUT = 30.0
"""Seconds a rollup statement may run before it fails (a period's rows take milliseconds)."""

Span = tuple[datetime, datetime]
"""``[lo, hi)``: the completion (or event) times a raw series read covers."""


class SeriesQueries(RepositoryBase):
    """The series area: reads for the charts, and the writes of depth samples and the rollup."""

    def series_completed(self, since: datetime, until: datetime, step: float, queue: str | None = None, *,
                         span: Span | None = None) -> dict[int, Row]:
        return self._series("queue_series_completed", since, until, step, queue, span)

    def series_failures(self, since: datetime, until: datetime, step: float, queue: str | None = None, *,
                        span: Span | None = None) -> dict[int, Row]:
        return self._series("queue_series_failures", since, until, step, queue, span)

    def series_wait(self, since: datetime, until: datetime, step: float, queue: str | None = None, *,
                    span: Span | None = None) -> dict[int, Row]:
        return self._series("queue_series_wait", since, until, step, queue, span)

    def series_wait_histogram(self, since: datetime, until: datetime, step: float, queue: str | None = None, *,
                              span: Span | None = None) -> dict[int, Row]:
        """Per bucket of start, ``wait_buckets`` and their ``jobs`` (the rollup's histogram)."""
        return self._series("queue_series_wait_histogram", since, until, step, queue, span)

    def series_rolled_periods(self, since: datetime, until: datetime, seconds: int) -> list[datetime]:
        """The periods ``seconds`` long of ``[since, until)`` rolled up, oldest first."""
        params = {"since": since, "until": until, "seconds": seconds}
        return [r["period"] for r in self._unprepared("queue_series_rolled_periods", params)]

    def series_rolled_counts(self, since: datetime, until: datetime, step: float, queue: str | None,
                             periods: Sequence[datetime]) -> dict[int, Row]:
        """``completed``, ``failed_attempts`` and ``dead_lettered`` per bucket, from ``periods``
        (``step`` long)."""
        return self._rolled("queue_series_rolled_counts", since, until, step, queue, periods)

    def series_rolled_wait(self, since: datetime, until: datetime, step: float, queue: str | None,
                           periods: Sequence[datetime]) -> dict[int, Row]:
        """Per bucket of start, the histogram of the jobs completed in ``periods`` (``step`` long)."""
        return self._rolled("queue_series_rolled_wait", since, until, step, queue, periods)

    def series_depth(self, since: datetime, until: datetime, step: float, queue: str | None = None) -> dict[int, Row]:
        return self._series("queue_series_depth", since, until, step, queue)

    def series_queue_known(self, queue: str) -> bool:
        rows = self._unprepared("queue_series_known", {"queue": queue})
        return bool(rows and rows[0]["known"])

    def series_depth_sample(self, depths: Sequence[tuple[str, int, int, int]]) -> None:
        """Record this minute's ``(queue, ready, blocked, running)`` of each queue (once per
        minute and queue, whoever writes first), and delete samples older than 8 days."""
        self._rows("queue_depth_sample", {"queues": [d[0] for d in depths], "ready": [d[1] for d in depths],
                                           "blocked": [d[2] for d in depths], "running": [d[3] for d in depths]})

    def series_rollup_due(self, seconds: int, *, keep: float, lag: float, limit: int) -> list[datetime]:
        """Delete rolled-up periods ``seconds`` long older than ``keep`` seconds, and list the
        closed ones since then (ended ``lag`` seconds ago or more) not rolled up yet, newest
        first, at most ``limit``."""
        params = {"seconds": seconds, "keep": float(keep), "lag": float(lag), "limit": limit}
        return [r["period"] for r in self._rows("queue_series_rollup_due", params)]

    def series_rollup_period(self, period: datetime, seconds: int, *, lag: float) -> bool:
        """Roll up, for every queue, the period ``seconds`` long (from a multiple of ``seconds``
        since the epoch) that holds ``period``: whether this call did (False: rolled up already,
        by another reaper too, or not ended ``lag`` seconds ago). A lock held on what it reads
        fails it after :data:`ROLLUP_LOCK_TIMEOUT` seconds (``LockNotAvailable``) rather than
        holding up its caller, the reaper; the next cycle tries again."""
        lo = math.floor(period.timestamp() / seconds) * seconds
        params = {"seconds": seconds, "lo": _at(lo), "hi": _at(lo + seconds), "lag": float(lag)}
        # Its own transaction on an autocommit connection (the timeouts end with it); else the
        # caller's, which it leaves open.
        with self.conn.transaction() if self.conn.autocommit else contextlib.nullcontext():
            self._rows("queue_series_rollup_bound", {"lock_ms": int(ROLLUP_LOCK_TIMEOUT * 1000),
                                                     "statement_ms": int(ROLLUP_STATEMENT_TIMEOUT * 1000)})
            rows = self._unprepared("queue_series_rollup_period", params)
        return bool(rows and rows[0]["rolled"])

    def _series(self, name: str, since: datetime, until: datetime, step: float, queue: str | None,
                span: Span | None = None) -> dict[int, Row]:
        lo, hi = span or (since, until)
        params: dict[str, Any] = {"since": since, "until": until, "step": float(step), "queue": queue, "lo": lo, "hi": hi}
        return {int(r["bucket"]): r for r in self._unprepared(name, params)}

    def _rolled(self, name: str, since: datetime, until: datetime, step: float, queue: str | None,
                periods: Sequence[datetime]) -> dict[int, Row]:
        params: dict[str, Any] = {"since": since, "until": until, "step": float(step), "seconds": int(step),
                                  "queue": queue, "periods": list(periods)}
        return {int(r["bucket"]): r for r in self._unprepared(name, params)}


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)
