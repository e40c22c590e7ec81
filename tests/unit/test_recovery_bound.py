"""The recovery bound README states, the reaper's first-expiry decision and the alert's `for`
agree (issue 12, defect 3)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

from tenure.core.repository import ReapCandidate
from tenure.observability.thresholds import AlertThresholds
from tenure.reaper import reaper
from tenure.reaper.reaper import Reaper, ReaperConfig, recovery_bound
from tenure.worker.heartbeat import HEARTBEAT_DEFAULT


def _cand(expiries: int) -> ReapCandidate:
    return ReapCandidate(id=1, queue="q", lock_token=None, locked_by="w", attempt_count=1, max_attempts=5,  # type: ignore[arg-type]
                         lease_expiry_count=expiries, lease_expires_at=datetime.now(timezone.utc),
                         expired_for_seconds=60.0, owner_status="silent")


def test_first_expiry_requeues_at_once_and_repeats_back_off() -> None:
    r = Reaper(ReaperConfig(), dsn="", schema="s", rng=random.Random(1))
    first = r.decide(_cand(0))
    assert first is not None and not first.dead and first.delay == 0.0
    later = [r.decide(_cand(1)) for _ in range(50)]
    assert all(d is not None and not d.dead and 0 <= d.delay <= 2.0 for d in later)
    assert any(d is not None and d.delay > 0 for d in later)


def test_readme_bound_with_the_defaults() -> None:
    bound = recovery_bound(lease=30, heartbeat=HEARTBEAT_DEFAULT, grace=reaper.GRACE_DEFAULT, interval=reaper.INTERVAL_DEFAULT, poll_interval=1)
    assert bound == 51
    with open(Path(__file__).parents[2] / "README.md", encoding="utf-8") as fh:
        assert "lease + heartbeat + grace + reaper interval + poll interval** (defaults 30 + 5 + 10 + 5 + 1\n  = 51 s" in fh.read()


def test_expired_leases_alert_waits_longer_than_a_healthy_reaper() -> None:
    healthy = HEARTBEAT_DEFAULT + reaper.GRACE_DEFAULT + reaper.ALIVE_OWNER_GRACE_DEFAULT + reaper.INTERVAL_DEFAULT
    assert AlertThresholds().expired_leases_for_seconds >= 4 * healthy
