"""Per-task timeouts (``@app.task(..., timeout=SECONDS)``): one thread, one heap of deadlines.

A deadline bounds one attempt's run time from its start in this process, separately from the
lease (which only proves the worker is alive). When it passes, ``on_timeout(ctx, seconds)`` is
called once; the worker then frees the slot as for a lost lease, writes a retry classified as
``task_timeout`` (CAS on the token) and tells the handler (async handlers are cancelled; a sync
handler thread cannot be killed, so it is abandoned and counted). Deadlines use the monotonic
clock of this process: they measure a duration, never compare with the database clock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from tenure.worker.context import JobContext

log = logging.getLogger("tenure.worker")


class Deadlines:
    """Calls ``on_timeout`` for every registered context whose deadline passes first."""

    def __init__(self, on_timeout: Callable[[JobContext, float], None]) -> None:
        self._on_timeout = on_timeout
        self._heap: list[tuple[float, int, JobContext, float]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, ctx: JobContext, seconds: float) -> None:
        """Start timing ``ctx`` now; the worker ignores a deadline whose job has already finished."""
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="tenure-timeouts", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), ctx, seconds))
            self._cond.notify()

    def run_once(self, now: float | None = None) -> int:
        """Fire every deadline due at ``now``; returns how many fired (tests call this directly)."""
        due: list[tuple[JobContext, float]] = []
        with self._cond:
            at = time.monotonic() if now is None else now
            while self._heap and self._heap[0][0] <= at:
                _, _, ctx, seconds = heapq.heappop(self._heap)
                due.append((ctx, seconds))
        for ctx, seconds in due:
            try:
                self._on_timeout(ctx, seconds)
            except Exception:  # noqa: BLE001 - one bad callback must not stop the others
                log.exception("timeout handling failed", extra=ctx.log_extra)
        return len(due)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                wait = (self._heap[0][0] - time.monotonic()) if self._heap else None
                if wait is None or wait > 0:
                    self._cond.wait(timeout=wait)
                    continue
            self.run_once()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
