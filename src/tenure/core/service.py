"""The reconnect-and-loop every background service shares (claim, acknowledgements, LISTEN,
heartbeat, reaper, the UI's change feed, the SQS long-poll wake-ups): one connection of its
own, reopened after a database error with a capped doubling backoff with jitter, and a stop
event that ends the loop between steps. :class:`ListenLoop` is the LISTEN thread built on it.

Jitter: each wait is drawn from the upper part of its window (``[1 - jitter, 1] × delay``), so
the processes that lost one primary do not all knock on the next at the same instant; the
longest wait stays the window's.

Limits: a step that blocks forever is not interrupted; steps must use bounded waits.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable

import psycopg

from tenure.core.db import Connection, connect
from tenure.core.errors import first_line
from tenure.core.repository import BrowseStore, Repository

RECONNECT_FIRST_DEFAULT = 0.2
RECONNECT_MAX_DEFAULT = 5.0
RECONNECT_JITTER_DEFAULT = 0.5
"""The part of each backoff window that is random: a wait of ``delay`` lasts between
``(1 - jitter) × delay`` and ``delay`` (0: no jitter, 1: full jitter)."""
LISTEN_WAIT_DEFAULT = 1.0
"""Seconds one wait for notifications lasts before :class:`ListenLoop` looks at its stop flag
and runs its ``tick`` again (a stop through :meth:`ListenLoop.stop_and_join` ends it at once)."""


def jittered(delay: float, jitter: float = RECONNECT_JITTER_DEFAULT, rng: random.Random | None = None) -> float:
    """``delay`` less a random part of at most ``jitter × delay`` (never longer than ``delay``)."""
    return delay * (1.0 - jitter * (rng or random).random())


class ServiceConnection:
    """A service's own connection: :meth:`get` reconnects (retrying with jittered backoff until
    ``stop`` is set, or forever when ``retry_after_stop``) and :meth:`reset` drops it after an error."""

    def __init__(self, dsn: str, application_name: str, *, stop: threading.Event | None = None,
                 log: logging.Logger | None = None, retry_after_stop: bool = False,
                 jitter: float = RECONNECT_JITTER_DEFAULT) -> None:
        self.dsn, self.application_name = dsn, application_name
        self.stop = stop or threading.Event()
        self.log = log or logging.getLogger("tenure.service")
        self.retry_after_stop = retry_after_stop
        self.jitter = jitter
        self.conn: Connection | None = None

    def get(self, *, retry: bool = True) -> Connection:
        """The open connection, reconnecting first if needed; ``retry=False`` tries once and
        raises (a service with its own deadline to keep, like the heartbeat)."""
        delay = RECONNECT_FIRST_DEFAULT
        while self.conn is None or self.conn.closed or self.conn.broken:
            try:
                self.conn = connect(self.dsn, application_name=self.application_name)
            except psycopg.OperationalError as exc:
                if not retry or (self.stop.is_set() and not self.retry_after_stop):
                    raise
                wait = jittered(delay, self.jitter)
                self.log.warning("%s: connection failed, retrying in %.1fs: %s", self.application_name,
                                 wait, first_line(exc))
                if self.retry_after_stop:
                    time.sleep(wait)  # e.g. acknowledgements: still owed after a stop
                else:
                    self.stop.wait(wait)
                delay = min(delay * 2, RECONNECT_MAX_DEFAULT)
        return self.conn

    def reset(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def close(self) -> None:
        self.reset()


def run_service(name: str, step: Callable[[ServiceConnection], float], *, stop: threading.Event,
                conn: ServiceConnection, log: logging.Logger, error_pause: float = 1.0,
                max_error_pause: float = RECONNECT_MAX_DEFAULT,
                on_error: Callable[[], None] | None = None) -> None:
    """Call ``step(conn)`` until ``stop`` is set, waiting the seconds it returns between calls.
    A database error is logged (first line), the connection dropped, and the loop goes on after
    ``error_pause`` seconds (doubling up to ``max_error_pause`` while errors repeat, each pause
    jittered like the connection's); ``on_error`` is called after each such error."""
    pause = error_pause
    failures = 0
    try:
        while not stop.is_set():
            try:
                wait = step(conn)
                failures, pause = 0, error_pause
            except psycopg.Error as exc:
                failures += 1
                log.warning("%s failed (%d in a row): %s", name, failures, first_line(exc))
                conn.reset()
                if on_error is not None:
                    on_error()  # e.g. count the reconnect
                wait, pause = jittered(pause, conn.jitter), min(pause * 2, max_error_pause)
            if wait > 0:
                stop.wait(wait)
    finally:
        conn.close()


class ListenLoop:
    """A thread that holds one LISTEN connection on the schema's wake-up channel (every
    enqueue, release, retry and requeue notifies it, the queue's name as payload), on
    :class:`ServiceConnection` and :func:`run_service`: a lost connection is reopened with
    jittered backoff, and a failed pass is retried after a growing, jittered pause.

    Each pass calls ``tick(repo)`` (optional: e.g. the UI's change feed reads what changed),
    then waits up to ``wait_seconds`` for notifications and hands each payload to
    ``on_notify``. ``on_connect(repo)`` runs after each (re)connect and LISTEN: anything
    notified while the connection was down was missed. Both callbacks see the browse face of
    the loop's connection (what changed: the newest job, the events since one), not the whole
    repository.

    Limits: a notification may be lost (a reconnect, a restart): callers keep a polling
    fallback. The callbacks run on this thread; they must not block.
    """

    def __init__(self, *, dsn: str, schema: str, application_name: str, log: logging.Logger,
                 on_notify: Callable[[str], None] | None = None,
                 on_connect: Callable[[BrowseStore], None] | None = None,
                 tick: Callable[[BrowseStore], object] | None = None,
                 wait_seconds: float = LISTEN_WAIT_DEFAULT, stop: threading.Event | None = None,
                 thread_name: str | None = None) -> None:
        self.schema, self.log, self.wait_seconds = schema, log, wait_seconds
        self.on_notify, self.on_connect, self.tick = on_notify, on_connect, tick
        self.stop = stop or threading.Event()
        self.application_name = application_name
        self.thread_name = thread_name or application_name
        self.conn = ServiceConnection(dsn, application_name, stop=self.stop, log=log)
        self._listening_on: object = None
        self._repo: BrowseStore | None = None
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = -1, -1

    def start(self) -> None:
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop_and_join(self, timeout: float) -> None:
        """Set ``stop``, end the current wait for notifications at once and wait up to
        ``timeout`` seconds for the thread (which closes its connection). Idempotent."""
        self.stop.set()
        if self._thread is None or self._stop_w < 0:
            return
        try:
            os.write(self._stop_w, b"x")
        except BlockingIOError:
            pass
        self._thread.join(timeout=timeout)
        if not self._thread.is_alive():
            os.close(self._stop_r)
            os.close(self._stop_w)
            self._stop_r = self._stop_w = -1

    def run(self) -> None:
        run_service(self.application_name, self.step, stop=self.stop, conn=self.conn, log=self.log)

    def step(self, conn: ServiceConnection) -> float:
        """One pass: (re)connect and LISTEN if needed, ``tick``, one wait for notifications."""
        c = conn.get()
        if c is not self._listening_on or self._repo is None:
            repo = Repository(c, self.schema)
            repo.listen()
            self._repo, self._listening_on = repo, c
            if self.on_connect is not None:
                self.on_connect(self._repo)
        if self.tick is not None:
            self.tick(self._repo)
        readable, _, _ = select.select([c.fileno(), *([self._stop_r] if self._stop_r >= 0 else [])], [], [],
                                       self.wait_seconds)
        if self._stop_r >= 0 and self._stop_r in readable:
            return 0.0  # stopping: run_service sees the flag
        if readable:
            for note in c.notifies(timeout=0):
                if self.on_notify is not None:
                    self.on_notify(note.payload)
        return 0.0
