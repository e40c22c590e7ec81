"""The main loop shared by the local and the HA chaos runs.

Each tick: replace dead processes (:meth:`Fleet.watch`), let the run do its own step (faults,
errors of its threads), then on the journal's connection write pending fault records, take a
lease sample and a sample of the running jobs each worker holds (``held_within_capacity``), and
poll progress. The progress poll reads ``all_jobs``, so it is skipped while a fault holds
``job_history`` locked (the samples read only ``jobs`` and go on). The loop returns once
production and faults are over, every produced job is terminal and the run's other queues
(:attr:`Hooks.drain`) have no unfinished job, or after ``settle_timeout`` seconds of waiting for that.

Limits: a database error skips the rest of the tick and reconnects on the next; an error raised by
``step`` ends the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.chaos import QUEUE
from tenure.chaos.fleet import Fleet
from tenure.chaos.journal import Journal
from tenure.chaos.store import ChaosStore

Progress = dict[str, Any]
"""``chaos_progress``: counts of ``terminal``, ``running``, ``pending`` and ``total`` jobs."""


@dataclass(frozen=True)
class Cadence:
    """How often the main loop does what, in seconds."""

    tick: float
    sample: float
    """Between two lease samples."""
    progress: float
    """Between two progress polls (which also decide the end)."""
    line: float
    """Between two progress lines on stderr."""
    retry_on: type[psycopg.Error] = psycopg.OperationalError
    """Database errors that only skip the tick."""
    capacity: float = 0.1
    """Between two samples of the running jobs each worker holds (at most once a tick)."""


@dataclass(frozen=True)
class Hooks:
    """What a run adds to the shared loop."""

    step: Callable[[float], None]
    """Called every tick with the monotonic time; raises to end the run."""
    quiet: Callable[[], bool]
    """True once production and every fault are over."""
    settled: Callable[[Progress], bool]
    """True once every produced job is terminal."""
    line: Callable[[Progress], str]
    """The progress line."""
    every_tick: Callable[[ChaosStore, float], None] | None = None
    """Extra work on the journal's store each tick."""
    history_locked: Callable[[], bool] | None = None
    """True while a fault holds ``job_history`` locked: the progress poll, which reads it, waits."""
    drain: tuple[str, ...] = ()
    """Queues besides ``QUEUE`` (e.g. ``WF_QUEUE``) where no job may be unfinished when the run settles."""


def run_until_settled(*, fleet: Fleet, journal: Journal, cadence: Cadence, hooks: Hooks,
                      settle_timeout: float, prefix: str) -> None:
    """Tick until the run settles (see the module docstring); ``prefix`` starts the timeout line."""
    next_sample = next_progress = next_capacity = 0.0
    done_at: float | None = None
    while True:
        now = time.monotonic()
        fleet.watch()
        hooks.step(now)
        store = journal.store()
        if store is not None:
            try:
                journal.flush()
                if now >= next_sample:
                    store.lease_sample()
                    next_sample = now + cadence.sample
                if now >= next_capacity:
                    store.capacity_sample()
                    next_capacity = now + cadence.capacity
                if hooks.every_tick is not None:
                    hooks.every_tick(store, now)
                # The progress poll reads all_jobs: under a lock on job_history it would wait out the fault.
                history_free = hooks.history_locked is None or not hooks.history_locked()
                if now >= next_progress and history_free:
                    next_progress = now + cadence.progress
                    prog = store.progress(QUEUE)
                    journal.say_every(cadence.line, now, hooks.line(prog))
                    if hooks.quiet():
                        if hooks.settled(prog) and all(_drained(store, q) for q in hooks.drain):
                            return
                        done_at = done_at or now
                        if now - done_at > settle_timeout:
                            journal.say(f"{prefix}: settle timeout: some jobs never became terminal")
                            return
            except cadence.retry_on:
                journal.reset()
        time.sleep(cadence.tick)


def _drained(store: ChaosStore, queue: str) -> bool:
    """Whether every job on ``queue`` is terminal (no waiting, pending or running one)."""
    prog = store.progress(queue)
    return bool(prog["terminal"] >= prog["total"])
