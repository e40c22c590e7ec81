"""The reaper's queries (R7): expired candidates, the CAS that requeues or dead-letters them, and its cycle counter."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


@dataclass(frozen=True)
class ReapCandidate:
    id: int
    queue: str
    lock_token: uuid.UUID
    locked_by: str
    attempt_count: int
    max_attempts: int
    lease_expiry_count: int
    lease_expires_at: datetime
    expired_for_seconds: float
    owner_status: str
    """``alive``, ``silent``, ``stopped`` or ``unknown`` (registry row gone), per the registry."""
    wait_seconds: float = 0.0
    """Seconds past expiry the job must wait: its owner's registered heartbeat interval (the
    reaper's ``floor`` for an owner not in the registry) plus the grace."""


@dataclass(frozen=True)
class ReapDecision:
    dead: bool
    delay: float


@dataclass(frozen=True)
class Reaped:
    id: int
    queue: str
    dead: bool
    attempt: int = 0
    """The attempt whose lease was recovered, and its fencing token."""
    fence: int = 0
    owner_status: str = ""
    trace_context: str | None = None
    """The job's enqueue traceparent: the reap is recorded in that trace."""


class ReaperQueries(RepositoryBase):
    """Recover expired leases, conservatively and audited."""

    def reap(self, reaper_id: str, *, grace: float, batch: int,
             decide: Callable[[ReapCandidate], ReapDecision | None], floor: float = 0.0) -> list[Reaped]:
        """One reaper cycle in one transaction: lock candidates expired for longer than their
        owner's registered heartbeat (``floor`` for an owner not in the registry) plus the grace, decided
        by the database clock, with SKIP LOCKED; let
        ``decide`` choose requeue-with-delay or dead-letter (or skip with None), then CAS each on
        the token read. Several reapers may run at once; each row goes to at most one."""
        with self.conn.transaction():
            candidates = [ReapCandidate(
                id=r["id"], queue=r["queue_name"], lock_token=r["lock_token"], locked_by=r["locked_by"],
                attempt_count=r["attempt_count"], max_attempts=r["max_attempts"],
                lease_expiry_count=r["lease_expiry_count"], lease_expires_at=r["lease_expires_at"],
                expired_for_seconds=r["expired_for_seconds"],
                owner_status=r["owner_status"], wait_seconds=r["wait_seconds"])
                for r in self._rows("job_reap_candidates",
                                    {"grace": float(grace), "floor": float(floor), "batch": batch})]
            chosen = [(c, d) for c in candidates if (d := decide(c)) is not None]
            if not chosen:
                return []
            rows = self._rows("job_reap_expired", {
                "ids": [c.id for c, _ in chosen], "tokens": [c.lock_token for c, _ in chosen],
                "delays": [float(d.delay) for _, d in chosen], "dead": [d.dead for _, d in chosen],
                "owners": [c.owner_status for c, _ in chosen], "reaper_id": reaper_id,
                "leases": [c.lease_expires_at for c, _ in chosen],
                "waits": [c.wait_seconds for c, _ in chosen],
                "channel": self.channel, "grace": float(grace)})
            return [Reaped(r["id"], r["queue_name"], r["dead"], r["attempt_count"], r["fence"] or 0,
                           r["owner_status"], r["trace_context"]) for r in rows]

    def record_reaper_cycle(self, reaper_id: str, *, seconds: float, reaped: int) -> None:
        """Count one finished reaper cycle (the exporter serves it as tenure_reaper_* figures)."""
        with self.conn.transaction():
            self._rows("reaper_cycle_record", {
                "reaper_id": reaper_id, "seconds": float(seconds), "reaped": int(reaped)})

    def reaper_cycles(self) -> Row | None:
        """The reaper cycle counter and last cycle; None before any reaper ran."""
        return self._one("reaper_cycle_get")

    def reap_counts(self) -> list[Row]:
        """Reaped jobs ever per (queue, outcome, owner_status), from the audit events."""
        return self._rows("job_reap_counts")
