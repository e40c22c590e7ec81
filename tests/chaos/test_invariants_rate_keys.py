"""``rate_within_limit`` and ``keys_served`` catch what they claim to, from rows shaped like
``chaos_attempts`` (no database): a violation is reported, a run within the bounds is not."""

from __future__ import annotations

from typing import Any

import pytest

from tenure.chaos.invariants import Timing, Verdict
from tenure.chaos.invariants_flow import RateLimit, Service, check_keys_served, check_rate

pytestmark = pytest.mark.chaos

TIMING = Timing(lease=2.0, grace=1.0, reaper_interval=0.5, heartbeat=0.5, max_lease_total=6.0, margin=3.0)
LIMIT = RateLimit("chaos-rate", per_second=4.0, burst=2)
SERVICE = Service(keys=2, per_key_running=1, slots=4, work_max=0.3, poll=0.2, margin=1.0)
"""Bound: 2 keys x max(0.3 / 4, 0) + 0.3 + 2 x 0.2 + 1.0 = 1.85 s."""


def attempt(job_id: int, start: float | None, end: float | None = None, *, key: str | None = "k1",
            created: float | None = None, event: str | None = "completed", delay: float = 0.0,
            rate: str | None = "chaos-rate", cancelled: float | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "flow_key": key, "rate_limit": rate, "rate_units": 1,
            "created_at": (start if start is not None else 0.0) if created is None else created,
            "cancelled_pending_at": cancelled, "started_at": start,
            "ended_at": (start + 0.1 if start is not None else None) if end is None else end,
            "event": event if start is not None else None, "delay": delay}


def rate_verdict(rows: list[dict[str, Any]], limit: RateLimit | None = LIMIT) -> Verdict:
    v = Verdict()
    check_rate(v, rows, limit=limit)
    return v


def keys_verdict(rows: list[dict[str, Any]], faults: list[dict[str, Any]] | None = None,
                 run_end: float = 100.0) -> Verdict:
    v = Verdict()
    check_keys_served(v, rows, faults or [], service=SERVICE, timing=TIMING, run_end=run_end)
    return v


def test_starts_within_rate_plus_burst_pass_and_the_binding_limit_shows() -> None:
    # 6 starts in the closed second [10, 11] = burst 2 + 4/s, then one every 0.25 s: the bucket's pace.
    starts = [10.0, 10.0, 10.25, 10.5, 10.75, 11.0, *(11.25 + 0.25 * i for i in range(8))]
    v = rate_verdict([attempt(i, t) for i, t in enumerate(starts)])
    assert v.ok, v.violations
    rate = v.figures["rate"]
    assert rate["peak_units_in_window"] == 6 and rate["allowed_per_window"] == 6 and rate["starts"] == 14
    assert rate["starts_leaving_bucket_dry"] >= 10 and rate["replayed_lowest_tokens"] >= 0


def test_one_start_too_many_in_a_second_is_caught_and_reaped_attempts_count() -> None:
    starts = [10.0, 10.0, 10.25, 10.5, 10.75]
    rows = [attempt(i, t) for i, t in enumerate(starts)]
    rows.append(attempt(9, 10.9, event="reaped_due_to_expired_lease"))  # its claim took a token too
    rows.append(attempt(10, 10.95, rate=None))  # a job naming no rate limit is not counted
    v = rate_verdict(rows)
    assert v.ok, v.violations  # 6 in a second is the most allowed...
    assert v.figures["rate"]["reaped_starts"] == 1 and v.figures["rate"]["peak_units_in_window"] == 6
    assert v.figures["rate"]["replayed_lowest_tokens"] == -0.4  # ...though 6 in 0.9 s took 0.4 too many
    rows.append(attempt(11, 11.0, event="reaped_to_dead_letter"))
    broken = rate_verdict(rows)
    assert not broken.ok
    assert "started 7 units in the second up to 11.000 (at most 6)" in broken.violations["rate_within_limit"][0]
    assert broken.figures["rate"]["windows_above"] == 1


def test_without_a_rate_limit_the_check_holds_vacuously() -> None:
    v = rate_verdict([attempt(i, 10.0) for i in range(50)], limit=None)
    assert v.ok and v.figures["rate"] == {"limit": None}


def test_keys_served_in_turn_pass() -> None:
    # Two keys, limit 1, each job 0.5 s: the next job of a key starts when its slot frees.
    rows = [attempt(2 * i + k, 10.0 + 0.5 * i + 0.05 * k, 10.5 + 0.5 * i, key=f"k{k}", created=10.0)
            for i in range(6) for k in range(2)]
    v = keys_verdict(rows)
    assert v.ok, v.violations
    served = v.figures["keys_served"]
    assert served["keys"] == 2 and served["bound_seconds"] == 1.85
    assert served["wait_seconds"]["max"] <= 0.1
    # The per-job wait grows with the backlog (job 5 of a key waited 2.5 s) without being a violation.
    assert served["job_wait_seconds"]["max"] >= 2.5


def test_a_key_starved_while_it_had_room_is_caught() -> None:
    busy = [attempt(i, 10.0 + 0.4 * i, 10.3 + 0.4 * i, key="k1", created=10.0) for i in range(15)]
    starved = attempt(100, 16.5, key="k2", created=10.0)  # runnable and under its limit for 6.5 s
    v = keys_verdict([*busy, starved])
    assert not v.ok
    message = v.violations["keys_served"][0]
    assert message.startswith("flow key 'k2' had a runnable job and room under its limit for 6.50s"), message
    assert v.figures["keys_served"]["worst_key"] == "k2"


def test_a_wait_at_the_running_limit_or_inside_a_fault_is_not_counted() -> None:
    # k1 holds its only slot from 10 to 20 (limit 1): its second job's wait is the limit's doing.
    at_limit = [attempt(1, 10.0, 20.0, created=10.0), attempt(2, 20.05, created=10.0)]
    v = keys_verdict(at_limit)
    assert v.ok, v.violations
    assert v.figures["keys_served"]["max_wait_before_excuses"] <= 0.1
    # k2 waits 8 s: a SIGSTOP from 9 to 17 excuses 7 of them; a kill excuses nothing; a database
    # restart excuses its length plus the recovery bound (7 s).
    waiting = [*at_limit, attempt(3, 18.0, key="k2", created=10.0)]

    def fault(kind: str, start: float, end: float | None) -> dict[str, Any]:
        return {"id": 1, "kind": kind, "pid": 41, "job_id": None, "lock_token": None, "detail": {},
                "started_at": start, "ended_at": end}

    assert not keys_verdict(waiting).ok
    excused = keys_verdict(waiting, faults=[fault("sigstop", 9.0, 17.0)])
    assert excused.ok, excused.violations
    assert excused.figures["keys_served"]["excused_seconds"] == 7.0
    assert not keys_verdict(waiting, faults=[fault("kill_before_effect", 10.0, None)]).ok
    assert keys_verdict(waiting, faults=[fault("pg_restart", 10.0, 10.5)]).ok


def test_a_requeued_job_is_runnable_after_its_delay_and_a_cancelled_one_not_at_all() -> None:
    # Reaped at 11.0 with a 1 s backoff: runnable from 12.0, started 13.0 (1 s wait, within 1.85 s).
    retried = [attempt(1, 10.0, 11.0, created=10.0, event="reaped_due_to_expired_lease", delay=1.0),
               attempt(1, 13.0, created=10.0)]
    assert keys_verdict(retried).ok
    assert keys_verdict([retried[0] | {"delay": 0.0}, retried[1]]).violations["keys_served"]
    # Never claimed: a job left runnable until the end is a wait to the end; a cancelled one is not.
    never = [attempt(2, None, key="k2", created=10.0), *retried]
    assert "for 90.00s" in keys_verdict(never).violations["keys_served"][0]
    assert keys_verdict([attempt(2, None, key="k2", created=10.0, cancelled=10.5), *retried]).ok
    # Waits count from the run's first claim: the workers start with the producer.
    assert keys_verdict([attempt(3, 9.0, key="k3", created=5.0), attempt(4, 9.5, key="k4", created=5.0)]).ok


def test_a_job_enqueued_naming_the_limit_but_stored_without_it_is_caught() -> None:
    # The harness enqueues every job naming the limit: a row that lost it (e.g. on its way to
    # job_history) still counts in the window, and is reported, since the claim would not hold it back.
    rows = [attempt(1, 10.0), attempt(2, 10.1, rate=None)]
    assert rate_verdict(rows).ok
    v = Verdict()
    check_rate(v, rows, limit=LIMIT, every_job=True)
    assert v.violations["rate_within_limit"] == [
        "1 job(s) enqueued naming rate limit 'chaos-rate' are stored naming none, e.g. ids [2]"]
    assert v.figures["rate"]["starts"] == 2 and v.figures["rate"]["jobs_stored_without_it"] == 1
