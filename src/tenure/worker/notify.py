"""Waking the claim loop: a self-pipe (:class:`Wakeup`) that any thread or signal handler may
set, and the LISTEN thread (:class:`Listener`) that sets it when the database notifies one of
this worker's queues (enqueue, release, requeue). Limits: a notification may be lost (a
reconnect, a restart); the claim loop's poll interval covers that.
"""

from __future__ import annotations

import logging
import os
import select
import threading

from tenure.core.repository import Repository
from tenure.core.service import ServiceConnection, run_service

log = logging.getLogger("tenure.worker")

NOTIFY_WAIT = 1.0
"""Seconds one wait for notifications lasts before the stop flag is looked at again (a stop
through :meth:`Listener.stop` ends the wait at once)."""


class Wakeup:
    """A self-pipe: ``set()`` takes no lock, so signal handlers and any thread may call it while
    the claim loop waits (threading.Event.set from a signal handler can deadlock the main thread)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._pending = False

    def set(self) -> None:
        # Skip the syscall while a wake-up is already pending (a drain finishes thousands of
        # jobs a second, each calling set); a plain bool store keeps this signal-safe.
        if self._pending:
            return
        self._pending = True
        try:
            os.write(self._w, b"x")
        except BlockingIOError:
            pass  # already pending

    def wait(self, timeout: float) -> None:
        readable, _, _ = select.select([self._r], [], [], timeout)
        if readable:
            self._pending = True  # a byte is there (even one written after a racing clear): drain it next

    def clear(self) -> None:
        if not self._pending:
            return
        self._pending = False
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        if self._pending:
            # A set() raced with the drain above and its byte may be gone: re-arm it.
            try:
                os.write(self._w, b"x")
            except BlockingIOError:
                pass

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


class Listener:
    """The LISTEN thread: sets ``wakeup`` for notifications naming one of ``queues``, and once
    after each (re)connect (anything notified meanwhile was missed)."""

    def __init__(self, *, dsn: str, schema: str, worker_id: str, queues: tuple[str, ...], wakeup: Wakeup,
                 stop: threading.Event) -> None:
        self.schema, self.queues, self.wakeup, self.stop = schema, queues, wakeup, stop
        self._conn = ServiceConnection(dsn, f"tenure-listen:{worker_id}", stop=stop, log=log)
        self._listening_on: object = None
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = os.pipe()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tenure-listen", daemon=True)
        self._thread.start()

    def stop_and_join(self, timeout: float) -> None:
        """Set ``stop``, end the current wait for notifications at once and wait for the thread."""
        self.stop.set()
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._thread is None or not self._thread.is_alive():
            os.close(self._stop_r)
            os.close(self._stop_w)

    def run(self) -> None:
        run_service("listen", self.step, stop=self.stop, conn=self._conn, log=log)

    def step(self, conn: ServiceConnection) -> float:
        c = conn.get()
        if c is not self._listening_on:
            Repository(c, self.schema).listen()
            self._listening_on = c
            self.wakeup.set()
        readable, _, _ = select.select([c.fileno(), self._stop_r], [], [], NOTIFY_WAIT)
        if self._stop_r in readable:
            return 0.0  # stopping: run_service sees the flag
        if readable:
            for note in c.notifies(timeout=0):
                if note.payload in self.queues:
                    self.wakeup.set()
        return 0.0
