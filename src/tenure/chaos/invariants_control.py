"""The job-control invariants of a chaos run (issue 14 under faults): cancels stick and are
never completed, a paused queue is never claimed from, and every overrun is retried as
``task_timeout``. The lease and reap invariants are in :mod:`tenure.chaos.invariants`."""

from __future__ import annotations

from collections.abc import Sequence

from tenure.chaos.invariants import Row, Verdict


def check_job_control(verdict: Verdict, *, jobs: Sequence[Row], faults: Sequence[Row], reaps: Sequence[Row],
                      pause_claims: dict[int, int], timeout_jobs: set[int]) -> None:
    """Issue 14 under faults: cancels stick and are never completed, a paused queue is never
    claimed from, and every fired overrun is retried (or dead-lettered) as ``task_timeout``."""
    v = verdict.violations
    by_id = {int(j["id"]): j for j in jobs}
    cancelled_by_us = {int(f["detail"]["job_id"]) for f in faults
                       if f["kind"] == "cancel" and f["detail"] and str(f["detail"].get("outcome")) in
                       ("cancelled", "revoked")}
    for jid in sorted(cancelled_by_us):
        j = by_id.get(jid)
        if j is None or j["status"] != "cancelled":
            v["cancel_sticks"].append(f"job {jid} was cancelled but ended {j['status'] if j else 'missing'}")
    for jid, j in by_id.items():
        if j["status"] == "cancelled" and jid not in cancelled_by_us:
            v["cancel_sticks"].append(f"job {jid} is cancelled but nobody cancelled it")
    for fid, n in pause_claims.items():
        if n:
            v["pause_respected"].append(f"{n} claim(s) started while the queue was paused (fault {fid})")
    reaped_jobs = {int(r["job_id"]) for r in reaps}
    overruns = [f for f in faults if f["kind"] == "overrun" and f["job_id"] is not None]
    for f in overruns:
        jid = int(f["job_id"])
        j = by_id.get(jid)
        if jid in timeout_jobs or jid in reaped_jobs or (j is not None and j["status"] == "cancelled"):
            continue  # a reap (worker stopped, partitioned or killed meanwhile) or a cancel may come first
        v["timeout_retried"].append(f"job {jid} overran its timeout but was never retried as task_timeout")
    verdict.figures.update({
        "cancels": {"revoked_running": sum(1 for f in faults if f["kind"] == "cancel" and f["detail"]
                                           and f["detail"].get("outcome") == "revoked"),
                    "cancelled_pending": sum(1 for f in faults if f["kind"] == "cancel" and f["detail"]
                                             and f["detail"].get("outcome") == "cancelled"),
                    "lost_race": sum(1 for f in faults if f["kind"] == "cancel" and f["detail"]
                                     and str(f["detail"].get("outcome", "")).startswith("skipped"))},
        "queue_pauses": {"pauses": len(pause_claims), "claims_while_paused": sum(pause_claims.values())},
        "task_timeouts": {"overruns_fired": len(overruns), "jobs_retried_as_timeout": len(timeout_jobs)},
    })
