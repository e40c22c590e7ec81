"""The points behind the job browser's charts (issue 36 item 5): the windows, their buckets and
the assembly of the series queries' rows into one point per bucket. Pure but for :func:`read`.

A window is the last hour (1-minute buckets), 24 hours (15-minute buckets) or 7 days (1-hour
buckets), read from the database clock: its buckets start on multiples of the bucket length
(UTC epoch), the last one is the current, partial bucket, and the window is ``[from, to)`` with
``to`` the end of that bucket. Per bucket: jobs completed (their sum is every job completed in
the window), failed attempts and dead letters, the p50 and p95 wait from ready to start of the
completed jobs that started in it, and the highest sampled depth (ready, blocked, running).

The 7-day and 24-hour windows read the buckets a reaper has rolled up (0016, hours and quarter
hours: :mod:`tenure.reaper.depth`) from the rollup, and only the others (the current bucket, and
any bucket not rolled up yet) from the jobs and their events: the counts are the same, and the
wait percentiles come from the rollup's histogram (:func:`histogram_percentile`) instead of the
jobs' exact waits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from tenure.core.repository import ReadStore, SeriesStore
from tenure.reaper.depth import ROLLUP_PERIODS


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
RAW_SPANS_MAX = 3
"""At most this many runs of buckets not rolled up are read from the jobs (one statement each per
figure); when there are more, the shortest stretches of rolled-up buckets between them are read
from the jobs too."""
WAIT_BUCKETS_PER_DECADE = 20
WAIT_BUCKET_LAST = 180
"""The wait histogram (series.sql): bucket 0 holds waits under 1 ms, bucket b in 1..179 holds
[10^((b-1)/20), 10^(b/20)) ms, and bucket 180 everything from 10^(179/20) ms (10.3 days) up."""


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


def wait_bucket_value(bucket: int) -> float:
    """The wait, in seconds, that every job of a histogram bucket stands for: the geometric middle
    of its range, 0.5 ms for bucket 0 and the lower bound of the open-ended last bucket."""
    if bucket <= 0:
        return 0.0005
    middle = min(bucket - 0.5, WAIT_BUCKET_LAST - 1.0)
    return 0.001 * 10 ** (middle / WAIT_BUCKETS_PER_DECADE)


def histogram_percentile(histogram: dict[int, int], q: float) -> float | None:
    """``percentile_cont(q)`` of the waits a histogram ``{bucket: jobs}`` counts, each job at
    its bucket's value (:func:`wait_bucket_value`): within 6% (half a bucket, 10^(1/40)) of the
    exact percentile, plus 0.5 ms for waits under 1 ms; ``None`` for no jobs."""
    buckets = sorted((b, n) for b, n in histogram.items() if n > 0)
    total = sum(n for _, n in buckets)
    if total == 0:
        return None
    rank = q * (total - 1)
    k = math.floor(rank)

    def nth(j: int) -> float:  # the value of the j-th smallest wait (0-based)
        seen = 0
        for b, n in buckets:
            seen += n
            if j < seen:
                return wait_bucket_value(b)
        return wait_bucket_value(buckets[-1][0])  # pragma: no cover

    low, high = nth(k), nth(min(k + 1, total - 1))
    return low + (rank - k) * (high - low)


def raw_spans(starts: list[int], step: int, rolled: set[int]) -> list[tuple[int, int]]:
    """The buckets of ``starts`` not in ``rolled`` as runs ``[lo, hi)`` of epoch seconds, oldest
    first, at most :data:`RAW_SPANS_MAX` (the shortest gaps between runs are merged into them)."""
    runs: list[list[int]] = []
    for start in starts:
        if start in rolled:
            continue
        if runs and runs[-1][1] == start:
            runs[-1][1] = start + step
        else:
            runs.append([start, start + step])
    while len(runs) > RAW_SPANS_MAX:
        i = min(range(len(runs) - 1), key=lambda k: runs[k + 1][0] - runs[k][1])
        runs[i][1] = runs[i + 1][1]
        del runs[i + 1]
    return [(lo, hi) for lo, hi in runs]


def _add(into: dict[int, dict[str, Any]], rows: dict[int, Any], keys: tuple[str, ...]) -> None:
    for bucket, row in rows.items():
        point = into.setdefault(bucket, {})
        for key in keys:
            point[key] = point.get(key, 0) + _int(row, key)


def _histograms(into: dict[int, dict[int, int]], rows: dict[int, Any]) -> None:
    for bucket, row in rows.items():
        histogram = into.setdefault(bucket, {})
        for b, n in zip(row["wait_buckets"], row["jobs"], strict=True):
            histogram[int(b)] = histogram.get(int(b), 0) + int(n)


def _read_rolled(repo: SeriesReader, since: datetime, until: datetime, step: int, queue: str | None,
                 starts: list[int], rolled: list[datetime]) -> tuple[dict[int, Any], dict[int, Any], dict[int, Any]]:
    """Completed, failures and wait per bucket: the rolled-up buckets outside the raw spans from
    the rollup, the raw spans (the current bucket at least) from the jobs and events."""
    spans = raw_spans(starts, step, {int(h.timestamp()) for h in rolled})
    used = [h for h in rolled if not any(lo <= h.timestamp() < hi for lo, hi in spans)]
    counts: dict[int, dict[str, Any]] = {}
    _add(counts, repo.series_rolled_counts(since, until, step, queue, used), ("completed", "failed_attempts", "dead_lettered"))
    histograms: dict[int, dict[int, int]] = {}
    _histograms(histograms, repo.series_rolled_wait(since, until, step, queue, used))
    for lo, hi in spans:
        span = (_at(lo), _at(hi))
        _add(counts, repo.series_completed(since, until, step, queue, span=span), ("completed",))
        _add(counts, repo.series_failures(since, until, step, queue, span=span), ("failed_attempts", "dead_lettered"))
        _histograms(histograms, repo.series_wait_histogram(since, until, step, queue, span=span))
    wait = {b: {"jobs": sum(h.values()), "p50": histogram_percentile(h, 0.5), "p95": histogram_percentile(h, 0.95)}
            for b, h in histograms.items() if h}
    return counts, counts, wait


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
    rolled = repo.series_rolled_periods(since, until, step) if step in ROLLUP_PERIODS else []
    if rolled:
        completed, failures, wait = _read_rolled(repo, since, until, step, queue, starts, rolled)
    else:  # 1-minute buckets, or none rolled up (no reaper ran): every job of the window
        completed, failures = repo.series_completed(since, until, step, queue), repo.series_failures(since, until, step, queue)
        wait = repo.series_wait(since, until, step, queue)
    # No live depth for the current bucket: the queue figures cost ~250 ms at 5M jobs (the
    # failed and cancelled counts); the current minute's sample shows once a reaper wrote it.
    points = assemble(starts, completed, failures, wait, repo.series_depth(since, until, step, queue))
    return {"queue": queue, "window": window.name, "bucket_seconds": step, "buckets": len(points),
            "from": since, "to": until, "now": _at(now),
            "totals": {k: sum(p[k] for p in points) for k in ("completed", "failed_attempts", "dead_lettered")},
            "points": points}
