"""The hot table's vacuum: ``VACUUM jobs`` as soon as the dead rows ahead of the claim pile up.

Why: every claim walks the ready indexes from their start, over the entries of the rows claimed
(and, since 0009, deleted on completion) since the table's last vacuum; only a vacuum removes
them. Autovacuum looks at a database once per ``autovacuum_naptime`` (60 s by default, a server
setting that no migration may change), while a busy queue leaves ~2 dead rows per job, so a fast
drain outruns it: on the 2-core bench machine a 1.5M-job drain fell from 17.3k/s in its first
10 % to 10.4k/s in its last, with one autovacuum in between (docs/performance.md, "Flat cost").

Every worker runs one of these on its own thread and connection (autocommit); a session
advisory lock per schema lets one of them vacuum at a time, and each checks every
``check_interval`` seconds whether ``dead`` rows reach both ``dead_rows`` and ``dead_fraction``
of the live ones (so vacuum work, which scans the table's indexes whole, stays proportional to
the dead rows it removes).

Limits: reads the cumulative statistics (at most ~1 s behind); a role that neither owns the
table nor belongs to its owner's role is never vacuumed for (checked each time, logged once),
and PostgreSQL 17's MAINTAIN privilege alone is not recognised; a vacuum already running
(autovacuum's) makes this one a no-op; a vacuum of a large table takes seconds, on this thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from tenure.core.errors import ConfigError
from tenure.core.repository import Repository, SchemaStore
from tenure.core.service import ServiceConnection, run_service

log = logging.getLogger("tenure.vacuum")

VACUUM_CHECK_INTERVAL_DEFAULT = 5.0
VACUUM_DEAD_ROWS_DEFAULT = 100_000
VACUUM_DEAD_FRACTION_DEFAULT = 0.2


@dataclass(frozen=True)
class VacuumConfig:
    """When the hot table is vacuumed; ``dead_rows`` 0 leaves it to autovacuum."""

    check_interval: float = VACUUM_CHECK_INTERVAL_DEFAULT
    """Seconds between two looks at the jobs table's dead rows."""
    dead_rows: int = VACUUM_DEAD_ROWS_DEFAULT
    """Dead rows (``n_dead_tup``) before a vacuum; 0: never vacuum here."""
    dead_fraction: float = VACUUM_DEAD_FRACTION_DEFAULT
    """... and at least this fraction of the live rows (a large backlog waits for more)."""

    def validate(self) -> None:
        if self.check_interval <= 0:
            raise ConfigError("vacuum check interval must be positive")
        if self.dead_rows < 0:
            raise ConfigError("vacuum dead rows must be >= 0")
        if self.dead_fraction < 0:
            raise ConfigError("vacuum dead fraction must be >= 0")

    @property
    def enabled(self) -> bool:
        return self.dead_rows > 0


@dataclass(frozen=True)
class VacuumCycle:
    """What one look did: the counts it read, and the vacuum's wall seconds if it ran one."""

    dead: int
    live: int
    vacuumed: bool
    seconds: float = 0.0


class HotTableVacuum:
    """One per worker; ``run_once`` on one thread at a time (tests call it directly)."""

    def __init__(self, config: VacuumConfig | None = None, *, dsn: str = "", schema: str = "tenure",
                 name: str = "tenure-vacuum") -> None:
        self.config = config or VacuumConfig()
        self.config.validate()
        self.dsn, self.schema, self.name = dsn, schema, name
        self._refused_logged = False

    def due(self, dead: int, live: int) -> bool:
        """Whether ``dead`` rows call for a vacuum next to ``live`` ones (pure)."""
        cfg = self.config
        return cfg.enabled and dead >= cfg.dead_rows and dead >= cfg.dead_fraction * live

    def run_once(self, repo: SchemaStore) -> VacuumCycle:
        dead, live, may_vacuum = repo.job_table_dead_rows()
        if not self.due(dead, live):
            return VacuumCycle(dead, live, False)
        if not may_vacuum:
            if not self._refused_logged:
                self._refused_logged = True
                log.warning("the jobs table has %d dead rows, and this role may not vacuum it: "
                            "autovacuum alone removes them", dead, extra={"event": "vacuum_refused"})
            return VacuumCycle(dead, live, False)
        started = time.monotonic()
        if not repo.job_table_vacuum():
            return VacuumCycle(dead, live, False)
        seconds = time.monotonic() - started
        log.info("vacuumed the jobs table (%d dead rows, %d live) in %.2fs", dead, live, seconds,
                 extra={"event": "vacuum"})
        return VacuumCycle(dead, live, True, seconds)

    def run_forever(self, stop: threading.Event) -> None:
        """Look every ``check_interval`` seconds until ``stop`` is set (a database error: logged,
        reconnect, go on)."""
        if not self.config.enabled:
            return
        conn = ServiceConnection(self.dsn, self.name, stop=stop, log=log)

        def step(service: ServiceConnection) -> float:
            self.run_once(Repository(service.get(), self.schema))
            return self.config.check_interval

        run_service(self.name, step, stop=stop, conn=conn, log=log)
