"""The fault plan is reproducible from the seed and covers every requested fault."""

from __future__ import annotations

import pytest

from tenure.chaos.config import ChaosConfig
from tenure.chaos.faults import make_plan
from tenure.core.errors import ConfigError

pytestmark = pytest.mark.chaos


def test_same_seed_same_plan_and_every_fault_planned() -> None:
    config = ChaosConfig(jobs=300, kills_per_kind=3, hangs=2, sigstops=2, partitions=2, pg_restarts=1, gap_restarts=2,
                         seed=7, cancels=4, queue_pauses=1, timeouts=2, slow_completions=2)
    a = make_plan(config, can_partition=True, can_restart=True)
    assert a == make_plan(config, can_partition=True, can_restart=True)
    assert a != make_plan(ChaosConfig(**{**config.__dict__, "seed": 8}), can_partition=True, can_restart=True)
    kinds = sorted(a.markers.values())
    assert kinds == sorted(["kill_before_effect", "kill_after_effect", "kill_during_ack"] * 3 + ["hang"] * 2
                           + ["overrun"] * 2 + ["restart_in_gap"] * 2)
    assert all(15 <= n < 270 for n in a.markers)  # inside production, never the first or last jobs
    assert sorted(t.kind for t in a.timed) == sorted(["sigstop"] * 2 + ["partition_drop", "partition_blackhole",
                                                                        "pg_restart", "queue_pause"]
                                                      + ["cancel"] * 4 + ["slow_completions"] * 2)
    points = [t.after_enqueued for t in a.timed]
    assert points == sorted(points) and 0 < points[0] and points[-1] < 300
    assert len(a.work_ms) == 300 and all(config.work_ms_min <= w <= config.work_ms_max for w in a.work_ms)


def test_faults_the_database_cannot_take_are_left_out() -> None:
    plan = make_plan(ChaosConfig(partitions=2, pg_restarts=1), can_partition=False, can_restart=False)
    assert {t.kind for t in plan.timed} == {"sigstop", "cancel", "queue_pause", "slow_completions"}


def test_counts_scale_with_duration_and_bad_settings_are_refused() -> None:
    short, soak = ChaosConfig(duration=40).counts(), ChaosConfig(duration=1800, jobs=100_000).counts()
    assert all(soak[k] > short[k] for k in short)
    with pytest.raises(ConfigError):
        ChaosConfig(lease=2, heartbeat=1).validate()
    with pytest.raises(ConfigError):
        ChaosConfig(grace=0.1).validate()
    with pytest.raises(ConfigError):
        ChaosConfig(slow_completions=-1).validate()
