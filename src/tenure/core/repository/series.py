"""The job browser's charts (issue 36 item 5): per-bucket counts over a window, and the queue
depth samples a reaper writes once a minute. The window and its buckets are the caller's
(:mod:`tenure.ui.series`, from the database clock); each query answers ``{bucket: row}`` with
``bucket = floor((t - since) / step)``, missing buckets being empty. Unprepared, as the browse
area's queries are: a NULL queue folds away at plan time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class SeriesQueries(RepositoryBase):
    """The series area: reads for the charts, and the one write of depth samples."""

    def series_completed(self, since: datetime, until: datetime, step: float, queue: str | None = None) -> dict[int, Row]:
        return self._series("queue_series_completed", since, until, step, queue)

    def series_failures(self, since: datetime, until: datetime, step: float, queue: str | None = None) -> dict[int, Row]:
        return self._series("queue_series_failures", since, until, step, queue)

    def series_wait(self, since: datetime, until: datetime, step: float, queue: str | None = None) -> dict[int, Row]:
        return self._series("queue_series_wait", since, until, step, queue)

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

    def _series(self, name: str, since: datetime, until: datetime, step: float, queue: str | None) -> dict[int, Row]:
        params: dict[str, Any] = {"since": since, "until": until, "step": float(step), "queue": queue}
        return {int(r["bucket"]): r for r in self._unprepared(name, params)}
