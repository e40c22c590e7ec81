"""The lease protocol (R1-R5): the claimed job, heartbeat, and the fenced writes that end or move an
attempt (the claim itself is :mod:`tenure.core.repository.claim`).

Every write that changes a claimed job is a compare-and-set on ``(id, status='running', locked_by,
lock_token)``; a rejected stale write is recorded in ``job_events`` and never changes the row (R2)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import PRIORITY_DEFAULT, Row

PRIORITY_AGING_DEFAULT = 300.0
"""Seconds a job may wait ready before it is claimed ahead of every priority (starvation bound)."""
REJECTED_WRITE_EVENTS = ("stale_completion_rejected", "stale_write_rejected", "heartbeat_lost")
"""The ``job_events`` events of writes the token CAS refused: a late completion, any other late
write (with its ``operation``), a heartbeat of a lease already lost."""


@dataclass(frozen=True)
class ClaimedJob:
    """A job as claimed by one delivery attempt; ``lock_token`` is that attempt's receipt."""

    id: int
    queue: str
    task: str
    payload: Any
    payload_version: int
    attempt: int
    max_attempts: int
    lock_token: uuid.UUID
    fence: int
    idempotency_key: str | None
    correlation_id: str | None
    checkpoint_step: str | None
    checkpoint_data: Any
    lease_expires_at: datetime
    wait_seconds: float
    priority: int = PRIORITY_DEFAULT
    trace_context: str | None = None
    """The W3C traceparent of the enqueue (None: not traced); each attempt's span is its child."""
    flow_key: str | None = None
    """The job's flow key (docs/flow.md), None when it has none."""


_CLAIMED_FIELDS = tuple(f.name for f in dataclass_fields(ClaimedJob))
_CLAIM_COLUMNS = ("id", "queue_name", "task", "payload", "payload_version", "attempt_count", "max_attempts",
                  "lock_token", "fence", "idempotency_key", "correlation_id", "checkpoint_step", "checkpoint_data",
                  "lease_expires_at", "wait_seconds", "priority", "trace_context", "flow_key")
"""``job_claim``'s columns, position by position the fields of :class:`ClaimedJob`."""


def check_claim_columns(description: Sequence[Any] | None) -> None:
    """Refuse a claim statement whose columns are not, in order, :class:`ClaimedJob`'s fields
    (``job_claim``; `tenure sqs` receives with it and with ``sqs_fifo_claim``)."""
    names = tuple(c.name for c in description or ())
    if names != _CLAIM_COLUMNS:
        raise RuntimeError(f"job_claim returns {names}, expected {_CLAIM_COLUMNS} (ClaimedJob's order)")


def claimed_jobs(rows: list[tuple[Any, ...]]) -> list[ClaimedJob]:
    """The jobs of a claim's tuple rows (checked by :func:`check_claim_columns`), built without a
    dict per row or the frozen ``__init__``: the hot path."""
    new, fields = object.__new__, _CLAIMED_FIELDS
    jobs = []
    for row in rows:
        job = new(ClaimedJob)
        job.__dict__.update(zip(fields, row))
        jobs.append(job)
    return jobs


@dataclass(frozen=True)
class HeartbeatOutcome:
    id: int
    outcome: str
    """``renewed``, ``lost`` (token moved or row gone), ``cancelled`` (token revoked by a cancel),
    ``max_lease_reached`` (R4), or ``busy`` (still held by this token, but another transaction
    has the row locked, e.g. this worker's own completion of it: not renewed, not lost)."""
    lease_expires_at: datetime | None
    remaining_seconds: float | None
    """Seconds of lease left after renewal, by the DB clock (less than the lease when capped)."""


class LeaseQueries(RepositoryBase):
    """The token-fenced writes of one delivery attempt (the claim is :mod:`.claim`'s)."""

    def heartbeat(self, worker_id: str, held: Sequence[tuple[int, uuid.UUID]], lease: float,
                  max_lease_total: float, effect_tokens: Sequence[uuid.UUID] = (),
                  max_effect_hold: float | None = None, abandoned: int = 0) -> list[HeartbeatOutcome]:
        """Renew every held lease (and the keys of effects still in flight) in one statement,
        and touch the worker's registry row with its count of ``abandoned`` handler threads."""
        if not held and not effect_tokens:
            self._rows("worker_touch", {"id": worker_id, "abandoned": abandoned})
            return []
        rows = self._rows("job_heartbeat", {
            "ids": [h[0] for h in held], "tokens": [h[1] for h in held], "lease": float(lease),
            "max_lease_total": float(max_lease_total), "worker_id": worker_id,
            "effect_tokens": list(effect_tokens), "abandoned": abandoned,
            "max_effect_hold": float(max_effect_hold if max_effect_hold is not None else max_lease_total)})
        return [HeartbeatOutcome(r["id"], r["outcome"], r["lease_expires_at"], r["remaining_seconds"])
                for r in rows]

    def completion_recheck(self, acked: Sequence[tuple[int, uuid.UUID]]) -> list[Row]:
        """``[{id, token, held, token_current}]`` for acknowledged completions: ``held`` when the
        database has the completion by that token; ``token_current`` when the job still runs
        under it (the completion was lost and may be written again)."""
        return self._rows("job_completion_recheck", {"ids": [a[0] for a in acked], "tokens": [a[1] for a in acked]})

    def complete_many(self, worker_id: str, done: Sequence[tuple[int, uuid.UUID]]) -> dict[int, bool]:
        """Complete a batch in one statement; ``{id: accepted}``. Refused (stale) attempts are
        recorded by a second statement, run only when there are any. An id given with two
        tokens (a lease lost and the job claimed again by this worker) is judged per token, and
        is accepted when either attempt was."""
        if not done:
            return {}
        ids, tokens = [d[0] for d in done], [d[1] for d in done]
        rows = self._rows("job_complete_many", {"ids": ids, "tokens": tokens, "worker_id": worker_id})
        moved = {(int(r["id"]), r["lock_token"]) for r in rows}
        result = dict.fromkeys(ids, False)
        rejected: list[tuple[int, uuid.UUID]] = []
        for job_id, token in done:
            if (job_id, token) in moved:
                result[job_id] = True
            else:
                rejected.append((job_id, token))
        if rejected:
            self._rows("job_stale_completion_record", {"ids": [r[0] for r in rejected], "tokens": [r[1] for r in rejected],
                                                   "worker_id": worker_id})
        return result

    def _cas(self, name: str, operation: str, params: dict[str, Any], queue: str | None) -> bool:
        row = self._one(name, params)
        accepted = bool(row and row["accepted"])
        if not accepted:
            self.record_stale_write(params["id"], params["token"], params["worker_id"], operation, queue=queue)
        return accepted

    def retry(self, worker_id: str, job_id: int, token: uuid.UUID, *, delay: float,
              error: str, error_code: str, queue: str | None = None) -> bool:
        """Reschedule a failed attempt (CAS on the token). ``queue``: the job's, when the caller
        knows it, for the record of a refusal (else it is looked up)."""
        return self._cas("job_retry", "retry", {
            "id": job_id, "token": token, "worker_id": worker_id, "delay": float(delay),
            "error": error, "error_code": error_code}, queue)

    def dead_letter(self, worker_id: str, job_id: int, token: uuid.UUID, *, error: str,
                    error_code: str, sanitised_payload: Any = None, queue: str | None = None) -> bool:
        return self._cas("job_dead_letter", "dead_letter", {
            "id": job_id, "token": token, "worker_id": worker_id, "error": error,
            "error_code": error_code,
            "sanitised_payload": Jsonb(sanitised_payload) if sanitised_payload is not None else None}, queue)

    def release(self, worker_id: str, job_id: int, token: uuid.UUID, *, delay: float = 0.0,
                event: str = "released", reason: str = "shutdown", queue: str | None = None) -> bool:
        """Hand the job back without using up an attempt (drain on SIGTERM, effect deferral)."""
        return self._cas("job_release", "release", {
            "id": job_id, "token": token, "worker_id": worker_id, "delay": float(delay),
            "event": event, "reason": reason, "channel": self.channel}, queue)

    def checkpoint(self, worker_id: str, job_id: int, token: uuid.UUID, step: str, data: Any,
                   queue: str | None = None) -> bool:
        accepted = self._one("job_checkpoint", {"id": job_id, "token": token, "worker_id": worker_id,
                                                "step": step, "data": Jsonb(data)}) is not None
        if not accepted:
            self.record_stale_write(job_id, token, worker_id, "checkpoint", queue=queue)
        return accepted

    def record_stale_write(self, job_id: int, token: uuid.UUID, worker_id: str, operation: str,
                           reason: str = "token no longer current", *, queue: str | None = None) -> None:
        """Audit a write the token CAS refused. ``queue``: the job's queue when the caller knows
        it (a worker always does); then the record never reads job_history, so a lock there
        cannot hold up the heartbeat that records a lost lease. Else it is looked up."""
        if queue is None:
            row = self._one("job_queue_get", {"id": job_id})
            queue = str(row["queue_name"]) if row else ""
        event = "heartbeat_lost" if operation == "heartbeat" else "stale_write_rejected"
        self._rows("job_event_stale_write", {"id": job_id, "token": token, "worker_id": worker_id, "queue": queue,
                                             "event": event, "reason": reason, "operation": operation})

    def rate_limit_known(self, name: str) -> bool:
        """Whether a rate limit named ``name`` exists (``ctx.rate_limited`` refuses an unknown one)."""
        return self._one("job_rate_limit_lookup", {"name": name}) is not None

    def rate_limited(self, worker_id: str, job_id: int, token: uuid.UUID, *, delay: float,
                     limit: str | None = None, reason: str = "", queue: str | None = None) -> bool:
        """Back-pressure from a handler (CAS on the token): the job is pending again ``delay``
        seconds from now without using up the attempt, with a ``rate_limited`` event; with
        ``limit``, that limit's bucket (the job's key's, if per key) is emptied and paused as
        long, in the same statement (created if missing; a pause already longer is kept)."""
        return self._cas("job_rate_limited", "rate_limited", {
            "id": job_id, "token": token, "worker_id": worker_id, "delay": float(delay),
            "limit": limit, "reason": reason}, queue)
