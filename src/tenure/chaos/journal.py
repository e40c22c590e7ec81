"""The journal of a chaos run: its one connection to the chaos database, its clock and its records.

:class:`Journal` is the one owner of the harness's own connection (the processes under test, the
producer and the fault probes each open their own), of the offset between this machine's clock and
the database's, of the fault records waiting to be written, and of the progress lines on stderr.
A record written while the database is away (a restart, a failover) waits in memory and is written
on the next :meth:`Journal.flush`.

Limits: the connection is reopened lazily; callers that get an error from the store call
:meth:`Journal.reset` and try again on the next tick.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, NamedTuple

import psycopg

from tenure.chaos.store import ChaosStore
from tenure.core.db import connect


class FaultRecord(NamedTuple):
    """One row for the run's fault table (``chaos_fault_record``)."""

    kind: str
    pid: int | None
    started: float
    """Database epoch seconds."""
    ended: float | None
    detail: dict[str, Any]


class Journal:
    """The run's chaos database connection, clock offset, pending fault records and progress lines.

    ``dsn`` may be empty until the run's database exists (:meth:`attach`). The lock covers the
    connection and the pending records; the main loop is its usual caller, :meth:`say` may be
    called from any thread.
    """

    def __init__(self, schema: str, *, show_progress: bool, dsn: str = "") -> None:
        self.schema = schema
        self.dsn = dsn
        self.show_progress = show_progress
        self.offset = 0.0
        """Database clock minus this machine's clock, in seconds."""
        self._conn: psycopg.Connection[Any] | None = None
        self._pending: list[FaultRecord] = []
        self._lock = threading.RLock()
        self._last_line = 0.0

    def attach(self, dsn: str) -> None:
        """Use ``dsn`` from now on (the run's database is up)."""
        with self._lock:
            self.reset()
            self.dsn = dsn

    # -- connection -------------------------------------------------------------------------
    def store(self) -> ChaosStore | None:
        """The chaos store on the journal's connection, or None while the database cannot be reached."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = connect(self.dsn, application_name="tenure-chaos-harness")
                return ChaosStore(self._conn, self.schema)
            except psycopg.OperationalError:
                return None

    def reach(self, what: str, *, attempts: int, wait: float) -> ChaosStore:
        """The store, trying ``attempts`` times ``wait`` seconds apart; RuntimeError when it never answers."""
        for _ in range(attempts):
            store = self.store()
            if store is not None:
                return store
            time.sleep(wait)
        raise RuntimeError(f"cannot reach {what}")

    def reset(self) -> None:
        """Close the connection after an error; the next :meth:`store` reconnects."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def close(self, *, drop_schema: bool = False) -> str | None:
        """Close the connection, first dropping the run's schema when asked; the error text if the drop failed."""
        with self._lock:
            if self._conn is None or self._conn.closed:
                return None
            problem = None
            if drop_schema:
                try:
                    ChaosStore(self._conn, self.schema).drop_schema()
                except psycopg.Error as exc:
                    problem = str(exc)
            self._conn.close()
            return problem

    # -- clock ------------------------------------------------------------------------------
    def measure_offset(self) -> None:
        """Measure the database clock against this machine's (one round trip, midpoint)."""
        store = self.reach("the database to measure its clock", attempts=1, wait=0)
        before = time.time()
        db = store.db_now()
        self.offset = db - (before + time.time()) / 2

    def db_time(self) -> float:
        """Now by the database clock (this machine's clock plus the measured offset)."""
        return time.time() + self.offset

    # -- fault records ----------------------------------------------------------------------
    def record(self, kind: str, pid: int | None, started: float, ended: float | None = None,
               **detail: Any) -> None:
        """Keep one fault record and write every pending one the database takes now."""
        with self._lock:
            self._pending.append(FaultRecord(kind, pid, started, ended, detail))
            self.flush()

    def flush(self) -> None:
        """Write pending records in order; stop at the first the database does not take."""
        with self._lock:
            while self._pending:
                store = self.store()
                if store is None:
                    return
                rec = self._pending[0]
                try:
                    store.fault_record(rec.kind, pid=rec.pid, started=rec.started, ended=rec.ended,
                                       detail=rec.detail)
                except psycopg.OperationalError:
                    self.reset()
                    return
                self._pending.pop(0)

    # -- progress ---------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """One progress line on stderr (unless the run is quiet)."""
        if self.show_progress:
            print(text, file=sys.stderr, flush=True)

    def say_every(self, seconds: float, now: float, text: str) -> None:
        """A progress line at most every ``seconds`` (``now`` is monotonic)."""
        if self.show_progress and now - self._last_line >= seconds:
            self._last_line = now
            self.say(text)
