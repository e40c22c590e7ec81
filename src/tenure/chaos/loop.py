"""The main loop shared by the local and the HA chaos runs.

Each tick: replace dead processes (:meth:`Fleet.watch`), let the run do its own step (faults,
errors of its threads), then on the journal's connection write pending fault records, take a
lease sample, and poll progress. The loop returns once production and faults are over and every
job is terminal, or after ``settle_timeout`` seconds of waiting for that.

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


def run_until_settled(*, fleet: Fleet, journal: Journal, cadence: Cadence, hooks: Hooks,
                      settle_timeout: float, prefix: str) -> None:
    """Tick until the run settles (see the module docstring); ``prefix`` starts the timeout line."""
    next_sample = next_progress = 0.0
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
                if hooks.every_tick is not None:
                    hooks.every_tick(store, now)
                if now >= next_progress:
                    next_progress = now + cadence.progress
                    prog = store.progress(QUEUE)
                    journal.say_every(cadence.line, now, hooks.line(prog))
                    if hooks.quiet():
                        if hooks.settled(prog):
                            return
                        done_at = done_at or now
                        if now - done_at > settle_timeout:
                            journal.say(f"{prefix}: settle timeout: some jobs never became terminal")
                            return
            except cadence.retry_on:
                journal.reset()
        time.sleep(cadence.tick)
