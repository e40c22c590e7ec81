"""One job as a document: what `tenure jobs show ID --json` prints and `GET api/v1/jobs/ID`
of `tenure ui` returns (issue 24), built in one place so that both show the same facts.

The document is ``{"job", "attempts", "reaps", "stale_writes", "effects", "checkpoint",
"events"}``. Attempts are derived from the audit trail: every attempt that ended left one event
carrying its lock token (completed, retry scheduled, dead-lettered, reaped, cancelled, released),
with its fencing token, start, last heartbeat and error in the event's detail; the running
attempt is read from the job row. Limits: only the last heartbeat of an attempt is kept, not
each one; events written before an attempt's record carried its start (schema 0001-0003) show no
start; the payload and error texts are redacted with the DLQ's default policy
(:class:`~tenure.core.redaction.Redaction`).
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg

from tenure.core.redaction import Redaction
from tenure.core.repository import REJECTED_WRITE_EVENTS, ExecutionStore, ReadStore, Repository, Row

REAP_EVENTS = ("reaped_due_to_expired_lease", "reaped_to_dead_letter")
NOT_AN_ATTEMPT_END = frozenset({*REJECTED_WRITE_EVENTS, "claimed"})
"""Events with a lock token that do not end its attempt: refused late writes, old claim records."""


class JobDocumentStore(ReadStore, ExecutionStore, Protocol):
    """What a job's document reads: the job and its events (reads area), its effects' keys
    (executions area)."""


def job_document(conn: psycopg.Connection[Any], job_id: int, *, schema: str = "tenure",
                 redaction: Redaction | None = None) -> dict[str, Any] | None:
    """The document of one job (any status), None when there is no such job."""
    repo: JobDocumentStore = Repository(conn, schema)
    job = repo.get_job(job_id)
    if job is None:
        return None
    events = repo.job_events(job_id)
    effects = repo.execution_list_for_job(job_id)
    policy = redaction or Redaction()
    job = dict(job)
    job["payload"] = policy.payload(job.get("payload"))
    if job.get("last_error"):
        job["last_error"] = policy.error_text(job["last_error"])
    checkpoint = None
    if job.get("checkpoint_step") is not None:
        checkpoint = {"step": job["checkpoint_step"], "data": policy.payload(job.get("checkpoint_data")),
                      "at": job.get("checkpoint_at")}
    return {"job": job, "attempts": attempts_of(job, events, policy),
            "reaps": [_reap(e) for e in events if e["event"] in REAP_EVENTS],
            "stale_writes": [_stale(e) for e in events if e["event"] in REJECTED_WRITE_EVENTS],
            "effects": effects, "checkpoint": checkpoint, "events": events}


def attempts_of(job: Row, events: list[Row], redaction: Redaction) -> list[dict[str, Any]]:
    """One row per attempt, oldest first: the ended ones from their last event, the running one
    from the job row."""
    ended: dict[str, dict[str, Any]] = {}
    for e in events:
        token = e.get("lock_token")
        if token is None or e["event"] in NOT_AN_ATTEMPT_END or str(token) in ended:
            continue
        detail = e.get("detail") or {}
        reaped = e["event"] in REAP_EVENTS
        error = detail.get("error") or (e.get("reason") if e["event"] in ("retry_scheduled", "dead_lettered") else None)
        ended[str(token)] = {
            "attempt": e.get("attempt"), "fence": detail.get("fence"), "lock_token": str(token),
            "worker": detail.get("owner") if reaped else e.get("worker_id"),
            "started_at": detail.get("started_at"), "ended_at": e["created_at"],
            "lease_expires_at": detail.get("lease_expires_at"), "last_heartbeat_at": detail.get("last_heartbeat_at"),
            "outcome": e["event"], "error_code": e.get("reason") if not reaped else "lease_expired",
            "error": redaction.error_text(error) if isinstance(error, str) and error else None,
        }
    rows = list(ended.values())
    if job.get("status") == "running" and job.get("lock_token") is not None and str(job["lock_token"]) not in ended:
        rows.append({"attempt": job.get("attempt_count"), "fence": job.get("fence"),
                     "lock_token": str(job["lock_token"]), "worker": job.get("locked_by"),
                     "started_at": job.get("started_at"), "ended_at": None,
                     "lease_expires_at": job.get("lease_expires_at"), "last_heartbeat_at": job.get("last_heartbeat_at"),
                     "outcome": "running (lease expired)" if job.get("lease_expired") else "running",
                     "error_code": None, "error": None})
    rows.sort(key=lambda a: (a["attempt"] or 0, str(a["ended_at"] or "~")))
    return rows


def _reap(e: Row) -> dict[str, Any]:
    detail = e.get("detail") or {}
    return {"at": e["created_at"], "action": e["event"], "reaper": e.get("worker_id"), "attempt": e.get("attempt"),
            "lock_token": str(e["lock_token"]) if e.get("lock_token") else None, "fence": detail.get("fence"),
            "owner": detail.get("owner"), "owner_status": detail.get("owner_status"),
            "lease_expires_at": detail.get("lease_expires_at"), "grace_seconds": detail.get("grace_seconds"),
            "delay_seconds": detail.get("delay_seconds")}


def _stale(e: Row) -> dict[str, Any]:
    detail = e.get("detail") or {}
    return {"at": e["created_at"], "event": e["event"], "attempt": e.get("attempt"), "worker": e.get("worker_id"),
            "lock_token": str(e["lock_token"]) if e.get("lock_token") else None,
            "tried": detail.get("operation") or ("complete" if e["event"] == "stale_completion_rejected" else None),
            "reason": e.get("reason")}
