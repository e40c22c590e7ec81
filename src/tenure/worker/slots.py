"""The one owner of a worker's shared state (River's producer/executor split): the jobs it
holds, their handler futures, handler threads abandoned after a lost lease, outcomes still to be
written, and the effects whose keys are in flight, all behind one lock.

Every other part asks: the claim loop how many slots are free, the executor to take and
finish a job, the heartbeat for a :class:`Snapshot` (copies, never the live dicts), the acker to
count what it wrote, the drain to hand back what is left. "Free a slot" exists once
(:meth:`Slots._free`).

Unacknowledged work is bounded (issue 40): a slot is free only when its job is neither running
nor waiting for its outcome to be written, so when acknowledgements lag the claim loop waits
(back-pressure) instead of claiming a backlog that nobody can acknowledge. A finished job whose
outcome is not yet written keeps its lease: the heartbeat renews it like a running one, so a
slow database never lets the reaper re-run work whose handler already returned. Limits:
in-process only; the counts are what this process believes.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tenure.worker.context import JobContext


@dataclass(frozen=True)
class Snapshot:
    """What the heartbeat renews at one instant (copies): running jobs, finished jobs whose
    outcome is not yet written, and open effects."""

    held: dict[int, JobContext]
    effects: dict[uuid.UUID, JobContext]
    finished: dict[int, JobContext] = field(default_factory=dict)
    """Jobs whose handler returned, keyed by id, until their outcome is written: their leases
    are renewed but never judged lost here (nothing runs to be told)."""


class Slots:
    """Held jobs and everything tied to them, with one lock and one condition (idle/acked)."""

    def __init__(self, capacity: int, on_acked: Callable[[], None] | None = None) -> None:
        self.capacity = capacity
        self._on_acked = on_acked or (lambda: None)
        """Called (lock held: it must not block) when outcomes are written: slots are free again
        to claim, or, with nothing left, a burst worker may exit now."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._held: dict[int, JobContext] = {}
        self._finished: dict[int, JobContext] = {}
        self._futures: dict[int, Future[Any]] = {}
        self._abandoned: set[int] = set()
        self._effects: dict[uuid.UUID, JobContext] = {}
        self._pending_acks = 0
        self.processed = 0

    # -- reads ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._held)

    @property
    def abandoned(self) -> int:
        return len(self._abandoned)

    def held_count(self, queue: str, task: str) -> int:
        """Jobs of this queue and task held now: the in-flight gauge's value, counted when
        scraped (a walk of at most ``capacity`` jobs) rather than kept up to date per job."""
        with self._lock:
            return sum(1 for ctx in self._held.values() if ctx.job.queue == queue and ctx.job.task == task)

    @property
    def unwritten(self) -> int:
        """Outcomes handed to the acker and not yet written (the unwritten-outcomes gauge)."""
        return self._pending_acks

    def free(self) -> int:
        """Slots to claim into: capacity less the jobs running and the outcomes not yet written."""
        with self._lock:
            return max(0, self.capacity - len(self._held) - self._pending_acks)

    def busy(self) -> bool:
        """Jobs running or outcomes not yet written (burst mode waits for neither)."""
        with self._lock:
            return bool(self._held) or self._pending_acks > 0

    def holds(self, ctx: JobContext) -> bool:
        with self._lock:
            return self._held.get(ctx.job.id) is ctx

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(dict(self._held), dict(self._effects), dict(self._finished))

    # -- the executor -------------------------------------------------------------------------
    def take(self, ctx: JobContext) -> None:
        self.take_many([ctx])

    def take_many(self, ctxs: list[JobContext]) -> None:
        """Hold a claim batch (one lock)."""
        with self._lock:
            for ctx in ctxs:
                self._held[ctx.job.id] = ctx

    def attach(self, ctx: JobContext, future: Future[Any]) -> None:
        with self._lock:
            if self._held.get(ctx.job.id) is ctx:
                self._futures[ctx.job.id] = future

    def finish(self, ctx: JobContext) -> None:
        """The handler returned: its job stops running and owes an outcome. Its slot stays taken,
        and its lease renewed, until the acker has written that outcome (:meth:`acked`); a job
        whose lease was already lost only owes the (refused) write."""
        with self._lock:
            if self._free(ctx):
                self._finished[ctx.job.id] = ctx
            self._futures.pop(ctx.job.id, None)
            self._abandoned.discard(ctx.job.id)
            self._pending_acks += 1
            self._changed.notify_all()

    def lose(self, ctx: JobContext, *, is_async: bool, owe_ack: bool = False) -> bool:
        """The lease is lost (or the attempt timed out): free the slot now so the worker keeps
        serving; a sync handler still running is counted as abandoned until it returns.
        ``owe_ack``: the caller writes an outcome for this attempt (a timeout's retry), whose lease
        is then kept until it is written. False if not held (any more), and then nothing is owed."""
        with self._lock:
            if not self._free(ctx):
                return False
            fut = self._futures.get(ctx.job.id)
            if fut is not None and not fut.done() and not is_async:
                self._abandoned.add(ctx.job.id)
            if owe_ack:
                self._finished[ctx.job.id] = ctx
                self._pending_acks += 1
            self._changed.notify_all()
            return True

    def _free(self, ctx: JobContext) -> bool:
        """The one place a slot is freed (caller holds the lock)."""
        if self._held.get(ctx.job.id) is not ctx:
            return False
        del self._held[ctx.job.id]
        return True

    # -- effects --------------------------------------------------------------------------------
    def effect_changed(self, ctx: JobContext, opened: bool) -> None:
        """A claimed effect opened (its key is renewed by the heartbeat) or closed."""
        with self._lock:
            if opened:
                self._effects[ctx.lock_token] = ctx
            else:
                self._effects.pop(ctx.lock_token, None)

    # -- acknowledgements and the drain ---------------------------------------------------------
    def owe_acks(self, count: int) -> None:
        with self._lock:
            self._pending_acks += count

    def acked(self, ctxs: Sequence[JobContext], *, written: bool = True) -> None:
        """The outcomes of these attempts are done with (written, or given up when ``written`` is
        False): their leases are no longer renewed here and their slots are free."""
        with self._lock:
            for ctx in ctxs:
                if self._finished.get(ctx.job.id) is ctx:
                    del self._finished[ctx.job.id]
            self._pending_acks -= len(ctxs)
            if written:
                self.processed += len(ctxs)
            self._changed.notify_all()
            self._on_acked()

    def give_up_unwritten(self) -> None:
        """No outcome will be written any more (the acknowledgement thread died): stop renewing
        the finished jobs' leases, so they expire and the reaper recovers the jobs, and owe
        nothing (a drain does not wait for writes that cannot come)."""
        with self._lock:
            self._finished.clear()
            self._pending_acks = 0
            self._changed.notify_all()
            self._on_acked()

    def wait_idle(self, deadline: float) -> None:
        """Until no job runs or the monotonic ``deadline`` passes."""
        with self._lock:
            while self._held and time.monotonic() < deadline:
                self._changed.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))

    def take_all(self) -> list[JobContext]:
        """Hand back every job still held (the drain timed out); each now owes an ack, and keeps
        its lease until its release is written."""
        with self._lock:
            left = list(self._held.values())
            for ctx in left:
                self._free(ctx)
                self._finished[ctx.job.id] = ctx
            self._pending_acks += len(left)
            return left

    def wait_acked(self, deadline: float) -> None:
        with self._lock:
            while self._pending_acks > 0 and time.monotonic() < deadline:
                self._changed.wait(timeout=0.2)
