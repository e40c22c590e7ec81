"""The invariant checks catch what they claim to: each violation, fed as recorded rows, is reported.

Pure logic over rows shaped like ChaosStore's answers (no database): the short run proves the
system passes them; these prove the checks could fail.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tenure.chaos.invariants import Timing, Verdict, check_all, quantile

pytestmark = pytest.mark.chaos

TIMING = Timing(lease=2.0, grace=1.0, reaper_interval=0.5, heartbeat=0.5, max_lease_total=6.0, margin=3.0)
T1, T2 = uuid.uuid4(), uuid.uuid4()


def job(n: int = 0, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"id": n + 1, "n": n, "planned_fault": None, "status": "completed",
                           "last_error_code": None, "attempt_count": 2, "lease_expiry_count": 1, "claims": 2,
                           "completions": 1, "completion_tokens": [T2], "final_claim_token": T2, "guarded": 1,
                           "provider_dedups": 0, "unguarded": 2, "execution_succeeded": True}
    row.update(over)
    return row


def reap(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"event_id": 10, "job_id": 1, "event": "reaped_due_to_expired_lease", "lock_token": T1,
                           "detail": {}, "reaped_at": 1003.2, "claimed_at": 1000.0, "worker_id": "w-1", "pid": 41,
                           "sampled_lease_expires_at": 1002.0, "accepted_after": 0, "rejections_recorded": 0,
                           "worker_fence": None}
    row.update(over)
    return row


def kill(at: float = 1000.1, pid: int = 41) -> dict[str, Any]:
    return {"id": 1, "kind": "kill_before_effect", "pid": pid, "job_id": 1, "lock_token": T1, "detail": {},
            "started_at": at, "ended_at": None}


def verdict(jobs: list[dict[str, Any]] | None = None, reaps: list[dict[str, Any]] | None = None,
            faults: list[dict[str, Any]] | None = None, planned: int = 1,
            capacity: list[dict[str, Any]] | None = None) -> Verdict:
    return check_all(jobs=[job()] if jobs is None else jobs, reaps=reaps or [], faults=faults or [], events={},
                     planned=planned, timing=TIMING, run_end=2000.0, capacity=capacity or [])


def test_a_clean_recovery_passes_and_is_measured() -> None:
    v = verdict(reaps=[reap()], faults=[kill()])
    assert v.ok, v.violations
    assert v.figures["recovery_seconds_killed"] == {"n": 1, "p50": 3.1, "p99": 3.1, "max": 3.1}
    assert v.figures["unguarded_duplicates"] == 1


@pytest.mark.parametrize(("rows", "planned", "invariant"), [
    ([job(status="running")], 1, "all_terminal"),
    ([job(status="failed", last_error_code=None, completions=0, completion_tokens=[])], 1, "all_terminal"),
    ([], 1, "all_terminal"),
    ([job(), job(n=0)], 1, "all_terminal"),
    ([job(guarded=2)], 1, "guarded_effect_exactly_once"),
    ([job(guarded=0)], 1, "guarded_effect_exactly_once"),
    ([job(execution_succeeded=False)], 1, "guarded_effect_exactly_once"),
    ([job(completions=2, completion_tokens=[T2, T2])], 1, "single_completion"),
    ([job(completion_tokens=[T1], final_claim_token=T2)], 1, "stale_writes_fenced"),
])
def test_job_level_violations_are_caught(rows: list[dict[str, Any]], planned: int, invariant: str) -> None:
    v = verdict(jobs=rows, planned=planned)
    assert v.violations[invariant], v.violations


def test_a_reap_before_expiry_plus_grace_is_caught() -> None:
    sampled_late = reap(sampled_lease_expires_at=1002.9)  # renewed: expiry 1002.9, reaped 0.3s later
    assert verdict(reaps=[sampled_late], faults=[kill()]).violations["no_early_reap"]
    from_claim = reap(reaped_at=1002.5, sampled_lease_expires_at=None)  # claim lease ends at 1002.0
    assert verdict(reaps=[from_claim], faults=[kill()]).violations["no_early_reap"]
    from_detail = reap(detail={"lease_expires_at": "1970-01-01T00:16:42.800+00:00"})  # 1002.8
    assert verdict(reaps=[from_detail], faults=[kill()]).violations["no_early_reap"]


def test_a_stale_write_accepted_after_the_reap_is_caught() -> None:
    assert verdict(reaps=[reap(accepted_after=1)], faults=[kill()]).violations["stale_writes_fenced"]


def test_a_surviving_stale_attempt_must_leave_a_recorded_rejection() -> None:
    stop = {"id": 2, "kind": "sigstop", "pid": 41, "job_id": None, "lock_token": None, "detail": {},
            "started_at": 1000.5, "ended_at": 1005.0}
    silent = verdict(reaps=[reap()], faults=[stop])
    assert silent.violations["stale_writes_fenced"]
    recorded = verdict(reaps=[reap(rejections_recorded=1)], faults=[stop])
    assert recorded.ok, recorded.violations
    assert recorded.figures["reaps_by_cause"] == {"sigstop": 1}
    fenced_itself = verdict(reaps=[reap(worker_fence="self_fenced")], faults=[stop])
    assert fenced_itself.ok, fenced_itself.violations
    assert fenced_itself.figures["fenced_attempts_self_fenced_before_writing"] == 1


def test_slow_recovery_is_caught_and_unexplained_reaps_are_reported() -> None:
    slow = verdict(reaps=[reap(reaped_at=1010.0, sampled_lease_expires_at=None)], faults=[kill()])
    assert slow.violations["recovery_bounded"]
    unexplained = verdict(reaps=[reap(rejections_recorded=1)], faults=[])
    assert unexplained.figures["reaps_by_cause"] == {"unexplained": 1}


def test_a_hung_handler_is_bounded_by_the_max_total_lease() -> None:
    hang = {"id": 3, "kind": "hang", "pid": 41, "job_id": 1, "lock_token": T1, "detail": {},
            "started_at": 1000.0, "ended_at": None}
    ok = verdict(reaps=[reap(reaped_at=1007.5, sampled_lease_expires_at=1006.0, rejections_recorded=1)],
                 faults=[hang])
    assert ok.ok, ok.violations
    late = verdict(reaps=[reap(reaped_at=1012.0, sampled_lease_expires_at=1006.0, rejections_recorded=1)],
                   faults=[hang])
    assert late.violations["recovery_bounded"]


def test_quantile_is_nearest_rank() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_no_rejection_is_required_from_a_process_that_was_gone_before_it_could_write() -> None:
    stop = {"id": 2, "kind": "sigstop", "pid": 41, "job_id": None, "lock_token": None, "detail": {},
            "started_at": 1000.5, "ended_at": 1005.0}
    gone = {"id": 3, "kind": "worker_recycled", "pid": 41, "job_id": None, "lock_token": None, "detail": {},
            "started_at": 1005.5, "ended_at": None}
    v = verdict(reaps=[reap()], faults=[stop, gone])
    assert v.ok, v.violations
    assert v.figures["fenced_attempts_checked"] == 0


def test_job_control_invariants_catch_resurrected_cancels_paused_claims_and_lost_timeouts() -> None:
    from tenure.chaos.invariants import Verdict
    from tenure.chaos.invariants_control import check_job_control

    jobs = [{"id": 1, "status": "cancelled"}, {"id": 2, "status": "completed"}, {"id": 3, "status": "cancelled"},
            {"id": 4, "status": "completed"}, {"id": 5, "status": "completed"}]
    faults = [{"kind": "cancel", "job_id": None, "detail": {"job_id": 1, "outcome": "revoked"}},
              {"kind": "cancel", "job_id": None, "detail": {"job_id": 2, "outcome": "cancelled"}},
              {"kind": "overrun", "job_id": 4, "detail": {}}, {"kind": "overrun", "job_id": 5, "detail": {}}]
    good = Verdict()
    check_job_control(good, jobs=jobs[:1] + jobs[3:4], faults=faults[:1] + faults[2:3], reaps=[],
                      pause_claims={7: 0}, timeout_jobs={4})
    assert good.ok, good.violations
    bad = Verdict()
    check_job_control(bad, jobs=jobs, faults=faults, reaps=[], pause_claims={7: 2}, timeout_jobs={4})
    assert any("job 2 was cancelled but ended completed" in m for m in bad.violations["cancel_sticks"])
    assert any("job 3 is cancelled but nobody" in m for m in bad.violations["cancel_sticks"])
    assert bad.violations["pause_respected"] == ["2 claim(s) started while the queue was paused (fault 7)"]
    assert [m.split()[1] for m in bad.violations["timeout_retried"]] == ["5"]
    assert bad.figures["cancels"] == {"revoked_running": 1, "cancelled_pending": 1, "lost_race": 0}


SLOW = {"id": 4, "kind": "slow_completions", "pid": None, "job_id": None, "lock_token": None,
        "detail": {"table": "job_history"}, "started_at": 1000.5, "ended_at": 1005.5}
STOP = {"id": 2, "kind": "sigstop", "pid": 41, "job_id": None, "lock_token": None, "detail": {},
        "started_at": 1000.5, "ended_at": 1005.0}


def test_a_finished_attempt_reaped_while_its_ack_waited_is_caught() -> None:
    """Issue 40: the handler returned at 1000.4, the completion waited behind the lock on job_history,
    the lease ran out and the reaper queued the job again."""
    finished = reap(returned_at=1000.4, rejections_recorded=1)
    slow = verdict(reaps=[finished], faults=[SLOW])
    assert [m.split(":")[0] for m in slow.violations["success_not_rerun"]] == ["job 1"], slow.violations
    assert "cause: slow_completions" in slow.violations["success_not_rerun"][0]
    assert slow.figures["reaps_by_cause"] == {"slow_completions": 1}
    assert not slow.violations["recovery_bounded"], "a reap under slow completions is not a recovery"
    assert verdict(reaps=[finished]).violations["success_not_rerun"], "no fault at all: caught too"
    # Excused: the worker was killed or stopped (its outcome could not be written), or the
    # handler returned only after the reap (a stopped process resuming).
    for faults in ([kill()], [STOP]):
        ok = verdict(reaps=[finished], faults=faults)
        assert ok.ok, ok.violations
        assert ok.figures["returned_attempts_reaped"]["excused"] == 1
    late = verdict(reaps=[reap(returned_at=1003.5, rejections_recorded=1)], faults=[SLOW])
    assert not late.violations["success_not_rerun"], late.violations


def sample(at: float, held: int, pid: int = 41, concurrency: int = 4, tokens: list[uuid.UUID] | None = None
           ) -> dict[str, Any]:
    return {"sampled_at": at, "worker_id": f"w-{pid}", "pid": pid, "concurrency": concurrency, "held": held,
            "tokens": tokens if held > concurrency else None}


def test_a_worker_holding_more_jobs_than_its_concurrency_is_caught() -> None:
    """Before issue 40 a worker freed a finished job's slot before its outcome was written, so while
    completions waited it claimed on: running rows piled up far above its concurrency."""
    piling = [sample(1000.0 + i / 10, 4 + 3 * i, tokens=[uuid.uuid4() for _ in range(4 + 3 * i)]) for i in range(20)]
    v = verdict(faults=[SLOW], capacity=piling)
    assert len(v.violations["held_within_capacity"]) == 1, v.violations  # one line per worker
    assert "held up to 61" in v.violations["held_within_capacity"][0]
    assert "while completions were held back" in v.violations["held_within_capacity"][0]
    assert v.figures["capacity"]["samples_during_slow_completions"] == 15  # 1000.5 to 1001.9
    within = verdict(faults=[SLOW], capacity=[sample(1001.0, 4), sample(1002.0, 3, pid=42)])
    assert within.ok, within.violations
    assert within.figures["capacity"]["peak_held_during_slow_completions"] == 4


def test_samples_above_concurrency_explained_by_a_fault_or_a_hang_are_excused() -> None:
    stopped = verdict(faults=[STOP], capacity=[sample(1006.0, 5, tokens=[uuid.uuid4() for _ in range(5)])])
    assert stopped.ok, stopped.violations
    assert stopped.figures["capacity"]["excused"] == {"sigstop": 1}
    other_pid = verdict(faults=[STOP], capacity=[sample(1006.0, 5, pid=42, tokens=[uuid.uuid4() for _ in range(5)])])
    assert other_pid.violations["held_within_capacity"], "another worker's SIGSTOP explains nothing"
    hang = {"id": 3, "kind": "hang", "pid": 41, "job_id": 1, "lock_token": T1, "detail": {},
            "started_at": 1000.0, "ended_at": None}
    capped = verdict(faults=[hang], capacity=[sample(1006.0, 5, tokens=[T1, *(uuid.uuid4() for _ in range(4))])])
    assert capped.ok, capped.violations


def test_a_flow_key_running_above_its_limit_is_caught_with_no_fault_excusing_it() -> None:
    from tenure.chaos.invariants_flow import check_flow

    at_limit = [{"sampled_at": 1.0 + i, "flow_key": "chaos-key:1", "running": 2, "live": 1} for i in range(3)]
    held = Verdict()
    check_flow(held, at_limit, per_key_running=2)
    assert held.ok and held.figures["flow"]["samples_at_limit"] == 3
    assert held.figures["flow"]["peak_live_per_key"] == 1
    broken = Verdict()
    check_flow(broken, [*at_limit, {"sampled_at": 9.0, "flow_key": "chaos-key:4", "running": 3, "live": 2}],
               per_key_running=2)
    assert not broken.ok
    assert "'chaos-key:4' had 3 running jobs (2 under live leases)" in broken.violations["flow_within_limit"][0]
    unlimited = Verdict()
    check_flow(unlimited, [{"sampled_at": 1.0, "flow_key": "k", "running": 9, "live": 9}], per_key_running=0)
    assert unlimited.ok and unlimited.figures["flow"]["per_key_running"] is None
