"""The pure parts of bench/experiments/history_migration.py: phase figures of timed calls, the move's output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.history_migration import Call, Phase, parse_move_output, percentile, phase_stats  # noqa: E402


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_a_call_blocked_across_a_phase_start_counts_in_that_phase() -> None:
    phase = Phase("during migrate", 100.0, 110.0)
    calls = [
        Call(95.0, "complete", 1.0, 10),    # ended before the phase: not in it
        Call(99.0, "complete", 3.0, 10),    # blocked across its start: latency counts, jobs too (ended in it)
        Call(105.0, "complete", 0.01, 10),
        Call(109.9, "complete", 0.5, 10),   # ended after it: latency counts, jobs go to the next phase
        Call(105.0, "enqueue", 0.02, 1),    # another operation
        Call(110.0, "complete", 0.01, 10),  # starts at the phase's end: not in it
    ]
    s = phase_stats(calls, phase, "complete")
    assert s.calls == 3
    assert s.jobs == 20
    assert s.per_second == pytest.approx(2.0)
    assert s.max_ms == pytest.approx(3000.0)
    assert s.p50_ms == pytest.approx(500.0)


def test_a_phase_without_calls_has_no_latency() -> None:
    s = phase_stats([], Phase("empty", 0.0, 5.0), "claim")
    assert (s.calls, s.jobs, s.per_second, s.p50_ms, s.max_ms) == (0, 0, 0.0, None, None)


def test_the_move_summary_line_is_parsed() -> None:
    out = "moved 4548201 completed job(s) into job_history in 455 batch(es), 312.4 s, 14,559/s\n"
    assert parse_move_output(out) == (4548201, 455, 312.4)
    assert parse_move_output("moved 0 completed job(s) into job_history in 0 batch(es), 0.1 s") == (0, 0, 0.1)
    assert parse_move_output("something else") is None
