"""The job browser's four charts drawn on the server as SVG text (issue 36 item 5), from the
points of :mod:`tenure.ui.series`: no library, no script. Every chart is one ``<svg>`` carrying
``data-chart`` (``throughput``, ``failures``, ``wait``, ``depth``), ``data-points`` (buckets) and
``data-total`` (completed jobs, failed attempts, jobs whose wait was measured, or the last
ready depth); every text is escaped. Times on the x axis are UTC.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

WIDTH, HEIGHT = 480, 176
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 30, 22
GREEN, AMBER, RED, BLUE, PURPLE = "#1c7c3a", "#d08a00", "#b42318", "#1f5fbf", "#6f42c1"
CHARTS = ("throughput", "failures", "wait", "depth")


@dataclass(frozen=True)
class Serie:
    label: str
    key: str
    color: str


SPECS: dict[str, tuple[str, str, tuple[Serie, ...]]] = {
    "throughput": ("Jobs done", "bars", (Serie("completed", "completed", GREEN),)),
    "failures": ("Failures", "bars",
                 (Serie("failed attempts", "failed_attempts", AMBER), Serie("dead letters", "dead_lettered", RED))),
    "wait": ("Wait from ready to start", "lines", (Serie("p50", "wait_p50", BLUE), Serie("p95", "wait_p95", PURPLE))),
    "depth": ("Depth", "lines", (Serie("ready", "ready", BLUE), Serie("blocked", "blocked", AMBER),
                                 Serie("running", "running", GREEN))),
}


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (1 for nothing)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if m * power >= value * (1 - 1e-9):
            return float(m * power)
    return float(10 * power)  # pragma: no cover


def count_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def seconds_label(value: float) -> str:
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:g} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.0f} h"


def bucket_label(bucket_seconds: int) -> str:
    return {60: "minute", 900: "15 min", 3600: "hour"}.get(bucket_seconds, f"{bucket_seconds} s")


def _time(t: datetime, bucket_seconds: int) -> str:
    return t.strftime("%m-%d %H:%M" if bucket_seconds >= 3600 else "%H:%M")


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def render(kind: str, points: Sequence[dict[str, Any]], bucket_seconds: int, *, title: str | None = None) -> str:
    """One chart of ``kind`` over ``points`` (one per bucket, oldest first) as SVG text."""
    if kind not in SPECS:
        raise ValueError(f"unknown chart {kind!r}")
    heading, style, series = SPECS[kind]
    seconds = kind == "wait"
    if kind in ("throughput", "failures"):
        heading = f"{heading} per {bucket_label(bucket_seconds)}"
    heading = title or heading
    n = len(points)
    values = [[p.get(s.key) for p in points] for s in series]
    present = [float(v) for vs in values for v in vs if v is not None]
    top = nice_max(max(present, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(n, 1)

    def x(i: int) -> float:
        return LEFT + slot * (i + 0.5)

    def y(v: float) -> float:
        return TOP + plot_h - (v / top) * plot_h

    if kind == "throughput":
        total = sum(int(p.get("completed") or 0) for p in points)
    elif kind == "failures":
        total = sum(int(p.get("failed_attempts") or 0) for p in points)
    elif kind == "wait":
        total = sum(int(p.get("wait_jobs") or 0) for p in points)
    else:
        last = next((p.get("ready") for p in reversed(points) if p.get("ready") is not None), None)
        total = int(last or 0)
    label = seconds_label if seconds else count_label
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
           f'role="img" class="chart" data-chart="{kind}" data-points="{n}" data-total="{total}" '
           f'aria-label="{escape(heading, quote=True)}">',
           f"<title>{escape(heading)}</title>",
           f'<text x="{LEFT}" y="14" font-size="12" font-weight="600" fill="#1d232b">{escape(heading)}</text>']
    lx: float = float(WIDTH - RIGHT)
    for s in reversed(series):  # the legend, right-aligned
        out.append(f'<text x="{_num(lx)}" y="14" font-size="11" text-anchor="end" fill="#3d4653">{escape(s.label)}</text>')
        lx -= 7.0 * len(s.label) + 5
        out.append(f'<rect x="{_num(lx - 9)}" y="6" width="9" height="9" fill="{s.color}"/>')
        lx -= 18
    for frac in (0.0, 0.5, 1.0):
        gy = y(top * frac)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_num(gy)}" y2="{_num(gy)}" stroke="#dde1e6"/>')
        out.append(f'<text x="{LEFT - 4}" y="{_num(gy + 4)}" font-size="10" text-anchor="end" fill="#6a7380">'
                   f"{escape(label(top * frac))}</text>")
    if n:
        for i in (0, n // 2, n - 1):
            t = points[i]["t"]
            anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
            text = _time(t, bucket_seconds) if isinstance(t, datetime) else str(t)
            out.append(f'<text x="{_num(x(i))}" y="{HEIGHT - 6}" font-size="10" text-anchor="{anchor}" fill="#6a7380">'
                       f"{escape(text + (' UTC' if i == n - 1 else ''))}</text>")
    if not present or (style == "bars" and not any(present)):
        out.append(f'<text x="{_num(LEFT + plot_w / 2)}" y="{_num(TOP + plot_h / 2)}" font-size="11" text-anchor="middle" '
                   f'fill="#6a7380" data-empty="">{"no samples yet" if kind == "depth" else "nothing in this window"}</text>')
    if style == "bars":
        for k, (s, vs) in enumerate(zip(series, values, strict=True)):
            width = slot * (0.8 if k == 0 else 0.45)
            for i, v in enumerate(vs):
                if not v:
                    continue
                h = max(float(v) / top * plot_h, 1.0)
                tip = f"{_time(points[i]['t'], bucket_seconds) if isinstance(points[i]['t'], datetime) else points[i]['t']}: {v} {s.label}"
                out.append(f'<rect x="{_num(x(i) - width / 2)}" y="{_num(TOP + plot_h - h)}" width="{_num(max(width, 0.6))}" '
                           f'height="{_num(h)}" fill="{s.color}" data-bucket="{i}"><title>{escape(tip)}</title></rect>')
    else:
        for s, vs in zip(series, values, strict=True):
            run: list[str] = []
            runs: list[list[str]] = []
            for i, v in enumerate(vs):
                if v is None:
                    if run:
                        runs.append(run)
                    run = []
                    continue
                run.append(f"{_num(x(i))},{_num(y(float(v)))}")
            if run:
                runs.append(run)
            for r in runs:
                if len(r) == 1:
                    cx, cy = r[0].split(",")
                    out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{s.color}"/>')
                else:
                    out.append(f'<polyline points="{" ".join(r)}" fill="none" stroke="{s.color}" stroke-width="1.6" '
                               f'stroke-linejoin="round"/>')
    out.append("</svg>")
    return "".join(out)


def render_all(points: Sequence[dict[str, Any]], bucket_seconds: int) -> dict[str, str]:
    return {kind: render(kind, points, bucket_seconds) for kind in CHARTS}
