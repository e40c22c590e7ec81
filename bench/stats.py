"""Pure helpers of the benchmark runner: summaries, percentiles, ratios and the printed table.

No I/O and no database here, so tests/unit/test_bench_smoke.py can check them directly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median and range of repeated measurements of one figure."""

    median: float
    low: float
    high: float
    runs: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.low, "max": self.high, "runs": self.runs}


def summarize(values: Sequence[float]) -> Summary | None:
    """Median, min and max of the runs; None when there were no successful runs."""
    clean = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not clean:
        return None
    return Summary(statistics.median(clean), min(clean), max(clean), len(clean))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like PostgreSQL's percentile_cont."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0..100")
    return _sorted_percentile(sorted(values), q)


def throughput(jobs: int, seconds: float) -> float:
    """Jobs per second; 0 for a zero-length window (a failed run, not infinity)."""
    return jobs / seconds if seconds > 0 else 0.0


def ratio(ours: Summary | None, theirs: Summary | None) -> float | None:
    """Ratio of medians (tenure / peer); None when either side is missing or zero."""
    if ours is None or theirs is None or theirs.median == 0:
        return None
    return ours.median / theirs.median


def fmt_num(value: float | None, unit: str = "") -> str:
    """Compact human figure: 12.3k, 950, 4.56, 0.012."""
    if value is None:
        return "-"
    mag = abs(value)
    if mag >= 100_000:
        text = f"{value / 1000:.0f}k"
    elif mag >= 10_000:
        text = f"{value / 1000:.1f}k"
    elif mag >= 100:
        text = f"{value:.0f}"
    elif mag >= 10:
        text = f"{value:.1f}"
    elif mag >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return f"{text}{unit}"


def fmt_summary(s: Summary | None, unit: str = "") -> str:
    """``median (min–max)``, or ``-`` when there is nothing to show."""
    if s is None:
        return "-"
    if s.runs == 1:
        return fmt_num(s.median, unit)
    return f"{fmt_num(s.median, unit)} ({fmt_num(s.low)}–{fmt_num(s.high)})"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}×"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with columns padded to their widest cell (Markdown-compatible)."""
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, expected {len(headers)}")
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def verdict(value: float | None, target: float, higher_is_better: bool) -> str:
    """``PASS``/``MISS`` against a target; ``n/a`` when not measured."""
    if value is None:
        return "n/a"
    ok = value >= target if higher_is_better else value < target
    return "PASS" if ok else "MISS"


def interleave(systems: Sequence[str], runs: int) -> list[tuple[int, str]]:
    """The run order A B C A B C …: ``[(run index, system), ...]``."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    return [(i, s) for i in range(runs) for s in systems]


# -- drains traced over time and latencies bucketed by arrival (sustained and flow scenarios) ---
Sample = tuple[float, float]
"""``(seconds, jobs done)`` of one progress poll; seconds increase, jobs done never decrease."""


def done_at(samples: Sequence[Sample], t: float) -> float:
    """Jobs done at time ``t``, linearly interpolated between the two polls around it."""
    if not samples:
        raise ValueError("no samples")
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, d0), (t1, d1) in zip(samples, samples[1:]):
        if t <= t1:
            return d0 if t1 == t0 else d0 + (d1 - d0) * (t - t0) / (t1 - t0)
    return samples[-1][1]


def crossing(samples: Sequence[Sample], jobs: float) -> float | None:
    """When ``jobs`` jobs were done, interpolated between the last poll below and the first at or
    above it; None if the trace never reaches it."""
    prev: Sample | None = None
    for t, d in samples:
        if d >= jobs:
            if prev is None or d == prev[1]:
                return t
            return prev[0] + (t - prev[0]) * (jobs - prev[1]) / (d - prev[1])
        prev = (t, d)
    return None


def first_progress(samples: Sequence[Sample]) -> Sample | None:
    """The first poll that saw finished jobs. Rates are measured from it, not from a moment
    interpolated back into the start-up before it (when nothing was done and a poll of a full
    backlog may have taken seconds, linear progress is not a fair assumption)."""
    return next(((t, d) for t, d in samples if d > 0), None)


def span_rate(samples: Sequence[Sample], lo: float, hi: float) -> float | None:
    """Jobs per second between the moments ``lo`` and ``hi`` jobs were done; a ``lo`` at or below
    the first poll's count (``lo`` = 0: the whole drain) starts at that poll, so start-up is left
    out."""
    first = first_progress(samples)
    if first is None:
        return None
    if lo <= first[1]:
        a: float | None = first[0]
        lo = first[1]
    else:
        a = crossing(samples, lo)
    b = crossing(samples, hi)
    if a is None or b is None or b <= a:
        return None
    return (hi - lo) / (b - a)


def window_rates(samples: Sequence[Sample], width: float, *, min_tail: float = 1.0) -> list[tuple[float, float]]:
    """``(window length, jobs/s)`` per ``width``-second window, from the first poll that saw
    finished jobs to the moment the last count was reached; the final, shorter window is kept
    when it is at least ``min_tail`` seconds long."""
    first = first_progress(samples)
    if first is None or width <= 0:
        return []
    end = crossing(samples, samples[-1][1])
    assert end is not None
    out: list[tuple[float, float]] = []
    a = first[0]
    while a < end:
        b = min(a + width, end)
        if b - a < min_tail and out:
            break
        out.append((b - a, (done_at(samples, b) - done_at(samples, a)) / (b - a)))
        a = b
    return out


@dataclass(frozen=True)
class Bucket:
    """Latency figures of the jobs that arrived in one bucket (one minute) of a flow run."""

    index: int
    jobs: int
    p50: float
    p99: float

    def as_dict(self) -> dict[str, float | int]:
        return {"index": self.index, "jobs": self.jobs, "p50_ms": self.p50, "p99_ms": self.p99}


def bucket_latencies(arrivals: Sequence[float], latencies: Sequence[float], *, start: float, width: float,
                     buckets: int) -> list[Bucket | None]:
    """p50 and p99 of ``latencies`` grouped by ``arrivals`` (same order) into ``buckets`` windows of
    ``width`` seconds from ``start``; arrivals past the end count in the last bucket, an empty
    bucket is None."""
    if len(arrivals) != len(latencies):
        raise ValueError("arrivals and latencies differ in length")
    groups: list[list[float]] = [[] for _ in range(buckets)]
    for t, lat in zip(arrivals, latencies):
        groups[min(buckets - 1, max(0, int((t - start) // width)))].append(lat)
    out: list[Bucket | None] = []
    for i, g in enumerate(groups):
        if not g:
            out.append(None)
            continue
        g.sort()
        out.append(Bucket(i, len(g), _sorted_percentile(g, 50), _sorted_percentile(g, 99)))
    return out


def _sorted_percentile(data: Sequence[float], q: float) -> float:
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return data[lo]
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass(frozen=True)
class DrainShape:
    """How one traced drain went: whole rate, first and last ``fraction`` of the jobs, windows."""

    whole: float | None
    """Jobs/s from the first poll that saw finished jobs to the last job (start-up and exit left out)."""
    first: float | None
    last: float | None
    flatness: float | None
    """``last / first``: 1.0 is a drain that does not slow down as it goes."""
    windows: list[tuple[float, float]]

    def as_dict(self) -> dict[str, object]:
        return {"whole_jobs_per_s": self.whole, "first_jobs_per_s": self.first, "last_jobs_per_s": self.last,
                "flatness": self.flatness, "windows": [{"seconds": s, "jobs_per_s": r} for s, r in self.windows]}


def drain_shape(samples: Sequence[Sample], jobs: int, *, window: float = 10.0, fraction: float = 0.1) -> DrainShape:
    first = span_rate(samples, 0, fraction * jobs)
    last = span_rate(samples, (1 - fraction) * jobs, jobs)
    return DrainShape(span_rate(samples, 0, jobs), first, last,
                      last / first if first and last is not None else None, window_rates(samples, window))
