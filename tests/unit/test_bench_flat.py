"""The window, crossing and per-minute percentile math of the sustained and flow bench scenarios
(bench/stats.py): pure functions, no database."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import stats  # noqa: E402


def _steady(rate: float, start: float, jobs: int, poll: float = 1.0) -> list[tuple[float, float]]:
    """Polls of a drain that finishes ``rate`` jobs/s from ``start`` until ``jobs`` are done."""
    samples = [(0.0, 0.0)]
    t = poll
    while True:
        done = min(jobs, max(0.0, (t - start) * rate))
        samples.append((t, done))
        if done >= jobs:
            return samples
        t += poll


def test_crossing_and_done_at_interpolate_between_polls() -> None:
    samples = [(0.0, 0.0), (1.0, 0.0), (2.0, 100.0), (4.0, 300.0)]
    assert stats.crossing(samples, 50) == pytest.approx(1.5)
    assert stats.crossing(samples, 300) == pytest.approx(4.0)
    assert stats.crossing(samples, 301) is None
    assert stats.done_at(samples, 3.0) == pytest.approx(200.0)
    assert stats.done_at(samples, -1.0) == 0.0 and stats.done_at(samples, 9.0) == 300.0
    with pytest.raises(ValueError):
        stats.done_at([], 1.0)


def test_span_rate_leaves_start_up_out() -> None:
    samples = _steady(1000.0, start=2.5, jobs=20_000, poll=0.5)  # nothing done for 2.5 s
    assert stats.first_progress(samples) == (3.0, 500.0)
    assert stats.span_rate(samples, 0, 20_000) == pytest.approx(1000.0)
    assert stats.first_progress([(0.0, 0.0)]) is None and stats.span_rate([(0.0, 0.0)], 0, 1) is None
    assert stats.span_rate(samples, 18_000, 20_000) == pytest.approx(1000.0)
    assert stats.span_rate(samples, 0, 30_000) is None


def test_window_rates_cut_the_drain_into_windows_and_keep_a_long_enough_tail() -> None:
    samples = _steady(1000.0, start=2.0, jobs=25_000)  # 2 → 27 s; the first poll seeing progress is at 3 s
    windows = stats.window_rates(samples, 10.0)
    assert [s for s, _ in windows] == pytest.approx([10.0, 10.0, 4.0])
    assert [r for _, r in windows] == pytest.approx([1000.0, 1000.0, 1000.0], rel=1e-3)
    short = _steady(1000.0, start=0.0, jobs=20_500, poll=0.5)
    assert len(stats.window_rates(short, 10.0)) == 2, "a 0.5 s tail is not a window"
    assert stats.window_rates([], 10.0) == []


def test_drain_shape_flatness_is_last_tenth_over_first_tenth() -> None:
    # 1,000 jobs/s for the first 5,000 jobs, then 500/s for the other 5,000, polled every 0.5 s.
    samples = [(t / 2, float(min(5000, t * 500))) for t in range(11)]
    samples += [(5.0 + t / 2, 5000.0 + t * 250.0) for t in range(1, 21)]
    shape = stats.drain_shape(samples, 10_000, window=5.0, fraction=0.1)
    assert shape.first == pytest.approx(1000.0), "from the first poll that saw progress (500 done at 0.5 s)"
    assert shape.last == pytest.approx(500.0)
    assert shape.flatness == pytest.approx(0.5)
    assert shape.whole == pytest.approx(9500 / 14.5)
    assert [r for _, r in shape.windows] == pytest.approx([950.0, 500.0, 500.0])
    assert shape.as_dict()["flatness"] == shape.flatness
    assert stats.drain_shape([(0.0, 0.0), (1.0, 0.0)], 100).flatness is None
    late = stats.drain_shape([(0.0, 0.0), (1.0, 20.0), (2.0, 100.0)], 100)
    assert late.first is None and late.flatness is None, "the first poll was already past the first tenth"


def test_bucket_latencies_group_by_arrival_minute() -> None:
    arrivals = [100.0 + i for i in range(180)]  # one job a second for three minutes
    latencies = [float(i % 60) for i in range(180)]  # 0..59 ms, in each minute
    latencies[179] = 1000.0
    buckets = stats.bucket_latencies(arrivals + [400.0], latencies + [5.0], start=100.0, width=60.0, buckets=4)
    b0, b1, b2, b3 = buckets
    assert b0 is not None and b0.jobs == 60 and b0.p50 == pytest.approx(29.5)
    assert b0.p99 == pytest.approx(stats.percentile([float(i) for i in range(60)], 99))
    assert b2 is not None and b2.p99 > 59.0 and b2.jobs == 60
    assert b3 is not None and b3.jobs == 1, "arrivals past the end count in the last bucket"
    assert b1 is not None and b1.as_dict()["p50_ms"] == b1.p50
    assert stats.bucket_latencies([], [], start=0.0, width=60.0, buckets=2) == [None, None]
    with pytest.raises(ValueError):
        stats.bucket_latencies([1.0], [], start=0.0, width=60.0, buckets=1)


def test_producer_catches_up_a_slow_tick_and_keeps_the_rate() -> None:
    import argparse

    from bench.worker import _due
    args = argparse.Namespace(rate=4042.0, tick=0.01)  # 40 jobs per 10 ms tick
    assert _due(args, 0, 0) == 40
    assert _due(args, 4, 40) == 160, "ticks 1-3 were missed: the next statement sends them too"
    assert _due(args, 4, 200) == 0


def test_flow_report_compares_last_and_first_minute_p99() -> None:
    pytest.importorskip("psutil")
    from bench.flow import FlowResult, report
    b: list[stats.Bucket | None] = [stats.Bucket(0, 100, 5.0, 20.0), stats.Bucket(1, 100, 6.0, 23.0)]
    tenure = FlowResult("tenure", 700.0, 1000.0, 2.0, 200, 120.0, 200, b, [(0.0, 0), (5.0, 12)], 40.0, 50.0)
    slow = FlowResult("pgqueuer", 350.0, 500.0, 2.0, 200, 120.0, 199, [b[0], stats.Bucket(1, 99, 9.0, 40.0)])
    assert tenure.p99_ratio == pytest.approx(1.15) and slow.p99_ratio == pytest.approx(2.0)
    text, data = report({"tenure": tenure, "pgqueuer": slow}, 0.7)
    assert "1.15× PASS" in text and "2.00× MISS" in text and "70% of 1000/s" in text
    assert data["systems"]["tenure"]["max_depth"] == 12 and not tenure.overloaded
    assert FlowResult("x", 100.0, None, 1.0, 0, 1.0, 0, [None], [(5.0, 1001)]).overloaded
    assert data["systems"]["pgqueuer"]["per_minute"][1]["p99_ms"] == 40.0
    assert FlowResult("tenure", 1.0, None, 1.0, 0, 1.0, 0, [None]).p99_ratio is None
