"""The job browser's reads (`tenure ui`, issue 24): one filter shared by a page, a bounded
count, the ids of a bulk action, the planner's estimate and the listing of `tenure jobs list`;
queue figures of the last hour; periodic schedules; the change feed.

Every query here is run unprepared (``prepare=False``): the filter's ``param IS NULL OR ...``
conditions then fold away at plan time, so each filter gets the plan of its own indexes
instead of one generic plan for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import psycopg

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row

COUNT_CAP_DEFAULT = 10_000
"""Above this many matches a count is the planner's estimate, labelled as one."""
COUNT_BUDGET_MS_DEFAULT = 250
"""An exact count that takes longer than this is abandoned for the estimate."""


@dataclass(frozen=True)
class JobFilter:
    """What the job browser matches; None turns a condition off. ``*_after`` are timestamps,
    ``*_within`` seconds back from the database clock; finished means completed, failed
    (dead-lettered) or cancelled, whichever happened. ``payload`` is JSON containment;
    ``flow_key`` an exact match (docs/flow.md)."""

    id: int | None = None
    queue: str | None = None
    status: str | None = None
    task: str | None = None
    priority_min: int | None = None
    priority_max: int | None = None
    created_after: datetime | None = None
    created_within: float | None = None
    finished_after: datetime | None = None
    finished_within: float | None = None
    idempotency_key: str | None = None
    payload: str | None = None
    """A JSON object as text (validated by the caller)."""
    flow_key: str | None = None

    def params(self) -> dict[str, Any]:
        return asdict(self)

    def is_empty(self) -> bool:
        return all(v is None for v in asdict(self).values())


@dataclass(frozen=True)
class JobCount:
    count: int
    estimated: bool
    """True when ``count`` is the planner's estimate (too many matches, or too slow to count)."""


class BrowseQueries(RepositoryBase):
    """The job browser's reads; none of them writes."""

    def job_browse(self, flt: JobFilter, *, before_id: int | None = None, limit: int = 50) -> list[Row]:
        """Matching jobs newest first, below ``before_id`` (the keyset cursor)."""
        return self._unprepared("job_browse", {**flt.params(), "before_id": before_id, "limit": limit})

    def job_list(self, *, queue: str | None = None, status: str | None = None, task: str | None = None,
                 created_since: float | None = None, failed_since: float | None = None,
                 before_id: int | None = None, limit: int = 100, flow_key: str | None = None) -> list[Row]:
        """`tenure jobs list`: jobs newest first below ``before_id``, through the browser's filter
        (``created_since`` is its ``created_within``, seconds back); ``failed_since``: the job's
        last failed attempt (``last_failed_at``) within that many seconds."""
        flt = JobFilter(queue=queue, status=status, task=task, created_within=created_since, flow_key=flow_key)
        return self._unprepared("job_list", {**flt.params(), "failed_since": failed_since,
                                             "before_id": before_id, "limit": limit})

    def job_browse_ids(self, flt: JobFilter, statuses: Sequence[str], *, after_id: int = 0,
                       limit: int = 1000) -> list[int]:
        """Ids of matching jobs in ``statuses``, oldest first, above ``after_id``."""
        rows = self._unprepared("job_browse_ids", {**flt.params(), "statuses": list(statuses),
                                                   "after_id": after_id, "limit": limit})
        return [int(r["id"]) for r in rows]

    def job_count(self, flt: JobFilter, *, cap: int = COUNT_CAP_DEFAULT,
                  budget_ms: int = COUNT_BUDGET_MS_DEFAULT) -> JobCount:
        """How many jobs match: exact up to ``cap`` when counting takes under ``budget_ms``,
        else the planner's estimate (never a scan of the whole table)."""
        params = {**flt.params(), "cap": cap + 1}
        floor = 0
        try:
            with self.conn.transaction():
                self._rows("db_statement_timeout_set", {"value": f"{int(budget_ms)}ms"})
                rows = self._unprepared("job_browse_count", params)
            n = int(rows[0]["n"])
            if n <= cap:
                return JobCount(n, False)
            floor = n  # more than cap: the estimate is at least that
        except psycopg.errors.QueryCanceled:
            pass
        plan = self._unprepared("job_browse_estimate", flt.params())
        estimate = int(plan[0]["QUERY PLAN"][0]["Plan"]["Plan Rows"]) if plan else 0
        return JobCount(max(estimate, floor), True)

    def queue_throughput_hour(self) -> dict[str, Row]:
        """``{queue: {completed, dead_lettered, failed_attempts, oldest_ready_age_seconds}}`` of the last hour."""
        return {r["queue"]: r for r in self._rows("queue_throughput_hour")}

    def periodic_list(self) -> list[Row]:
        return self._rows("periodic_schedule_list")

    def job_events_since(self, after_id: int, limit: int = 500) -> list[Row]:
        return self._rows("job_events_since", {"after_id": after_id, "limit": limit})

    def job_events_last_id(self) -> int:
        row = self._one("job_events_last_id")
        return int(row["id"]) if row else 0

    def job_newest_id(self) -> int:
        row = self._one("job_newest_id")
        return int(row["id"]) if row else 0
