"""Where finished jobs live (0009, docs/architecture.md "Where finished jobs live"): the one owner.

Everything that keeps ``job_history`` in shape is decided here; the repository
(``tenure.core.repository.history``) only runs the statements.

- **Partitions:** :func:`ensure_partitions` makes the day partitions from ``days_back`` days
  before today (UTC, by the database clock) to ``days_ahead`` after it. ``tenure migrate`` and
  ``tenure history move`` call it; each worker at start and every reaper cycle go through
  :class:`HistoryKeeper`, which logs a failure instead of raising.
- **The move of pre-0009 rows:** :class:`LegacyMove` is the one keyset walk over the completed
  jobs an installation had in ``jobs`` before 0009, a batch (one short transaction) per step.
  The reaper takes one step per cycle (the online part of the migration: no long lock, no long
  transaction); ``tenure history move`` walks to the end at full speed (:func:`move_legacy`).
- **Retention:** :class:`Retention` is ``tenure prune``: whole day partitions older than the
  cutoff, then completed jobs outside a day partition and cancelled jobs in batches, then stale
  worker rows.

The reaper's upkeep never stops reaping: without the CREATE privilege on the schema nothing is
created, and completions land in the default partition, which retention still prunes. That
``jobs`` and ``job_history`` keep the same columns is tested (tests/integration/test_history.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import psycopg

from tenure.core.errors import ConfigError, first_line
from tenure.core.repository import (
    HISTORY_DAYS_AHEAD_DEFAULT,
    HISTORY_DAYS_BACK_DEFAULT,
    HISTORY_MOVE_BATCH_DEFAULT,
    PRUNE_BATCH_DEFAULT,
    Connected,
    HistoryStore,
    RegistryStore,
    WorkflowStore,
)

log = logging.getLogger("tenure.reaper.history")

ENSURE_INTERVAL_DEFAULT = 300.0


class KeeperStore(Connected, HistoryStore, Protocol):
    """What :class:`HistoryKeeper` uses: the history area and the connection (a rollback after a
    failed step, on a connection inside a transaction)."""


class RetentionStore(HistoryStore, RegistryStore, WorkflowStore, Protocol):
    """What :class:`Retention` uses: the history area's pruning, the registry's and the workflows'."""


__all__ = [
    "ENSURE_INTERVAL_DEFAULT", "HISTORY_DAYS_AHEAD_DEFAULT", "HISTORY_DAYS_BACK_DEFAULT", "HISTORY_MOVE_BATCH_DEFAULT",
    "PRUNE_BATCH_DEFAULT", "HistoryConfig", "HistoryCycle", "HistoryKeeper", "KeeperStore", "LegacyMove", "Moved", "Pruned",
    "Retention", "RetentionConfig", "RetentionStore", "ensure_partitions", "move_legacy",
]


@dataclass(frozen=True)
class HistoryConfig:
    """How often partitions are checked, how far around today, and how many old rows move per cycle."""

    ensure_interval: float = ENSURE_INTERVAL_DEFAULT
    """Seconds between two partition checks of a :class:`HistoryKeeper` (the first cycle always checks)."""
    days_ahead: int = HISTORY_DAYS_AHEAD_DEFAULT
    """Day partitions kept ready beyond today (UTC)."""
    days_back: int = HISTORY_DAYS_BACK_DEFAULT
    """Day partitions ensured before today (a completion just before midnight finds its day)."""
    move_batch: int = HISTORY_MOVE_BATCH_DEFAULT
    """Pre-0009 completed rows moved per cycle while any remain (0: never move them here)."""

    def validate(self) -> None:
        if self.ensure_interval <= 0:
            raise ConfigError("history ensure interval must be positive")
        if self.days_ahead < 1:
            raise ConfigError("history days ahead must be >= 1")
        if self.days_back < 0:
            raise ConfigError("history days back must be >= 0")
        if self.move_batch < 0:
            raise ConfigError("history move batch must be >= 0")


def ensure_partitions(repo: HistoryStore, config: HistoryConfig | None = None) -> int:
    """Create the missing day partitions around today; how many were made. Raises the database's
    error (no CREATE privilege, a lock not granted within 2 s): callers that must go on use
    :class:`HistoryKeeper`."""
    cfg = config or HistoryConfig()
    return repo.history_ensure(days_back=cfg.days_back, days_ahead=cfg.days_ahead)


class LegacyMove:
    """The keyset walk over the completed jobs still in ``jobs`` (pre-0009), in id order.

    Each :meth:`step` moves one batch in one short transaction, creating the day partitions it
    needs. Ids only grow, and since 0009 a completion never leaves its job in ``jobs``, so a row
    below :attr:`after_id` cannot appear, except from an older tenure's worker still running:
    :meth:`restart` walks again from the start."""

    def __init__(self) -> None:
        self.after_id = 0
        """Where the next step continues."""
        self.left = True
        """Whether the last step found rows (or none ran yet): pre-0009 rows may remain."""

    def step(self, repo: HistoryStore, batch: int) -> int:
        """Move the next ``batch`` rows; how many moved. :attr:`left` is False once none was found."""
        moved, last_id = repo.history_move_batch(batch, after_id=self.after_id)
        self.left = last_id > self.after_id
        self.after_id = last_id
        return moved

    def restart(self) -> None:
        self.after_id, self.left = 0, True


@dataclass(frozen=True)
class Moved:
    """What :func:`move_legacy` did."""

    moved: int
    batches: int
    seconds: float


def move_legacy(repo: HistoryStore, *, batch: int = HISTORY_MOVE_BATCH_DEFAULT, pause: float = 0.0,
                config: HistoryConfig | None = None) -> Moved:
    """``tenure history move``: ensure the partitions, then walk :class:`LegacyMove` to the end,
    ``pause`` seconds between two batches that moved rows."""
    started = time.monotonic()
    ensure_partitions(repo, config)
    walk = LegacyMove()
    moved = batches = 0
    while True:
        n = walk.step(repo, batch)
        if not walk.left:
            break
        moved += n
        batches += 1
        if pause:
            time.sleep(pause)
    return Moved(moved, batches, time.monotonic() - started)


@dataclass(frozen=True)
class HistoryCycle:
    """What one upkeep cycle did."""

    partitions_created: int
    moved: int


class HistoryKeeper:
    """The upkeep of every reaper cycle (and, with ``move_batch=0``, of a worker's start): the
    partitions every ``ensure_interval``, and one :class:`LegacyMove` step while rows remain.
    A database error is logged, never raised. Not thread-safe (a reaper runs its cycles on one
    thread)."""

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        self.config.validate()
        self._next_ensure = 0.0
        self._walk = LegacyMove()

    def run_once(self, repo: KeeperStore) -> HistoryCycle:
        created = moved = 0
        now = time.monotonic()
        try:
            if now >= self._next_ensure:
                self._next_ensure = now + self.config.ensure_interval
                created = ensure_partitions(repo, self.config)
                if not self._walk.left:  # an older tenure's worker may have completed jobs in place since
                    self._walk.restart()
                if created:
                    log.info("created %d job_history partition(s)", created, extra={"event": "history_partitions"})
            if self._walk.left and self.config.move_batch:
                moved = self._walk.step(repo, self.config.move_batch)
                if moved:
                    log.info("moved %d completed job(s) from jobs into job_history", moved,
                             extra={"event": "history_moved"})
        except psycopg.Error as exc:
            if not repo.conn.autocommit:
                repo.conn.rollback()
            log.warning("job_history upkeep failed (reaping goes on): %s", first_line(exc),
                        extra={"event": "history_failed"})
        return HistoryCycle(created, moved)


@dataclass(frozen=True)
class RetentionConfig:
    """How old a finished job must be to go, and how many rows a statement deletes."""

    older_than: float
    """Seconds since completion (cancellation; a worker row's last heartbeat)."""
    batch: int = PRUNE_BATCH_DEFAULT
    """Rows per statement of the row-by-row parts."""

    def validate(self) -> None:
        if self.older_than < 0:
            raise ConfigError("retention age must be >= 0")
        if self.batch < 1:
            raise ConfigError("prune batch must be >= 1")


@dataclass(frozen=True)
class Pruned:
    """What one retention pass deleted."""

    completed: int
    """Completed jobs, in dropped partitions and row by row."""
    partitions: int
    cancelled: int
    workers: int
    workflows: int = 0
    """Workflows whose steps had all been deleted (by this pass or an earlier one)."""
    batches: int = 0


class Retention:
    """``tenure prune``: each day partition whose whole day ended more than ``older_than`` ago
    goes as a whole, with its jobs' events and keys (so up to a day more is kept); completed jobs
    outside a day partition (still in ``jobs``, or in the default partition) and cancelled jobs
    go in batches; then the stale worker rows, and the workflows and batches (docs/workflows.md)
    created more than ``older_than`` ago whose jobs are all gone."""

    def __init__(self, config: RetentionConfig) -> None:
        config.validate()
        self.config = config

    def run_once(self, repo: RetentionStore) -> Pruned:
        older_than, batch = self.config.older_than, self.config.batch
        completed = partitions = 0
        while (held := repo.history_drop_oldest(older_than)) is not None:
            completed += held
            partitions += 1
        completed += _in_batches(lambda: repo.prune_completed(older_than, batch=batch), batch)
        cancelled = _in_batches(lambda: repo.prune_cancelled(older_than, batch=batch), batch)
        workers = repo.worker_prune(older_than)
        workflows = _in_batches(lambda: repo.workflow_prune(older_than, batch), batch)
        batches = _in_batches(lambda: repo.batch_prune(older_than, batch), batch)
        return Pruned(completed, partitions, cancelled, workers, workflows, batches)


def _in_batches(delete: Callable[[], int], batch: int) -> int:
    """Run ``delete`` until a call deletes fewer than ``batch`` rows; the total."""
    total = 0
    while True:
        deleted = delete()
        total += deleted
        if deleted < batch:
            return total
