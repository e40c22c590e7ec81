"""The job browser's charts without a database (issue 36 item 5): the windows and their bucket
math, the assembly of points, and the SVG renderer (valid XML, one bar per non-empty bucket,
the data-chart hooks, escaping, gaps and the empty state)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

import pytest

from tenure.ui import charts
from tenure.ui.series import WINDOWS, SeriesError, assemble, bounds, bucket_starts, parse_queue, parse_window

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("name", "step", "n"), [("1h", 60, 60), ("24h", 900, 96), ("7d", 3600, 168)])
def test_windows_and_bucket_starts(name: str, step: int, n: int) -> None:
    window = parse_window(name)
    assert (window.bucket_seconds, window.buckets) == (step, n)
    now = 1_800_000_123.75  # not on a bucket edge
    starts = bucket_starts(now, window)
    assert len(starts) == n and all(s % step == 0 for s in starts)
    assert starts[-1] <= now < starts[-1] + step  # the last bucket is the current one
    assert all(b - a == step for a, b in zip(starts, starts[1:], strict=False))
    since, until = bounds(now, window)
    assert since == datetime.fromtimestamp(starts[0], tz=timezone.utc)
    assert until - since == timedelta(seconds=window.seconds)


def test_a_bucket_edge_starts_a_new_bucket() -> None:
    window = WINDOWS["1h"]
    assert bucket_starts(1_800_000_060.0, window)[-1] == 1_800_000_060
    assert bucket_starts(1_800_000_059.999, window)[-1] == 1_800_000_000


def test_bad_windows_and_queues() -> None:
    assert parse_window(None).name == "1h" and parse_window("").name == "1h"
    for bad in ("2h", "1H", "60m", "7 d"):
        with pytest.raises(SeriesError, match="unknown window"):
            parse_window(bad)
    assert parse_queue(None) is None and parse_queue("") is None and parse_queue("mail") == "mail"
    for bad in ("x" * 501, " ", "a\nb"):
        with pytest.raises(SeriesError, match="invalid queue"):
            parse_queue(bad)


def test_assemble_fills_missing_buckets() -> None:
    window = WINDOWS["1h"]
    starts = bucket_starts(1_800_000_000.0, window)
    points = assemble(starts, {0: {"completed": 3}, 59: {"completed": 2}},
                      {5: {"failed_attempts": 4, "dead_lettered": 1}}, {7: {"jobs": 2, "p50": 0.5, "p95": 1.25}},
                      {10: {"ready": 9, "blocked": 1, "running": 2}, 59: {"ready": 4, "blocked": 0, "running": 1}})
    assert len(points) == 60 and sum(p["completed"] for p in points) == 5
    assert points[5]["failed_attempts"] == 4 and points[5]["dead_lettered"] == 1
    assert (points[7]["wait_p50"], points[7]["wait_p95"], points[8]["wait_p50"]) == (0.5, 1.25, None)
    assert (points[10]["ready"], points[11]["ready"]) == (9, None)
    assert (points[-1]["ready"], points[-1]["blocked"], points[-1]["running"]) == (4, 0, 1)


def test_nice_max_and_labels() -> None:
    assert [charts.nice_max(v) for v in (0, 0.3, 1, 3, 7, 10, 11, 4500)] == [1, 0.5, 1, 5, 10, 10, 20, 5000]
    assert (charts.count_label(2000), charts.count_label(1_500_000), charts.count_label(7)) == ("2k", "1.5M", "7")
    assert (charts.seconds_label(0.25), charts.seconds_label(3), charts.seconds_label(600)) == ("250 ms", "3 s", "10 min")


def _points(n: int = 60, **values: object) -> list[dict[str, object]]:
    t0 = datetime(2026, 12, 5, 10, 0, tzinfo=timezone.utc)
    base = {"completed": 0, "failed_attempts": 0, "dead_lettered": 0, "wait_jobs": 0, "wait_p50": None,
            "wait_p95": None, "ready": None, "blocked": None, "running": None}
    return [{**base, "t": t0 + timedelta(minutes=i), **{k: (v[i] if isinstance(v, list) else v) for k, v in values.items()}}
            for i in range(n)]


def test_every_chart_is_valid_svg_with_its_hook() -> None:
    points = _points(completed=[i % 4 for i in range(60)], failed_attempts=[1 if i % 10 == 0 else 0 for i in range(60)],
                     wait_p50=[0.2 * i for i in range(60)], wait_p95=[0.5 * i for i in range(60)],
                     ready=[100 - i for i in range(60)], blocked=3, running=[i % 8 for i in range(60)])
    drawn = charts.render_all(points, 60)
    assert list(drawn) == ["throughput", "failures", "wait", "depth"]
    for kind, text in drawn.items():
        root = ET.fromstring(text)
        assert root.tag == f"{SVG}svg" and root.get("data-chart") == kind and root.get("data-points") == "60"
        assert root.find(f"{SVG}title") is not None
    throughput = ET.fromstring(drawn["throughput"])
    bars = throughput.findall(f"{SVG}rect[@data-bucket]")
    assert len(bars) == sum(1 for i in range(60) if i % 4)  # one bar per non-empty bucket
    assert throughput.get("data-total") == str(sum(i % 4 for i in range(60)))
    assert "per minute" in drawn["throughput"]
    assert ET.fromstring(drawn["failures"]).get("data-total") == "6"
    assert len(ET.fromstring(drawn["depth"]).findall(f"{SVG}polyline")) == 3
    assert ET.fromstring(drawn["depth"]).get("data-total") == "41"  # the last ready depth


def test_bars_scale_to_a_nice_maximum() -> None:
    root = ET.fromstring(charts.render("throughput", _points(completed=[0] * 59 + [7]), 60))
    bar = root.find(f"{SVG}rect[@data-bucket]")
    assert bar is not None and bar.get("data-bucket") == "59"
    plot = charts.HEIGHT - charts.TOP - charts.BOTTOM
    assert float(bar.get("height") or 0) == pytest.approx(plot * 7 / 10, abs=0.1)  # the axis tops at 10
    labels = [t.text for t in root.findall(f"{SVG}text")]
    assert "10" in labels and "5" in labels and "0" in labels and "10:59 UTC" in labels


def test_gaps_break_lines_and_an_empty_chart_says_so() -> None:
    ready: list[object] = [None] * 60
    ready[3], ready[4], ready[5], ready[20] = 1, 2, 3, 4
    root = ET.fromstring(charts.render("depth", _points(ready=ready), 60))
    assert len(root.findall(f"{SVG}polyline")) == 1 and len(root.findall(f"{SVG}circle")) == 1
    empty = ET.fromstring(charts.render("throughput", _points(), 900))
    assert empty.find(f"{SVG}text[@data-empty]") is not None and empty.get("data-total") == "0"
    assert "per 15 min" in charts.render("failures", _points(), 900)
    assert "no samples yet" in charts.render("depth", _points(), 60)


def test_text_is_escaped() -> None:
    text = charts.render("throughput", _points(3, completed=1), 60, title='<script>"x" & y</script>')
    assert "<script>" not in text and "&lt;script&gt;" in text
    ET.fromstring(text)
    with pytest.raises(ValueError, match="unknown chart"):
        charts.render("pie", _points(3), 60)
