"""The points behind the job browser's charts (issue 36 item 5): the windows, their buckets and
the assembly of the series queries' rows into one point per bucket. Pure but for :func:`read`.

A window is the last hour (1-minute buckets), 24 hours (15-minute buckets) or 7 days (1-hour
buckets), read from the database clock: its buckets start on multiples of the bucket length
(UTC epoch), the last one is the current, partial bucket, and the window is ``[from, to)`` with
``to`` the end of that bucket. Per bucket: jobs completed (their sum is every job completed in
the window), failed attempts and dead letters, the p50 and p95 wait from ready to start of the
completed jobs that started in it, and the highest sampled depth (ready, blocked, running).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from tenure.core.repository import ReadStore, SeriesStore


class SeriesError(ValueError):
    """A bad window or queue (400)."""


@dataclass(frozen=True)
class Window:
    name: str
    seconds: int
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        return self.seconds // self.bucket_seconds


WINDOWS = {w.name: w for w in (Window("1h", 3600, 60), Window("24h", 86400, 900), Window("7d", 7 * 86400, 3600))}
WINDOW_DEFAULT = "1h"
QUEUE_MAX = 500


def parse_window(value: str | None) -> Window:
    name = value or WINDOW_DEFAULT
    if name not in WINDOWS:
        raise SeriesError(f"unknown window {name!r} (one of {', '.join(WINDOWS)})")
    return WINDOWS[name]


def parse_queue(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > QUEUE_MAX or not value.strip() or any(ord(c) < 32 for c in value):
        raise SeriesError(f"invalid queue name {value[:40]!r}")
    return value


def bucket_starts(now_epoch: float, window: Window) -> list[int]:
    """The start (UTC epoch seconds) of each bucket of ``window`` as of ``now_epoch``, oldest
    first; the last holds ``now_epoch``."""
    step = window.bucket_seconds
    last = math.floor(now_epoch / step) * step
    return [last - (window.buckets - 1 - i) * step for i in range(window.buckets)]


def bounds(now_epoch: float, window: Window) -> tuple[datetime, datetime]:
    """``[from, to)``: the start of the first bucket and the end of the current one."""
    starts = bucket_starts(now_epoch, window)
    return _at(starts[0]), _at(starts[-1] + window.bucket_seconds)


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _int(row: dict[str, Any] | None, key: str) -> int:
    return int(row[key]) if row and row.get(key) is not None else 0


def _float(row: dict[str, Any] | None, key: str) -> float | None:
    return round(float(row[key]), 6) if row and row.get(key) is not None else None


def assemble(starts: list[int], completed: dict[int, Any], failures: dict[int, Any],
             wait: dict[int, Any], depth: dict[int, Any]) -> list[dict[str, Any]]:
    """One point per bucket from the queries' ``{bucket: row}``; a bucket without a depth
    sample has ``None`` depths."""
    points = []
    for i, start in enumerate(starts):
        d = depth.get(i)
        ready, blocked, running = ((_int(d, "ready"), _int(d, "blocked"), _int(d, "running")) if d else (None, None, None))
        w = wait.get(i)
        points.append({"t": _at(start), "completed": _int(completed.get(i), "completed"),
                       "failed_attempts": _int(failures.get(i), "failed_attempts"),
                       "dead_lettered": _int(failures.get(i), "dead_lettered"),
                       "wait_jobs": _int(w, "jobs"), "wait_p50": _float(w, "p50"), "wait_p95": _float(w, "p95"),
                       "ready": ready, "blocked": blocked, "running": running})
    return points


class SeriesReader(SeriesStore, ReadStore, Protocol):
    """What :func:`read` uses: the series area and the database clock (reads)."""


def read(repo: SeriesReader, window: Window, queue: str | None) -> dict[str, Any]:
    """The answer of ``GET api/v1/series``: the window, its buckets and one point per bucket."""
    if queue is not None and not repo.series_queue_known(queue):
        raise SeriesError(f"no such queue {queue!r}")
    now = float(repo.db_now()["epoch"])
    starts = bucket_starts(now, window)
    since, until = bounds(now, window)
    step = window.bucket_seconds
    # No live depth for the current bucket: the queue figures cost ~250 ms at 5M jobs (the
    # failed and cancelled counts); the current minute's sample shows once a reaper wrote it.
    points = assemble(starts, repo.series_completed(since, until, step, queue),
                      repo.series_failures(since, until, step, queue), repo.series_wait(since, until, step, queue),
                      repo.series_depth(since, until, step, queue))
    return {"queue": queue, "window": window.name, "bucket_seconds": step, "buckets": len(points),
            "from": since, "to": until, "now": _at(now),
            "totals": {k: sum(p[k] for p in points) for k in ("completed", "failed_attempts", "dead_lettered")},
            "points": points}
