"""The producer of a chaos run: a thread that enqueues numbered chaos jobs at a pace.

Job ``n`` has idempotency key ``chaos-job:<n>``, so a batch whose commit was not confirmed (a
restart, a failover) is sent again as it was, and a job is never enqueued twice. The pace says how
many jobs are due after some seconds and when production is over; the job builder says what job
``n`` is. An error the producer cannot retry is kept in :attr:`Producer.error` for the main loop.

Limits: one connection, one batch in flight; ``enqueued`` is written by the producer thread only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository


@dataclass(frozen=True)
class Pace:
    """How fast a producer enqueues and what it retries."""

    due: Callable[[float], int]
    """Jobs that should be enqueued after this many seconds of production."""
    over: Callable[[int], bool]
    """True once production is over (given the jobs enqueued so far)."""
    idle: float
    """Seconds to wait when no job is due yet."""
    retry_on: type[psycopg.Error]
    """Errors after which the same batch is sent again (others end the producer)."""
    retry_wait: float
    """Seconds before the batch is sent again."""
    batch_max: int | None = None
    """Jobs per batch at most (None: every due job in one batch)."""


class Producer:
    """Enqueues ``job(n)`` for n = 0, 1, ... at ``pace`` until the pace is over or ``stop`` is set."""

    def __init__(self, dsn: str, schema: str, *, pace: Pace, job: Callable[[int], JobSpec],
                 stop: threading.Event, on_enqueued: Callable[[range], None] | None = None) -> None:
        self.dsn = dsn
        self.schema = schema
        self.pace = pace
        self.job = job
        self.stop = stop
        self.on_enqueued = on_enqueued
        self.enqueued = 0
        """Jobs whose enqueue committed."""
        self.error: BaseException | None = None
        """What ended the producer early, for the main loop to report."""
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _next_batch(self, started: float) -> list[JobSpec]:
        due = self.pace.due(time.monotonic() - started)
        if self.pace.batch_max is not None:
            due = min(due, self.enqueued + self.pace.batch_max)
        return [self.job(n) for n in range(self.enqueued, due)]

    def _run(self) -> None:
        pace = self.pace
        conn: psycopg.Connection[Any] | None = None
        started = time.monotonic()
        batch: list[JobSpec] = []
        try:
            while not pace.over(self.enqueued) and not self.stop.is_set():
                batch = batch or self._next_batch(started)
                if not batch:
                    self.stop.wait(pace.idle)
                    continue
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-producer")
                    Repository(conn, self.schema).enqueue_many(batch)
                except pace.retry_on:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self.stop.wait(pace.retry_wait)  # the same batch again: idempotency keys make it safe
                    continue
                done = range(self.enqueued, self.enqueued + len(batch))
                if self.on_enqueued is not None:
                    self.on_enqueued(done)
                self.enqueued, batch = done.stop, []
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.error = exc
        finally:
            if conn is not None:
                conn.close()
