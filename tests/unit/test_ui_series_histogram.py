"""The pure parts of the charts' hourly rollup (tenure/ui/series.py): the wait histogram's
percentiles against the exact ones, and the runs of hours read from the jobs."""

from __future__ import annotations

import math
import random

import pytest

from tenure.ui.series import (
    RAW_SPANS_MAX,
    WAIT_BUCKET_LAST,
    histogram_percentile,
    raw_spans,
    wait_bucket_value,
)


def _bucket(wait: float) -> int:
    """series.sql's expression."""
    return 0 if wait < 0.001 else min(WAIT_BUCKET_LAST, 1 + math.floor(20 * math.log10(wait * 1000)))


def _exact(values: list[float], q: float) -> float:
    """percentile_cont."""
    s = sorted(values)
    rank = q * (len(s) - 1)
    k = math.floor(rank)
    return s[k] + (rank - k) * (s[min(k + 1, len(s) - 1)] - s[k])


@pytest.mark.parametrize("seed", range(20))
def test_histogram_percentiles_are_within_6_percent_plus_half_a_millisecond(seed: int) -> None:
    rng = random.Random(seed)
    waits = [10 ** rng.uniform(-4.5, 5.5) for _ in range(rng.randint(1, 300))] + [0.0] * rng.randint(0, 3)
    histogram: dict[int, int] = {}
    for w in waits:
        histogram[_bucket(w)] = histogram.get(_bucket(w), 0) + 1
    for q in (0.5, 0.95, 0.0, 1.0):
        exact, estimate = _exact(waits, q), histogram_percentile(histogram, q)
        assert estimate is not None
        assert abs(estimate - exact) <= 0.06 * exact + 0.0005, (q, exact, estimate)


def test_bucket_values() -> None:
    assert histogram_percentile({}, 0.5) is None
    assert histogram_percentile({0: 3}, 0.95) == wait_bucket_value(0) == 0.0005
    assert wait_bucket_value(1) == pytest.approx(0.001 * 10 ** (0.5 / 20))  # [1 ms, 1.122 ms)
    assert wait_bucket_value(61) == pytest.approx(10 ** (0.5 / 20))  # [1 s, 1.122 s)
    assert wait_bucket_value(WAIT_BUCKET_LAST) == pytest.approx(0.001 * 10 ** (179 / 20))  # 10.3 days and more
    assert histogram_percentile({1: 1, 61: 1}, 0.5) == pytest.approx((wait_bucket_value(1) + wait_bucket_value(61)) / 2)


def test_raw_spans_are_the_hours_not_rolled_up_at_most_three_runs() -> None:
    h = 3600
    starts = [i * h for i in range(10)]
    assert raw_spans(starts, h, set()) == [(0, 10 * h)]
    assert raw_spans(starts, h, set(starts[:9])) == [(9 * h, 10 * h)]
    assert raw_spans(starts, h, {1 * h, 2 * h, 5 * h}) == [(0, h), (3 * h, 5 * h), (6 * h, 10 * h)]
    # Runs at 0, 2, 5-6 and 9: the two closest (0 and 2, one hour apart) are merged.
    rolled = {1 * h, 3 * h, 4 * h, 7 * h, 8 * h}
    assert RAW_SPANS_MAX == 3
    assert raw_spans(starts, h, rolled) == [(0, 3 * h), (5 * h, 7 * h), (9 * h, 10 * h)]
    assert len(raw_spans(starts, h, set(starts[::2]))) == RAW_SPANS_MAX
