"""Scaler decisions: prompt scale-up, stabilised scale-down, clamping, zero, no flapping."""

from __future__ import annotations

import datetime as dt

import pytest

from tenure.core.errors import ConfigError
from tenure.operator.scaler import (
    QueueLoad,
    Recommendation,
    ScalerConfig,
    decide,
    history_from_status,
    history_to_status,
    raw_demand,
)

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
CFG = ScalerConfig(
    min_replicas=1,
    max_replicas=10,
    concurrency=4,
    target_ready_per_replica=10,
    scale_down_stabilization_seconds=300,
    allow_scale_to_zero=False,
)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def load(ready: int = 0, running: int = 0, scheduled: int = 0) -> QueueLoad:
    return QueueLoad(ready=ready, running=running, scheduled=scheduled)


class Sim:
    """Feeds successive loads through decide() like the timer does, keeping the history."""

    def __init__(self, config: ScalerConfig, current: int | None) -> None:
        self.config = config
        self.current = current
        self.history: tuple[Recommendation, ...] = ()
        self.changes = 0

    def step(self, t: float, q: QueueLoad) -> int:
        decision = decide(self.config, q, self.current, self.history, at(t))
        if self.current is not None and decision.desired != self.current:
            self.changes += 1
        self.current = decision.desired
        self.history = decision.history
        return decision.desired


def test_demand_adds_in_flight_pods_and_backlog_share() -> None:
    assert raw_demand(CFG, load(ready=0, running=8)) == 2
    assert raw_demand(CFG, load(ready=30, running=0)) == 3
    # 1 in flight (1/4 pod) + 1 ready (1/10 pod) still needs one whole pod.
    assert raw_demand(CFG, load(ready=1, running=1)) == 1
    assert raw_demand(CFG, load(ready=21, running=4)) == 4  # 1 + ceil-ish(2.1)


def test_scale_up_is_immediate() -> None:
    d = decide(CFG, load(ready=50, running=4), current=1, history=(), now=T0)
    assert d.desired == 6
    assert d.reason.startswith("scale up 1->6")
    assert d.changed(1)


def test_scale_up_clamped_to_max_and_says_so() -> None:
    d = decide(CFG, load(ready=10_000), current=2, history=(), now=T0)
    assert d.desired == 10
    assert "maxReplicas=10" in d.reason


def test_floor_is_min_replicas_without_scale_to_zero() -> None:
    cfg = ScalerConfig(min_replicas=2, max_replicas=5, scale_down_stabilization_seconds=0)
    d = decide(cfg, load(), current=4, history=(), now=T0)
    assert d.desired == 2


def test_current_above_lowered_max_is_clamped_down() -> None:
    history = (Recommendation(at(-10), 8),)
    cfg = ScalerConfig(min_replicas=1, max_replicas=3)
    d = decide(cfg, load(ready=1000), current=8, history=history, now=T0)
    assert d.desired == 3


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    sim = Sim(CFG, current=None)
    assert sim.step(0, load(ready=100)) == 10
    # Backlog gone: held at 10 until the peak leaves the 300 s window.
    for t in range(10, 300, 10):
        assert sim.step(t, load()) == 10, t
    assert sim.step(301, load()) == 1
    assert sim.changes == 1


def test_scale_down_goes_to_highest_recommendation_in_window() -> None:
    sim = Sim(CFG, current=None)
    sim.step(0, load(ready=100))  # 10
    sim.step(100, load(ready=50))  # recommends 5, holds 10
    sim.step(200, load(ready=20))  # recommends 2, holds 10
    assert sim.current == 10
    assert sim.step(301, load()) == 5  # the 10 left the window; 5 (t=100) is the max
    assert sim.step(401, load()) == 2
    assert sim.step(501, load()) == 1


def test_zero_window_scales_down_at_once() -> None:
    cfg = ScalerConfig(max_replicas=10, scale_down_stabilization_seconds=0)
    sim = Sim(cfg, current=None)
    sim.step(0, load(ready=100))
    assert sim.step(1, load(ready=10)) == 1


def test_scale_to_zero_only_when_allowed_and_empty() -> None:
    cfg = ScalerConfig(
        min_replicas=1, max_replicas=5, scale_down_stabilization_seconds=60, allow_scale_to_zero=True
    )
    sim = Sim(cfg, current=None)
    assert sim.step(0, load(ready=5)) == 1
    assert sim.step(30, load()) == 1  # empty, but the window still holds 1
    assert sim.step(61, load()) == 0
    # Work arrives: straight back up to the floor, without waiting.
    assert sim.step(70, load(ready=1)) == 1


@pytest.mark.parametrize(
    "q",
    [load(ready=1), load(running=1), load(scheduled=1)],
    ids=["ready", "running", "scheduled"],
)
def test_no_zero_while_anything_is_queued(q: QueueLoad) -> None:
    cfg = ScalerConfig(min_replicas=0, max_replicas=5, allow_scale_to_zero=True)
    d = decide(cfg, q, current=1, history=(), now=T0)
    assert d.desired == 1


def test_no_zero_when_not_allowed_even_if_empty() -> None:
    cfg = ScalerConfig(min_replicas=1, max_replicas=5, scale_down_stabilization_seconds=0)
    d = decide(cfg, load(), current=3, history=(), now=T0)
    assert d.desired == 1


def test_oscillating_backlog_does_not_flap() -> None:
    sim = Sim(CFG, current=None)
    sim.step(0, load(ready=80))
    seen = set()
    for i in range(1, 200):
        ready = 80 if i % 2 == 0 else 0  # flips every 10 s, much faster than the window
        seen.add(sim.step(i * 10, load(ready=ready)))
    assert seen == {8}
    assert sim.changes == 0


def test_history_stays_bounded_and_round_trips() -> None:
    sim = Sim(CFG, current=None)
    for i in range(1000):
        sim.step(i * 10, load(ready=(i * 37) % 120))
    # Dominated entries pruned: strictly decreasing values, so at most max+1 entries.
    values = [r.replicas for r in sim.history]
    assert values == sorted(values, reverse=True)
    assert len(values) == len(set(values)) <= CFG.max_replicas + 1
    restored = history_from_status(history_to_status(sim.history))
    assert [r.replicas for r in restored] == values


def test_history_survives_restart_and_keeps_holding() -> None:
    sim = Sim(CFG, current=None)
    sim.step(0, load(ready=100))
    stored = history_to_status(sim.history)
    # A new operator process: only what was in status is known.
    d = decide(CFG, load(), current=10, history=history_from_status(stored), now=at(120))
    assert d.desired == 10
    assert d.reason.startswith("hold 10")


def test_malformed_history_entries_are_ignored() -> None:
    items = [{"time": "nonsense", "replicas": 3}, {"replicas": 2}, "x", {"time": "2026-01-01T12:00:00Z", "replicas": 4}]
    assert [r.replicas for r in history_from_status(items)] == [4]
    assert history_from_status(None) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_replicas": 0},
        {"min_replicas": 3, "max_replicas": 2},
        {"min_replicas": 0},
        {"concurrency": 0},
        {"target_ready_per_replica": 0},
        {"scale_down_stabilization_seconds": -1},
    ],
)
def test_validate_rejects_bad_settings(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        ScalerConfig(**kwargs).validate()  # type: ignore[arg-type]


def test_defaults_validate() -> None:
    ScalerConfig().validate()
    ScalerConfig(min_replicas=0, allow_scale_to_zero=True).validate()
