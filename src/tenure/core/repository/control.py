"""Job and queue control (issue 14): cancel and retry by id, pause, resume and the running limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from tenure.core.errors import UniqueKeyHeldError
from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row

UNIQUE_RACE_TRIES = 3
"""Runs of a statement that a concurrent writer beat to a unique key (the next run sees it)."""


def held_reason(held_by: int, held_status: str) -> str:
    return f"unique key held by job {held_by} ({held_status})"


def split_held(rows: Sequence[Row]) -> tuple[list[int], dict[int, str]]:
    """Rows of ``id, held_by, held_status``: the ids that moved, and those held with why."""
    moved = [int(r["id"]) for r in rows if r["held_by"] is None]
    held = {int(r["id"]): held_reason(int(r["held_by"]), str(r["held_status"])) for r in rows
            if r["held_by"] is not None}
    return moved, held


def past_unique_races(conn: psycopg.Connection[Any], run: Callable[[], list[Row]]) -> list[Row]:
    """Run a statement that leaves out the jobs whose unique key is held, in a savepoint: a
    holder committed by a concurrent transaction after the statement's snapshot (an enqueue, or
    another retry) makes the index refuse the move; the next run sees that holder and leaves the
    job out. :class:`UniqueKeyHeldError` if it keeps happening."""
    for attempt in range(UNIQUE_RACE_TRIES):
        try:
            with conn.transaction():
                return run()
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "jobs_unique_key_idx":
                raise
            if attempt == UNIQUE_RACE_TRIES - 1:
                raise UniqueKeyHeldError("a concurrent enqueue or retry kept taking these jobs' unique keys: "
                                         "nothing was changed; try again") from exc
    raise AssertionError("unreachable")


class ControlQueries(RepositoryBase):
    """Every change is audited with who asked."""

    def cancel(self, ids: Sequence[int], requested_by: str) -> list[Row]:
        """Cancel the pending and running jobs among ``ids`` (others are left alone); returns one
        row per cancelled job with ``previous_status`` and the ``revoked_token`` of a running one."""
        return self._rows("job_cancel", {"ids": list(ids), "requested_by": requested_by})

    def retry_jobs(self, ids: Sequence[int], requested_by: str) -> list[int]:
        """Put failed or cancelled jobs back as pending with a fresh attempt budget; those whose
        unique key is held are left alone (see :meth:`retry_jobs_held`)."""
        return self.retry_jobs_held(ids, requested_by)[0]

    def retry_jobs_held(self, ids: Sequence[int], requested_by: str) -> tuple[list[int], dict[int, str]]:
        """:meth:`retry_jobs`, and the jobs left alone because another live job holds their unique
        key (or a lower id of ``ids`` takes it), with why: ``"unique key held by job 9 (pending)"``."""
        rows = past_unique_races(self.conn, lambda: self._rows("job_retry_many", {
            "ids": list(ids), "requested_by": requested_by, "channel": self.channel}))
        return split_held(rows)

    def queue_control_set(self, name: str, *, requested_by: str, paused: bool | None = None,
                          max_running: int | None = None, set_limit: bool = False) -> Row:
        """Pause/resume (``paused``) and/or set the global running limit (``set_limit``; None
        removes it). Returns the row after, with ``was_paused`` and ``old_max_running``."""
        row = self._one("queue_control_set", {"name": name, "paused": paused, "max_running": max_running,
                                              "set_limit": set_limit, "requested_by": requested_by,
                                              "channel": self.channel})
        assert row is not None
        return row

    def queue_control_list(self) -> list[Row]:
        return self._rows("queue_control_list")

    def queue_controls(self, queues: Sequence[str] | None = None) -> dict[str, Row]:
        return {r["name"]: r for r in self._rows("queue_control_get",
                                                 {"queues": list(queues) if queues is not None else None})}
