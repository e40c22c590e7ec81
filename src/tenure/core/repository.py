"""The repository: the only module that runs SQL (house style 1).

Every method executes one named query from ``sql/queries.sql`` on the connection it was given.
With an autocommit connection each call is its own transaction; :meth:`Repository.enqueue`
also works inside a caller's open transaction (transactional outbox, R17). Every write that
changes a claimed job is a compare-and-set on ``(id, status='running', locked_by, lock_token)``;
a rejected stale write is recorded in ``job_events`` and never changes the row (R2).
No caching and no retries here: callers decide how to react to errors.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from tenure.core.errors import ConfigError, JobSpecError, PayloadError, SchemaTooNewError
from tenure.core.queries import migrations, named_queries, notify_channel, quote_ident
from tenure.core.stats import QueueStats

Row = dict[str, Any]
MAX_PAYLOAD_BYTES_DEFAULT = 256 * 1024
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def max_payload_bytes() -> int:
    """The payload size limit: ``TENURE_MAX_PAYLOAD_BYTES`` or 256 KiB."""
    import os
    raw = os.environ.get("TENURE_MAX_PAYLOAD_BYTES")
    if not raw:
        return MAX_PAYLOAD_BYTES_DEFAULT
    try:
        limit = int(raw)
    except ValueError:
        raise ConfigError(f"TENURE_MAX_PAYLOAD_BYTES must be a whole number of bytes, got {raw!r}") from None
    if limit < 1:
        raise ConfigError("TENURE_MAX_PAYLOAD_BYTES must be >= 1")
    return limit


def encode_payload(payload: Any) -> str:
    """The JSON text stored for ``payload``; PayloadError for what jsonb cannot hold faithfully
    (non-JSON values, NaN/Infinity, NUL characters) or what exceeds the size limit."""
    try:
        # Non-ASCII characters as UTF-8, not \u escapes: a SQL_ASCII database cannot turn an
        # escape above \u007f into jsonb, and the byte size below is then the stored size.
        text = json.dumps(payload if payload is not None else {}, allow_nan=False,
                          separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not valid JSON for storage: {exc}") from None
    if _ESCAPED_NUL.search(text) or "\x00" in text:
        raise PayloadError("payload contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store")
    try:
        size, limit = len(text.encode()), max_payload_bytes()
    except UnicodeEncodeError:
        raise PayloadError("payload contains an unpaired surrogate, which is not valid UTF-8") from None
    if size > limit:
        raise PayloadError(f"payload is {size} bytes, above the {limit}-byte limit (TENURE_MAX_PAYLOAD_BYTES)")
    return text
PRIORITY_MIN = -100
PRIORITY_MAX = 100
PRIORITY_DEFAULT = 0
"""Job priority: an integer in [PRIORITY_MIN, PRIORITY_MAX]; higher runs first."""
PRIORITY_AGING_DEFAULT = 300.0
"""Seconds a job may wait ready before it is claimed ahead of every priority (starvation bound)."""
REJECTED_WRITE_EVENTS = ("stale_completion_rejected", "stale_write_rejected", "heartbeat_lost")
"""The ``job_events`` events of writes the token CAS refused: a late completion, any other late
write (with its ``operation``), a heartbeat of a lease already lost."""
STATS_STALE_MIN_ROWS = 1000
"""Rows changed since the jobs table's last analyze before a starting worker refreshes its statistics."""
STATS_STALE_FRACTION = 0.2
"""... and at least this fraction of the table (autovacuum's own default threshold is 0.1)."""


def check_priority(priority: Any) -> int:
    """The priority as an int; ConfigError when it is not an integer in the documented range."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"priority must be an integer, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ConfigError(f"priority {priority} is out of range [{PRIORITY_MIN}, {PRIORITY_MAX}] (higher runs first)")
    return priority


_ZERO_STATS = ("ready", "scheduled", "running", "running_expired", "failed", "oldest_ready_age_seconds",
               "oldest_running_age_seconds", "heartbeat_lag_max_seconds", "heartbeat_lag_p95_seconds",
               "live_workers", "redelivered", "reaped_total", "in_flight", "cancelled")


@dataclass(frozen=True)
class EnqueueResult:
    id: int
    created: bool
    """False when an existing job with the same idempotency key was returned (dedup hit)."""


MAX_ATTEMPTS_LIMIT = 2**31 - 1
"""Largest ``max_attempts`` (the column is a PostgreSQL integer)."""
DELAY_MAX_SECONDS = 100 * 365 * 86400.0
"""Longest enqueue delay: 100 years (anything longer is a unit mistake)."""


def _check_text(what: str, value: Any, *, name: bool = True) -> None:
    if not isinstance(value, str):
        raise JobSpecError(f"{what} must be a string, got {value!r}")
    if not value.strip():
        raise JobSpecError(f"{what} must not be empty, got {value!r}")
    if "\x00" in value:
        raise JobSpecError(f"{what} contains a NUL character, which PostgreSQL text cannot store")
    if name and value != value.strip():
        raise JobSpecError(f"{what} must not start or end with whitespace, got {value!r}")


@dataclass(frozen=True)
class JobSpec:
    """One job to enqueue. :meth:`validate` is the one check every enqueue path runs
    (``tenure enqueue`` flags, ``--from-file``, :func:`tenure.enqueue`, :meth:`Repository.enqueue_many`)."""

    task: str
    payload: Any = None
    queue: str = "default"
    max_attempts: int = 5
    delay: float = 0.0
    idempotency_key: str | None = None
    priority: int = PRIORITY_DEFAULT

    def validate(self) -> str:
        """Raise JobSpecError (a ValueError) naming the first invalid field: an empty task or queue
        name (or one with surrounding whitespace or a NUL), an empty idempotency key, ``max_attempts``
        not a whole number from 1 to 2^31-1, a delay that is negative, not finite or above 100 years,
        or a payload jsonb cannot store (PayloadError). Returns the payload's stored JSON text."""
        _check_text("task name", self.task)
        _check_text("queue name", self.queue)
        check_priority(self.priority)
        if self.idempotency_key is not None:
            _check_text("idempotency key", self.idempotency_key, name=False)
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            raise JobSpecError(f"max_attempts must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, got {attempts!r}")
        delay = self.delay
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
            raise JobSpecError(f"delay must be a finite number of seconds, got {delay!r}")
        if not 0 <= delay <= DELAY_MAX_SECONDS:
            raise JobSpecError(f"delay must be from 0 to {DELAY_MAX_SECONDS:.0f} seconds (100 years), got {delay:g}")
        return encode_payload(self.payload)


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


_CLAIMED_FIELDS = tuple(f.name for f in dataclass_fields(ClaimedJob))
_CLAIM_COLUMNS = ("id", "queue_name", "task", "payload", "payload_version", "attempt_count", "max_attempts",
                  "lock_token", "fence", "idempotency_key", "correlation_id", "checkpoint_step", "checkpoint_data",
                  "lease_expires_at", "wait_seconds", "priority")
"""``job_claim``'s columns, position by position the fields of :class:`ClaimedJob`."""


@dataclass(frozen=True)
class HeartbeatOutcome:
    id: int
    outcome: str
    """``renewed``, ``lost`` (token moved or row gone), ``cancelled`` (token revoked by a cancel)
    or ``max_lease_reached`` (R4)."""
    lease_expires_at: datetime | None
    remaining_seconds: float | None
    """Seconds of lease left after renewal, by the DB clock (less than the lease when capped)."""


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


@dataclass(frozen=True)
class ReapDecision:
    dead: bool
    delay: float


@dataclass(frozen=True)
class Reaped:
    id: int
    queue: str
    dead: bool


class Repository:
    """Named queries bound to one connection and one schema."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str = "tenure") -> None:
        self.conn = conn
        self.schema = schema
        self._q = named_queries(schema)
        self.channel = notify_channel(schema)
        self._claim_gated = False
        """The last claim found a running limit on one of its queues: claim gated (see claim)."""

    # -- plumbing ---------------------------------------------------------------------------
    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self._q[name], params or {})
            return cur.fetchall() if cur.description else []

    def _one(self, name: str, params: dict[str, Any] | None = None) -> Row | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    # -- migrations -------------------------------------------------------------------------
    def schema_version(self) -> int:
        """Highest applied migration, 0 for an empty schema."""
        table = f"{quote_ident(self.schema)}.schema_migrations"
        present = self._one("migration_table_exists", {"table": table})
        if not present or not present["present"]:
            return 0
        row = self._one("migration_version")
        return int(row["version"]) if row else 0

    def check_schema(self) -> None:
        """Refuse to run against a schema that is missing or newer than this code."""
        version, known = self.schema_version(), len(migrations())
        if version > known:
            raise SchemaTooNewError(
                f"schema {self.schema!r} is at version {version} but this tenure knows {known}: upgrade tenure")
        if version < known:
            raise SchemaTooNewError(
                f"schema {self.schema!r} is at version {version}, expected {known}: run `tenure migrate`")

    def refresh_stale_claim_statistics(self, *, min_rows: int = STATS_STALE_MIN_ROWS,
                                       fraction: float = STATS_STALE_FRACTION) -> bool:
        """``ANALYZE`` the jobs table if at least ``min_rows`` rows, and ``fraction`` of the
        table, changed since its last analyze; True if it ran.

        Why: without statistics (a bulk enqueue that autovacuum has not analyzed yet, up to a
        minute) the planner serves the claim's priority lane by sorting every pending row
        instead of reading the first ``limit`` of jobs_ready_priority_idx in order: 4.7 ms
        against 1 ms per claim of 100 at a 20k backlog (docs/performance.md). Called once when
        a worker starts, which is when a backlog meets new workers (a scale-up from zero).
        Workers starting together analyze once: they serialise on an advisory lock and look
        again behind it, so the others find fresh statistics (two 40k-row analyses cost 2 ×
        170 ms of database CPU at once). Limits: waits at most 200 ms for another worker's
        analysis or a vacuum already running, then gives up; a role that may not analyze the
        table gets PostgreSQL's warning, nothing else."""
        params = {"min_rows": min_rows, "fraction": fraction}
        row = self._one("job_table_stats_stale", params)
        if not row or not row["stale"]:
            return False
        try:
            with self.conn.transaction():
                self._rows("job_table_analyze_lock", {"schema": self.schema})
                row = self._one("job_table_stats_stale", params)
                if not row or not row["stale"]:
                    return False
                self._rows("job_table_analyze")
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    def migrate(self) -> list[int]:
        """Apply pending migrations in order, each in its own transaction; idempotent.

        Concurrent callers serialise on an advisory lock. Refuses a schema newer than the code.
        """
        applied: list[int] = []
        known = migrations()
        with self.conn.transaction():
            self._rows("migration_lock", {"schema": self.schema})
            self._rows("migration_schema_create")
            current = self.schema_version()
            if current > len(known):
                raise SchemaTooNewError(
                    f"schema {self.schema!r} is at version {current} but this tenure knows "
                    f"{len(known)}: upgrade tenure")
            for version, name, sql in known:
                if version <= current:
                    continue
                self._rows("migration_search_path")
                with self.conn.cursor() as cur:
                    cur.execute(sql.encode())  # a numbered migration file from sql/migrations
                self._rows("migration_record", {"version": version, "name": name})
                applied.append(version)
        return applied

    def apply_schema_file(self, sql: str) -> None:
        """Create the schema from ``schema.sql`` directly (tests compare it with the migrations)."""
        with self.conn.transaction():
            self._rows("migration_schema_create")
            self._rows("migration_search_path")
            with self.conn.cursor() as cur:
                cur.execute(sql.encode())

    # -- enqueue ----------------------------------------------------------------------------
    def enqueue(self, task: str, payload: Any = None, *, queue: str = "default",
                idempotency_key: str | None = None, delay: float = 0.0, max_attempts: int = 5,
                payload_version: int = 1, correlation_id: str | None = None,
                priority: int = PRIORITY_DEFAULT) -> EnqueueResult:
        """Insert a job (or return the existing one with the same idempotency key).
        Refuses what :meth:`JobSpec.validate` refuses (JobSpecError) before writing anything."""
        text = JobSpec(task, payload, queue, max_attempts, delay, idempotency_key, priority).validate()
        if isinstance(payload_version, bool) or not isinstance(payload_version, int) or payload_version < 1:
            raise JobSpecError(f"payload_version must be a whole number >= 1, got {payload_version!r}")
        if correlation_id is not None:
            _check_text("correlation id", correlation_id, name=False)
        params = {"queue": queue, "task": task, "payload": text, "priority": priority,
                  "payload_version": payload_version, "max_attempts": max_attempts,
                  "delay": float(delay), "idempotency_key": idempotency_key,
                  "correlation_id": correlation_id, "channel": self.channel}
        for _ in range(5):
            row = self._one("job_enqueue", params)
            if row is not None:
                return EnqueueResult(int(row["id"]), bool(row["created"]))
            # A concurrent enqueue with the same key committed after our snapshot: look again.
        raise RuntimeError(f"enqueue with idempotency key {idempotency_key!r} found neither a new nor an existing job")

    def enqueue_many(self, jobs: Sequence[JobSpec]) -> int:
        """Insert a batch in one statement; returns how many were new (key duplicates skipped).
        Every job is validated (:meth:`JobSpec.validate`) before anything is written."""
        if not jobs:
            return 0
        payloads = [j.validate() for j in jobs]
        row = self._one("job_enqueue_many", {
            "queues": [j.queue for j in jobs], "tasks": [j.task for j in jobs],
            "payloads": payloads,
            "max_attempts": [j.max_attempts for j in jobs], "delays": [float(j.delay) for j in jobs],
            "idempotency_keys": [j.idempotency_key for j in jobs],
            "priorities": [j.priority for j in jobs], "channel": self.channel})
        return int(row["inserted"]) if row else 0

    # -- the lease protocol ----------------------------------------------------------------
    def claim(self, worker_id: str, queues: Sequence[str], limit: int, lease: float,
              aging: float = PRIORITY_AGING_DEFAULT) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs: paused queues are skipped, a queue's global ``max_running``
        caps what is taken, jobs ready longer than ``aging`` seconds go first (oldest first),
        then priority order.

        Without a limit on any of ``queues`` this is one autocommit statement (one round trip).
        A limited queue needs two statements in one transaction (sent as one pipeline): the
        first locks the control rows of the limited queues, so the claim's snapshot sees every
        committed claim of those queues (a count inside one statement would race). The
        ungated statement finds out by itself (it then claims nothing and says so); this
        repository remembers it and claims gated until the gate finds no limit any more, so a
        worker on a limited queue pays no extra round trip per claim.

        The hot path: rows arrive as tuples in :class:`ClaimedJob`'s field order (checked
        against the statement's columns on every call) and become jobs without a dict per row
        or the frozen ``__init__``."""
        params = {"queues": list(queues), "limit": limit, "lease": float(lease),
                  "worker_id": worker_id, "aging": float(aging), "gated": False}
        own_tx = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        rows: list[tuple[Any, ...]] = []
        if own_tx and not self._claim_gated:
            with self.conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(self._q["job_claim"], params)
                rows = cur.fetchall()
                self._check_claim_columns(cur.description)
            if not rows or rows[-1][0] is not None:
                return self._claimed(rows)
            self._claim_gated = True  # a requested queue has a running limit: nothing was claimed
        params["gated"] = True
        with self.conn.cursor(row_factory=tuple_row) as gate, self.conn.cursor(row_factory=tuple_row) as cur:
            with contextlib.ExitStack() as stack:
                if own_tx:
                    stack.enter_context(self.conn.pipeline())
                    stack.enter_context(self.conn.transaction())
                gate.execute(self._q["queue_claim_gate"], params)
                cur.execute(self._q["job_claim"], params)
            # In a pipeline the results (and the descriptions) arrive at its end: one round trip.
            limited = gate.fetchall()
            rows = cur.fetchall()
            self._check_claim_columns(cur.description)
        self._claim_gated = bool(limited)
        return self._claimed(rows)

    @staticmethod
    def _check_claim_columns(description: Sequence[Any] | None) -> None:
        names = tuple(c.name for c in description or ())
        if names != _CLAIM_COLUMNS:
            raise RuntimeError(f"job_claim returns {names}, expected {_CLAIM_COLUMNS} (ClaimedJob's order)")

    @staticmethod
    def _claimed(rows: list[tuple[Any, ...]]) -> list[ClaimedJob]:
        new, fields = object.__new__, _CLAIMED_FIELDS
        jobs = []
        for row in rows:
            job = new(ClaimedJob)
            job.__dict__.update(zip(fields, row))
            jobs.append(job)
        return jobs

    def heartbeat(self, worker_id: str, held: Sequence[tuple[int, uuid.UUID]], lease: float,
                  max_lease_total: float, effect_tokens: Sequence[uuid.UUID] = (),
                  max_effect_hold: float | None = None) -> list[HeartbeatOutcome]:
        """Renew every held lease (and the keys of effects still in flight) in one statement,
        and touch the worker's registry row."""
        if not held and not effect_tokens:
            self._rows("worker_touch", {"id": worker_id})
            return []
        rows = self._rows("job_heartbeat", {
            "ids": [h[0] for h in held], "tokens": [h[1] for h in held], "lease": float(lease),
            "max_lease_total": float(max_lease_total), "worker_id": worker_id,
            "effect_tokens": list(effect_tokens),
            "max_effect_hold": float(max_effect_hold if max_effect_hold is not None else max_lease_total)})
        return [HeartbeatOutcome(r["id"], r["outcome"], r["lease_expires_at"], r["remaining_seconds"])
                for r in rows]

    def complete_many(self, worker_id: str, done: Sequence[tuple[int, uuid.UUID]]) -> dict[int, bool]:
        """Complete a batch; ``{id: accepted}``. Rejected ones are recorded as stale.

        The statement finds each job's token by the job's position in the batch, so one
        statement holds each id once: two attempts of one job in a batch (a lease lost and the
        job claimed again by this worker) go in separate statements, in order."""
        result: dict[int, bool] = {}
        rest = list(done)
        while rest:
            seen: set[int] = set()
            batch: list[tuple[int, uuid.UUID]] = []
            later: list[tuple[int, uuid.UUID]] = []
            for d in rest:
                (later if d[0] in seen else batch).append(d)
                seen.add(d[0])
            rows = self._rows("job_complete_many", {"ids": [d[0] for d in batch],
                                                    "tokens": [d[1] for d in batch], "worker_id": worker_id})
            for r in rows:
                result[int(r["id"])] = result.get(int(r["id"]), False) or bool(r["accepted"])
            rest = later
        return result

    def _cas(self, name: str, operation: str, params: dict[str, Any]) -> bool:
        row = self._one(name, params)
        accepted = bool(row and row["accepted"])
        if not accepted:
            self.record_stale_write(params["id"], params["token"], params["worker_id"], operation)
        return accepted

    def retry(self, worker_id: str, job_id: int, token: uuid.UUID, *, delay: float,
              error: str, error_code: str) -> bool:
        return self._cas("job_retry", "retry", {
            "id": job_id, "token": token, "worker_id": worker_id, "delay": float(delay),
            "error": error, "error_code": error_code})

    def dead_letter(self, worker_id: str, job_id: int, token: uuid.UUID, *, error: str,
                    error_code: str, sanitised_payload: Any = None) -> bool:
        return self._cas("job_dead_letter", "dead_letter", {
            "id": job_id, "token": token, "worker_id": worker_id, "error": error,
            "error_code": error_code,
            "sanitised_payload": Jsonb(sanitised_payload) if sanitised_payload is not None else None})

    def release(self, worker_id: str, job_id: int, token: uuid.UUID, *, delay: float = 0.0,
                event: str = "released", reason: str = "shutdown") -> bool:
        """Hand the job back without using up an attempt (drain on SIGTERM, effect deferral)."""
        return self._cas("job_release", "release", {
            "id": job_id, "token": token, "worker_id": worker_id, "delay": float(delay),
            "event": event, "reason": reason, "channel": self.channel})

    def checkpoint(self, worker_id: str, job_id: int, token: uuid.UUID, step: str, data: Any) -> bool:
        accepted = self._one("job_checkpoint", {"id": job_id, "token": token, "worker_id": worker_id,
                                                "step": step, "data": Jsonb(data)}) is not None
        if not accepted:
            self.record_stale_write(job_id, token, worker_id, "checkpoint")
        return accepted

    def record_stale_write(self, job_id: int, token: uuid.UUID, worker_id: str, operation: str,
                           reason: str = "token no longer current") -> None:
        event = "heartbeat_lost" if operation == "heartbeat" else "stale_write_rejected"
        self._rows("job_event_stale_write", {"id": job_id, "token": token, "worker_id": worker_id,
                                             "event": event, "reason": reason, "operation": operation})

    # -- the reaper -------------------------------------------------------------------------
    def reap(self, reaper_id: str, *, grace: float, batch: int,
             decide: Callable[[ReapCandidate], ReapDecision | None]) -> list[Reaped]:
        """One reaper cycle in one transaction: lock expired candidates (SKIP LOCKED), let
        ``decide`` choose requeue-with-delay or dead-letter (or skip with None), then CAS each on
        the token read. Several reapers may run at once; each row goes to at most one."""
        with self.conn.transaction():
            candidates = [ReapCandidate(
                id=r["id"], queue=r["queue_name"], lock_token=r["lock_token"], locked_by=r["locked_by"],
                attempt_count=r["attempt_count"], max_attempts=r["max_attempts"],
                lease_expiry_count=r["lease_expiry_count"], lease_expires_at=r["lease_expires_at"],
                expired_for_seconds=r["expired_for_seconds"],
                owner_status=r["owner_status"])
                for r in self._rows("job_reap_candidates", {"grace": float(grace), "batch": batch})]
            chosen = [(c, d) for c in candidates if (d := decide(c)) is not None]
            if not chosen:
                return []
            rows = self._rows("job_reap_expired", {
                "ids": [c.id for c, _ in chosen], "tokens": [c.lock_token for c, _ in chosen],
                "delays": [float(d.delay) for _, d in chosen], "dead": [d.dead for _, d in chosen],
                "owners": [c.owner_status for c, _ in chosen], "reaper_id": reaper_id,
                "leases": [c.lease_expires_at for c, _ in chosen],
                "channel": self.channel, "grace": float(grace)})
            return [Reaped(r["id"], r["queue_name"], r["dead"]) for r in rows]

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

    # -- reads ------------------------------------------------------------------------------
    def get_job(self, job_id: int) -> Row | None:
        return self._one("job_get", {"id": job_id})

    def job_events(self, job_id: int) -> list[Row]:
        return self._rows("job_events_list", {"id": job_id})

    def queue_work(self, queues: Sequence[str]) -> tuple[bool, bool]:
        """``(pending, running)``: whether any of ``queues`` has a pending (ready or scheduled)
        job, and whether any has a running one (any worker's)."""
        row = self._one("queue_work_exists", {"queues": list(queues)})
        return (bool(row["pending"]), bool(row["running"])) if row else (False, False)

    def queue_stats(self, queue: str | None = None, *,
                    completed: dict[str, int] | None | bool = True) -> list[QueueStats]:
        """Per-queue figures. ``completed``: True counts completed jobs now (a scan of their
        index, ~60 ms at a million rows), False reports 0, or pass counts read earlier with
        :meth:`completed_counts` (the exporter refreshes them on a slower cadence)."""
        rows = {r["queue"]: r for r in self._rows("queue_stats", {"queue": queue})}
        counts: dict[str, int] = {}
        if completed is True:
            counts = self.completed_counts(queue)
        elif isinstance(completed, dict):
            counts = {q: n for q, n in completed.items() if queue is None or q == queue}
        for name in counts.keys() - rows.keys():
            rows[name] = {"queue": name, **{f: 0 for f in _ZERO_STATS}, "paused": False, "max_running": None}
        return [QueueStats(**{**rows[name], "completed": counts.get(name, 0)}) for name in sorted(rows)]

    def completed_counts(self, queue: str | None = None) -> dict[str, int]:
        return {r["queue"]: int(r["completed"]) for r in self._rows("queue_completed_counts", {"queue": queue})}

    def runtime_quantiles(self, window_seconds: float) -> list[Row]:
        return self._rows("job_runtime_quantiles", {"window": float(window_seconds)})

    def listen(self) -> None:
        """LISTEN on the wake-up channel; notifications then arrive on ``self.conn.notifies()``."""
        self._rows("queue_listen")

    def db_now(self) -> Row:
        row = self._one("db_now")
        assert row is not None
        return row

    # -- worker registry --------------------------------------------------------------------
    def worker_register(self, worker_id: str, *, host: str, pid: int, queues: Sequence[str],
                        concurrency: int, heartbeat_seconds: float, version: str,
                        lease_seconds: float | None = None) -> None:
        self._rows("worker_register", {"id": worker_id, "host": host, "pid": pid, "queues": list(queues),
                                       "concurrency": concurrency, "heartbeat_seconds": heartbeat_seconds,
                                       "version": version, "lease_seconds": lease_seconds})

    def worker_touch(self, worker_id: str) -> None:
        self._rows("worker_touch", {"id": worker_id})

    def worker_stop(self, worker_id: str) -> None:
        self._rows("worker_stop", {"id": worker_id})

    def worker_list(self) -> list[Row]:
        return self._rows("worker_list")

    def worker_prune(self, older_than: float) -> int:
        return len(self._rows("worker_prune", {"older_than": float(older_than)}))

    # -- execution store (R14) --------------------------------------------------------------
    def execution_claim(self, key: str, job_id: int, token: uuid.UUID, lease: float) -> Row:
        """``{outcome: claimed | in_doubt | already_succeeded | leased_by_other_worker, result_ref,
        attempt_count}``; ``in_doubt`` is a claim of a key whose earlier holder may have performed
        the effect without recording it."""
        for _ in range(5):
            row = self._one("execution_claim", {"key": key, "job_id": job_id, "token": token,
                                                "lease": float(lease)})
            if row is not None:
                return row
        raise RuntimeError(f"execution claim for {key!r} found neither a new nor an existing record")

    def execution_succeed(self, key: str, token: uuid.UUID, result_ref: str | None) -> bool:
        return self._one("execution_succeed", {"key": key, "token": token, "result_ref": result_ref}) is not None

    def execution_fail(self, key: str, token: uuid.UUID, *, retrying: bool, error_code: str) -> bool:
        """Give the key up after a failed body (``retrying`` lets the next attempt take it at once).
        With ``error_code='in_doubt'`` the next claim is in doubt too."""
        return self._one("execution_fail", {"key": key, "token": token, "error_code": error_code,
                                            "status": "retrying" if retrying else "failed"}) is not None

    def execution_get(self, key: str) -> Row | None:
        return self._one("execution_get", {"key": key})

    # -- dead-letter queue (R12) ------------------------------------------------------------
    def dlq_list(self, *, queue: str | None = None, error_code: str | None = None,
                 limit: int = 100) -> list[Row]:
        return self._rows("dlq_list", {"queue": queue, "error_code": error_code, "limit": limit})

    def dlq_replay_batch(self, *, ids: Sequence[int] | None, queue: str | None, error_code: str | None,
                         after_id: int, batch: int, validate: Callable[[Row], str | None],
                         reason: str, dry_run: bool = False) -> tuple[list[int], list[tuple[int, str]], int]:
        """Replay one batch in one transaction: ``(replayed ids, [(skipped id, why)], last id seen)``.

        ``validate`` returns None for a valid job or the reason it is invalid (it stays in the DLQ).
        ``dry_run`` selects and validates the same batch but writes nothing: the ids it returns are
        the ones a real call would replay and skip.
        """
        with self.conn.transaction():
            rows = self._rows("dlq_select_for_replay", {
                "ids": list(ids) if ids else None, "queue": queue, "error_code": error_code,
                "after_id": after_id, "batch": batch})
            good, skipped = [], []
            for row in rows:
                why = validate(row)
                if why is None:
                    good.append(int(row["id"]))
                else:
                    skipped.append((int(row["id"]), why))
                    if not dry_run:
                        self._rows("dlq_mark_invalid", {"id": row["id"], "reason": why})
            last = max((int(r["id"]) for r in rows), default=after_id)
            if dry_run:  # the rows are locked and still failed: exactly these would move
                return good, skipped, last
            replayed = [int(r["id"]) for r in self._rows(
                "dlq_replay", {"ids": good, "reason": reason, "channel": self.channel})] if good else []
            return replayed, skipped, last

    def dlq_purge(self, older_than: float, queue: str | None = None) -> int:
        return len(self._rows("dlq_purge", {"older_than": float(older_than), "queue": queue}))

    def prune_cancelled(self, older_than: float, batch: int = 10_000) -> int:
        row = self._one("job_prune_cancelled", {"older_than": float(older_than), "batch": batch})
        return int(row["deleted"]) if row else 0

    def prune_completed(self, older_than: float, batch: int = 10_000) -> int:
        row = self._one("job_prune_completed", {"older_than": float(older_than), "batch": batch})
        return int(row["deleted"]) if row else 0

    # -- doctor (R20) -----------------------------------------------------------------------
    def running_jobs(self, queue: str | None = None, limit: int = 1000) -> list[Row]:
        """Running jobs, oldest first, with lease state and owner liveness (DB clock)."""
        return self._rows("job_running_list", {"queue": queue, "limit": limit})

    def reap_review(self, window_seconds: float, queue: str | None = None) -> list[Row]:
        """Reaps within the window per queue and task, with later writes from the reaped token."""
        return self._rows("job_reap_review", {"window": float(window_seconds), "queue": queue})


    # -- job control (issue 14) -------------------------------------------------------------
    def job_statuses(self, ids: Sequence[int]) -> dict[int, Row]:
        """``{id: {status, queue_name, task, payload, payload_version}}`` for the ids that exist."""
        return {int(r["id"]): r for r in self._rows("job_status_many", {"ids": list(ids)})}

    def cancel(self, ids: Sequence[int], requested_by: str) -> list[Row]:
        """Cancel the pending and running jobs among ``ids`` (others are left alone); returns one
        row per cancelled job with ``previous_status`` and the ``revoked_token`` of a running one."""
        return self._rows("job_cancel", {"ids": list(ids), "requested_by": requested_by})

    def retry_jobs(self, ids: Sequence[int], requested_by: str) -> list[int]:
        """Put failed or cancelled jobs back as pending with a fresh attempt budget."""
        return [int(r["id"]) for r in self._rows("job_retry_many", {
            "ids": list(ids), "requested_by": requested_by, "channel": self.channel})]

    def job_list(self, *, queue: str | None = None, status: str | None = None, task: str | None = None,
                 created_since: float | None = None, failed_since: float | None = None,
                 before_id: int | None = None, limit: int = 100) -> list[Row]:
        return self._rows("job_list", {"queue": queue, "status": status, "task": task,
                                       "created_since": created_since, "failed_since": failed_since,
                                       "before_id": before_id, "limit": limit})

    def queue_control_set(self, name: str, *, requested_by: str, paused: bool | None = None,
                          max_running: int | None = None, set_limit: bool = False) -> Row:
        """Pause/resume (``paused``) and/or set the global running limit (``set_limit``; None
        removes it). Returns the row after, with ``was_paused`` and ``old_max_running``."""
        row = self._one("queue_control_set", {"name": name, "paused": paused, "max_running": max_running,
                                              "set_limit": set_limit, "requested_by": requested_by,
                                              "channel": self.channel})
        assert row is not None
        return row

    def queue_control_list(self) -> list[Row]:
        return self._rows("queue_control_list")

    def queue_controls(self, queues: Sequence[str] | None = None) -> dict[str, Row]:
        return {r["name"]: r for r in self._rows("queue_control_get",
                                                 {"queues": list(queues) if queues is not None else None})}

    # -- periodic schedules -----------------------------------------------------------------
    def periodic_get(self, names: Sequence[str]) -> dict[str, Row]:
        return {r["name"]: r for r in self._rows("periodic_schedule_get", {"names": list(names)})}

    def periodic_init(self, *, name: str, task: str, queue: str, cron: str, timezone: str,
                      slot: datetime) -> None:
        self._rows("periodic_schedule_init", {"name": name, "task": task, "queue": queue, "cron": cron,
                                              "timezone": timezone, "slot": slot})

    def periodic_enqueue_slot(self, *, name: str, task: str, queue: str, cron: str, timezone: str,
                              slot: datetime, payload: Any, idempotency_key: str, skipped: int = 0,
                              max_attempts: int = 5, priority: int = PRIORITY_DEFAULT) -> int | None:
        """Advance the schedule to ``slot`` and enqueue its job; the job id, or None when another
        scheduler already did (or the slot is not after the last one)."""
        row = self._one("periodic_enqueue_slot", {
            "name": name, "task": task, "queue": queue, "cron": cron, "timezone": timezone, "slot": slot,
            "payload": encode_payload(payload), "idempotency_key": idempotency_key, "skipped": skipped,
            "max_attempts": max_attempts, "priority": check_priority(priority), "channel": self.channel})
        return int(row["id"]) if row else None


def iter_batches(items: Iterable[JobSpec], size: int) -> Iterable[list[JobSpec]]:
    batch: list[JobSpec] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
