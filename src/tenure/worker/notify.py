"""Waking the claim loop: a self-pipe (:class:`Wakeup`) that any thread or signal handler may
set, and the LISTEN thread (:class:`Listener`) that sets it when the database notifies one of
this worker's queues (enqueue, release, requeue), on the shared LISTEN loop of
:mod:`tenure.core.service`. Limits: a notification may be lost (a
reconnect, a restart); the claim loop's poll interval covers that.
"""

from __future__ import annotations

import logging
import os
import select
import threading

from tenure.core.service import ListenLoop

log = logging.getLogger("tenure.worker")

NOTIFY_WAIT = 1.0
"""Seconds one wait for notifications lasts before the stop flag is looked at again (a stop
through :meth:`Listener.stop_and_join` ends the wait at once)."""


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
    """The LISTEN thread (a :class:`~tenure.core.service.ListenLoop`): sets ``wakeup`` for
    notifications naming one of ``queues``, and once after each (re)connect (anything notified
    meanwhile was missed). The connection is reopened with jittered backoff after an error."""

    def __init__(self, *, dsn: str, schema: str, worker_id: str, queues: tuple[str, ...], wakeup: Wakeup,
                 stop: threading.Event) -> None:
        self.schema, self.queues, self.wakeup, self.stop = schema, queues, wakeup, stop
        self._loop = ListenLoop(dsn=dsn, schema=schema, application_name=f"tenure-listen:{worker_id}", log=log,
                                on_notify=self._notified, on_connect=lambda _repo: wakeup.set(),
                                wait_seconds=NOTIFY_WAIT, stop=stop, thread_name="tenure-listen")

    def start(self) -> None:
        self._loop.start()

    def stop_and_join(self, timeout: float) -> None:
        """Set ``stop``, end the current wait for notifications at once and wait for the thread."""
        self._loop.stop_and_join(timeout)

    def _notified(self, queue: str) -> None:
        if queue in self.queues:
            self.wakeup.set()
