"""The reconnect-and-loop every background service shares (claim, acknowledgements, LISTEN,
heartbeat, reaper): one connection of its own, reopened after a database error with a capped
doubling backoff, and a stop event that ends the loop between steps.

Limits: a step that blocks forever is not interrupted; steps must use bounded waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from tenure.core.db import Connection, connect
from tenure.core.errors import first_line

RECONNECT_FIRST_DEFAULT = 0.2
RECONNECT_MAX_DEFAULT = 5.0


class ServiceConnection:
    """A service's own connection: :meth:`get` reconnects (retrying with backoff until
    ``stop`` is set, or forever when ``retry_after_stop``) and :meth:`reset` drops it after an error."""

    def __init__(self, dsn: str, application_name: str, *, stop: threading.Event | None = None,
                 log: logging.Logger | None = None, retry_after_stop: bool = False) -> None:
        self.dsn, self.application_name = dsn, application_name
        self.stop = stop or threading.Event()
        self.log = log or logging.getLogger("tenure.service")
        self.retry_after_stop = retry_after_stop
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
                self.log.warning("%s: connection failed, retrying in %.1fs: %s", self.application_name,
                                 delay, first_line(exc))
                if self.retry_after_stop:
                    time.sleep(delay)  # e.g. acknowledgements: still owed after a stop
                else:
                    self.stop.wait(delay)
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
    ``error_pause`` seconds (doubling up to ``max_error_pause`` while errors repeat); ``on_error``
is called after each such error."""
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
                wait, pause = pause, min(pause * 2, max_error_pause)
            if wait > 0:
                stop.wait(wait)
    finally:
        conn.close()
