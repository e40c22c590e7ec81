"""The fairness and rate math of the flow-control bench scenarios (bench/flowmath.py): Jain's index,
the window in which every key has work, the steady rate after a burst, and which statements are
the claim's. Pure functions, no database."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import flowmath  # noqa: E402


def test_jain_index_is_one_when_even_and_one_over_n_when_one_key_takes_all() -> None:
    assert flowmath.jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert flowmath.jain_index([100, 0, 0, 0]) == pytest.approx(0.25)
    assert flowmath.jain_index([2, 1, 1, 1] + [1] * 96) == pytest.approx(101**2 / (100 * 103))
    for bad in ([], [0, 0], [1, -1]):
        with pytest.raises(ValueError):
            flowmath.jain_index(bad)


def test_fair_window_ends_with_the_claim_in_which_the_first_key_runs_out() -> None:
    claims = {"big": [0, 1, 2, 3, 4, 5], "a": [0, 1, 2], "b": [1, 3]}
    w = flowmath.fair_window(claims)
    assert (w.first, w.last, w.first_out) == (0, 2, "a")
    assert w.counts == {"big": 3, "a": 3, "b": 1}  # big's job of claim 2 counts: the end is inclusive
    assert w.jain == pytest.approx(49 / 57)
    fifo = flowmath.fair_window({"big": [0, 1], "a": [2], "b": [2]})
    assert fifo.counts == {"big": 2, "a": 0, "b": 0} and fifo.jain == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        flowmath.fair_window({"a": [1], "b": []})


def test_claims_are_ordered_by_their_fences_not_their_start_times() -> None:
    # Claim 10.2 began after claim 10.1 but took the lock first: its fences are lower.
    started = [10.0, 10.0, 10.1, 10.2, 10.2, 10.1]
    fences = [1, 2, 6, 3, 4, 5]
    assert flowmath.claim_order(started, fences) == [0, 0, 2, 1, 1, 2]
    with pytest.raises(ValueError):
        flowmath.claim_order([1.0], [])


def test_steady_rate_leaves_the_burst_and_the_first_claim_out() -> None:
    # A burst of 50 at t=0, then claims of 5 jobs every 10 ms: 500/s.
    starts = [0.0] * 50 + [0.01 * (1 + i // 5) for i in range(1000)]
    r = flowmath.steady_rate(reversed(starts), 50)
    assert r is not None
    assert r.jobs == 995 and r.seconds == pytest.approx(1.99)
    assert r.rate == pytest.approx(500.0)
    assert flowmath.steady_rate([0.0] * 60, 50) is None
    assert flowmath.steady_rate([1.0, 2.0], 5) is None


def test_claim_statements_are_recognised_in_tenures_own_text() -> None:
    from tenure.core.queries import named_queries
    q = named_queries("tenure")
    names = ("job_claim", "job_claim_gated", "job_claim_flow", "queue_claim_gate", "queue_flow_lock")
    for name in names:
        assert flowmath.claim_statement(q[name]) == name, name
    others = [n for n in q if n not in names]
    assert [n for n in others if flowmath.claim_statement(q[n])] == []
    assert flowmath.claim_statement("SELECT  name,\n  flow, has_row FROM asked") == "queue_claim_gate"
