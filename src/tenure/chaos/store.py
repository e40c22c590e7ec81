"""The chaos harness's one SQL-running module: named queries from ``chaos.sql``.

A documented exception to "only core/repository runs SQL": the harness and its task keep
their own tables (effects, faults, lease samples) in the run's schema, and this module is the
only place outside the repository that executes SQL, always named queries from a ``.sql`` file
loaded with :func:`tenure.core.queries.parse_named_queries`. Nothing here touches tenure's own
tables except to read them, and to lock ``job_history`` for the ``slow_completions`` fault.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tenure.core.queries import parse_named_queries, quote_ident

Row = dict[str, Any]


@lru_cache(maxsize=None)
def chaos_queries(schema: str) -> dict[str, str]:
    """The harness's queries with ``{schema}`` replaced by the quoted schema."""
    text = resources.files("tenure.chaos").joinpath("chaos.sql").read_text(encoding="utf-8")
    quoted = quote_ident(schema)
    return {name: sql.replace("{schema}", quoted) for name, (_, sql) in parse_named_queries(text).items()}


class ChaosStore:
    """Named chaos queries bound to one (autocommit) connection and one schema."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str) -> None:
        self.conn = conn
        self.schema = schema
        self._q = chaos_queries(schema)

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self._q[name], params)
            return cur.fetchall() if cur.description else []

    # -- setup and clock ----------------------------------------------------------------------
    def setup(self) -> None:
        self._rows("chaos_setup")

    def drop_schema(self) -> None:
        self._rows("chaos_schema_drop")

    def db_now(self) -> float:
        return float(self._rows("chaos_db_now")[0]["epoch"])

    # -- written by the chaos task ------------------------------------------------------------
    def effect_guarded(self, *, n: int, job_id: int, key: str, token: uuid.UUID, fence: int, attempt: int,
                       pid: int, wall: float) -> bool:
        """Send the guarded effect; True when applied, False when the provider deduplicated it."""
        row = self._rows("chaos_effect_guarded", {"n": n, "job_id": job_id, "key": key, "token": token,
                                                  "fence": fence, "attempt": attempt, "pid": pid, "wall": wall})
        return bool(row and row[0]["applied"])

    def effect_lookup(self, key: str) -> str | None:
        """The provider's answer to a reconcile: the applied guarded effect's reference, or None."""
        rows = self._rows("chaos_effect_lookup", {"key": key})
        return str(rows[0]["ref"]) if rows else None

    def effect_unguarded(self, *, n: int, job_id: int, token: uuid.UUID, fence: int, attempt: int,
                         pid: int, wall: float) -> None:
        self._rows("chaos_effect_unguarded", {"n": n, "job_id": job_id, "token": token, "fence": fence,
                                              "attempt": attempt, "pid": pid, "wall": wall})

    def fault_fire(self, kind: str, *, job_id: int, token: uuid.UUID, pid: int,
                   detail: dict[str, Any] | None = None) -> bool:
        """Record a job-level fault; True only for the first call per job and kind."""
        return bool(self._rows("chaos_fault_fire", {"kind": kind, "pid": pid, "job_id": job_id, "token": token,
                                                    "detail": Jsonb(detail or {})}))

    def fence_note(self, kind: str, *, job_id: int, token: uuid.UUID, pid: int) -> None:
        """Note that an attempt stopped on LeaseLost (``self_fenced`` or ``effect_succeed_rejected``)."""
        self._rows("chaos_fence_note", {"kind": kind, "job_id": job_id, "token": token, "pid": pid})

    def returned(self, *, job_id: int, token: uuid.UUID, attempt: int, pid: int) -> None:
        """Note that this attempt's handler returned successfully (the task's last act)."""
        self._rows("chaos_returned", {"job_id": job_id, "token": token, "attempt": attempt, "pid": pid})

    # -- written by the harness ---------------------------------------------------------------
    def fault_record(self, kind: str, *, pid: int | None, started: float, ended: float | None = None,
                     detail: dict[str, Any] | None = None) -> None:
        self._rows("chaos_fault_record", {"kind": kind, "pid": pid, "started": started, "ended": ended,
                                          "detail": Jsonb(detail or {})})

    def lease_sample(self) -> None:
        self._rows("chaos_lease_sample")

    def capacity_sample(self) -> None:
        """One snapshot of the running jobs each worker holds under an unexpired lease, and of
        the flow key with the most running jobs."""
        self._rows("chaos_capacity_sample")
        self._rows("chaos_flow_sample")

    @contextmanager
    def history_locked(self, *, lock_timeout: float, idle_timeout: float) -> Iterator[float]:
        """Hold ``job_history`` (every partition with it) in ACCESS EXCLUSIVE mode for the body of
        the ``with``, in one transaction rolled back at the end; yields the database time the lock
        was granted. Waits at most ``lock_timeout`` seconds for it (``LockNotAvailable``); the server
        ends the session if it sits idle holding it for ``idle_timeout`` seconds."""
        with self.conn.transaction(force_rollback=True):
            self._rows("chaos_history_lock_limits", {"lock_timeout": f"{max(1, int(lock_timeout * 1000))}ms",
                                                     "idle_timeout": f"{max(1, int(idle_timeout * 1000))}ms"})
            self._rows("chaos_history_lock")
            yield self.db_now()

    def unique_sample(self) -> None:
        """One snapshot of the unique keys pending or running jobs hold (``unique_keys_held_once``)."""
        self._rows("chaos_unique_sample")

    def running_by_pid(self) -> dict[int, int]:
        return {int(r["pid"]): int(r["running"]) for r in self._rows("chaos_running_by_pid")}

    def progress(self, queue: str) -> Row:
        return self._rows("chaos_progress", {"queue": queue})[0]

    # -- read at the end ----------------------------------------------------------------------
    def jobs_summary(self, queue: str) -> list[Row]:
        return self._rows("chaos_jobs_summary", {"queue": queue})

    def reaps(self, queue: str) -> list[Row]:
        return self._rows("chaos_reaps", {"queue": queue})

    def faults(self) -> list[Row]:
        return self._rows("chaos_faults_list")

    def event_counts(self, queue: str) -> dict[str, int]:
        return {str(r["event"]): int(r["n"]) for r in self._rows("chaos_event_counts", {"queue": queue})}

    def capacity_samples(self) -> list[Row]:
        return self._rows("chaos_capacity_samples")

    def flow_samples(self) -> list[Row]:
        return self._rows("chaos_flow_samples")

    def attempts(self, queue: str) -> list[Row]:
        """Every attempt of the queue's jobs by start, and the jobs never claimed (``chaos_attempts``)."""
        return self._rows("chaos_attempts", {"queue": queue})

    # -- read at the end: workflows, batches, unique jobs (issue 39) -------------------------
    def unique_samples(self) -> list[Row]:
        """The unique-key samples, then one ``at_end`` row per key held twice now."""
        return self._rows("chaos_unique_samples")

    def unique_jobs(self, queue: str) -> dict[str, int]:
        return {str(r["status"]): int(r["n"]) for r in self._rows("chaos_unique_jobs", {"queue": queue})}

    def workflow_steps(self, queue: str) -> list[Row]:
        return self._rows("chaos_workflow_steps", {"queue": queue})

    def workflow_attempts(self, queue: str) -> list[Row]:
        return self._rows("chaos_workflow_attempts", {"queue": queue})

    def batches(self, queue: str) -> list[Row]:
        return self._rows("chaos_batches", {"queue": queue})

    def batch_callbacks(self, queue: str) -> list[Row]:
        return self._rows("chaos_batch_callbacks", {"queue": queue})

    def clock_offsets(self) -> list[Row]:
        return self._rows("chaos_clock_offsets")

    def pick_for_cancel(self, queue: str, fraction: float) -> int | None:
        rows = self._rows("chaos_pick_for_cancel", {"queue": queue, "fraction": min(max(fraction, 0.0), 0.999)})
        return int(rows[0]["id"]) if rows else None

    def claims_between(self, queue: str, start: float, end: float) -> int:
        return int(self._rows("chaos_claims_between", {"queue": queue, "start": start, "end": end})[0]["n"])

    def timeout_job_ids(self, queue: str) -> set[int]:
        return {int(r["job_id"]) for r in self._rows("chaos_timeout_jobs", {"queue": queue})}

    def workers(self) -> dict[str, int]:
        return {str(r["id"]): int(r["pid"]) for r in self._rows("chaos_workers")}

    # -- HA runs (``tenure chaos --ha patroni``) ---------------------------------------------
    def ha_setup(self) -> None:
        self._rows("chaos_ha_setup")

    def ha_probe(self) -> Row:
        """A write on the server the connection reached; raises on a standby or a dead link."""
        return self._rows("chaos_ha_probe")[0]

    def ledger_record(self, kind: str, *, n: int, job_id: int | None = None, token: uuid.UUID | None = None,
                      pid: int | None = None) -> None:
        self._rows("chaos_ledger_record", {"kind": kind, "n": n, "job_id": job_id, "token": token, "pid": pid})

    def ledger_provider_call(self, *, n: int, job_id: int, key: str, token: uuid.UUID, pid: int) -> bool:
        """Call the external provider; True when applied, False when it deduplicated the key."""
        rows = self._rows("chaos_ledger_provider_call", {"n": n, "job_id": job_id, "key": key, "token": token,
                                                         "pid": pid})
        return bool(rows and rows[0]["applied"])

    def ledger_rows(self) -> list[Row]:
        return self._rows("chaos_ledger_rows")
