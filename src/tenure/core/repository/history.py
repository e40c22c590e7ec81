"""Where finished jobs live (0009, docs/architecture.md): completed jobs move from ``jobs`` into
``job_history``, partitioned by UTC day of completion, in the statement that completes them.

This area runs the statements that keep the day partitions ahead of need, move the completed
rows an installation had before 0009 in batches (the online part of the migration), and apply
retention: dropping whole partitions, deleting old completed rows outside one, and old cancelled
jobs. When and how far they run is decided in one place, :mod:`tenure.reaper.history`, which
`tenure migrate`, the worker, the reaper, `tenure history` and `tenure prune` call. Partition DDL needs the CREATE privilege on the schema and waits at most 2 s
for a table lock; a completion on a day without a partition lands in the default partition,
which :meth:`HistoryQueries.history_ensure` empties into the day's partition once it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from tenure.core.repository.base import RepositoryBase

HISTORY_DAYS_AHEAD_DEFAULT = 2
"""Day partitions kept ready beyond today (UTC): a reaper that misses a day changes nothing."""
HISTORY_DAYS_BACK_DEFAULT = 1
"""Also ensure the day before today, so a completion just before midnight finds its partition."""
HISTORY_MOVE_BATCH_DEFAULT = 10_000
"""Pre-0009 completed rows moved per transaction."""
PRUNE_BATCH_DEFAULT = 10_000
"""Rows deleted per statement by the row-by-row parts of retention."""


@dataclass(frozen=True)
class HistoryPartition:
    """One partition of ``job_history``: its name, bounds and the planner's row estimate
    (-1 before its first analyze)."""

    name: str
    bounds: str
    estimated_rows: int


class HistoryQueries(RepositoryBase):
    """Partitions, the batched move of pre-0009 completed rows, and retention."""

    def history_ensure(self, *, days_back: int = HISTORY_DAYS_BACK_DEFAULT,
                       days_ahead: int = HISTORY_DAYS_AHEAD_DEFAULT) -> int:
        """Create the missing day partitions around today (DB clock, UTC); how many were made."""
        row = self._one("job_history_ensure", {"schema": self.schema, "days_back": days_back,
                                               "days_ahead": days_ahead})
        return int(row["created"]) if row else 0

    def history_move_batch(self, batch: int = HISTORY_MOVE_BATCH_DEFAULT, *, after_id: int = 0) -> tuple[int, int]:
        """Move the next ``batch`` completed jobs still in ``jobs`` above ``after_id`` (id order)
        into ``job_history``, creating the day partitions they need first.

        Returns ``(moved, last_id)``; pass ``last_id`` as the next ``after_id`` (a keyset walk
        of ``jobs_finished_idx``, so a batch costs the same at the end as at the start).
        ``last_id`` equal to ``after_id``: nothing is left above it."""
        span = self._one("job_history_move_span", {"after_id": after_id, "batch": batch})
        if span is None:
            return 0, after_id
        day = span["first_day"]
        while day <= span["last_day"]:  # one day per statement: each ATTACH holds its locks briefly
            self._one("job_history_ensure_days", {"schema": self.schema, "first_day": day, "last_day": day})
            day += timedelta(days=1)
        row = self._one("job_history_move_batch", {"after_id": after_id, "last_id": span["last_id"]})
        return (int(row["moved"]) if row else 0), int(span["last_id"])

    def history_drop_oldest(self, older_than: float) -> int | None:
        """Drop the oldest day partition that ended more than ``older_than`` seconds ago, with
        its jobs' events and keys; the number of jobs it held, None when none is that old."""
        row = self._one("job_history_drop_oldest", {"schema": self.schema, "older_than": float(older_than)})
        return None if row is None or row["jobs"] is None else int(row["jobs"])

    def history_partitions(self) -> list[HistoryPartition]:
        return [HistoryPartition(str(r["name"]), str(r["bounds"]), int(r["estimated_rows"]))
                for r in self._rows("job_history_partition_list")]

    def prune_completed(self, older_than: float, batch: int = PRUNE_BATCH_DEFAULT) -> int:
        """Delete up to ``batch`` completed jobs older than ``older_than`` seconds that are not
        in a day partition of ``job_history``: those still in ``jobs`` (completed before 0009)
        and those in the default partition. Whole day partitions go with :meth:`history_drop_oldest`."""
        row = self._one("job_prune_completed", {"older_than": float(older_than), "batch": batch})
        deleted = int(row["deleted"]) if row else 0
        if deleted < batch:
            row = self._one("job_history_prune_default", {"older_than": float(older_than), "batch": batch - deleted})
            deleted += int(row["deleted"]) if row else 0
        return deleted

    def prune_cancelled(self, older_than: float, batch: int = PRUNE_BATCH_DEFAULT) -> int:
        """Delete up to ``batch`` jobs cancelled more than ``older_than`` seconds ago, with their
        events, keys and message receipts."""
        row = self._one("job_prune_cancelled", {"older_than": float(older_than), "batch": batch})
        return int(row["deleted"]) if row else 0
