"""History upkeep (0009, docs/architecture.md "Where finished jobs live"), run by every reaper cycle.

Keeps the day partitions of ``job_history`` ready ahead of need, and moves the completed jobs an
installation had in ``jobs`` before 0009 into history, a batch per cycle (the online part of the
migration: no long lock, no long transaction; ``tenure history move`` does it at full speed).
Failures are logged and never stop reaping: without the CREATE privilege on the schema nothing
is created, and completions land in the default partition, which retention still prunes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg

from tenure.core.errors import ConfigError, first_line
from tenure.core.repository import HISTORY_DAYS_AHEAD_DEFAULT, HISTORY_MOVE_BATCH_DEFAULT, Repository

log = logging.getLogger("tenure.reaper.history")

ENSURE_INTERVAL_DEFAULT = 300.0


@dataclass(frozen=True)
class HistoryConfig:
    """How often partitions are checked, how far ahead, and how many old rows move per cycle."""

    ensure_interval: float = ENSURE_INTERVAL_DEFAULT
    """Seconds between two partition checks (the first cycle always checks)."""
    days_ahead: int = HISTORY_DAYS_AHEAD_DEFAULT
    """Day partitions kept ready beyond today (UTC)."""
    move_batch: int = HISTORY_MOVE_BATCH_DEFAULT
    """Pre-0009 completed rows moved per cycle while any remain (0: never move them here)."""

    def validate(self) -> None:
        if self.ensure_interval <= 0:
            raise ConfigError("history ensure interval must be positive")
        if self.days_ahead < 1:
            raise ConfigError("history days ahead must be >= 1")
        if self.move_batch < 0:
            raise ConfigError("history move batch must be >= 0")


@dataclass(frozen=True)
class HistoryCycle:
    """What one upkeep cycle did."""

    partitions_created: int
    moved: int


class HistoryKeeper:
    """One per reaper; not thread-safe (a reaper runs its cycles on one thread)."""

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        self.config.validate()
        self._next_ensure = 0.0
        self._legacy_left = True
        """Whether the last move found rows (or none ran yet): pre-0009 rows may remain."""
        self._after_id = 0
        """Where the next move continues (ids only grow; a later row completed before 0009 cannot appear)."""

    def run_once(self, repo: Repository) -> HistoryCycle:
        created = moved = 0
        now = time.monotonic()
        try:
            if now >= self._next_ensure:
                self._next_ensure = now + self.config.ensure_interval
                created = repo.history_ensure(days_ahead=self.config.days_ahead)
                if not self._legacy_left:  # an older tenure's worker may have completed jobs in place since
                    self._legacy_left, self._after_id = True, 0
                if created:
                    log.info("created %d job_history partition(s)", created, extra={"event": "history_partitions"})
            if self._legacy_left and self.config.move_batch:
                moved, last_id = repo.history_move_batch(self.config.move_batch, after_id=self._after_id)
                self._legacy_left = last_id > self._after_id
                self._after_id = last_id
                if moved:
                    log.info("moved %d completed job(s) from jobs into job_history", moved,
                             extra={"event": "history_moved"})
        except psycopg.Error as exc:
            if not repo.conn.autocommit:
                repo.conn.rollback()
            log.warning("job_history upkeep failed (reaping goes on): %s", first_line(exc),
                        extra={"event": "history_failed"})
        return HistoryCycle(created, moved)
