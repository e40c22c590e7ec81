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
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return data[lo]
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


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
