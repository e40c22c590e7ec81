"""Read-only views of jobs and queues: a job and its events, queue figures, the doctor's views
(listings of jobs: :mod:`tenure.core.repository.browse`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row

FLOW_WALK_MAX = 10_000
"""Runnable jobs ``queue_stats`` reads at most, oldest first, to find a flow queue's oldest job
that nothing holds back (when every one of them is held back, it reports none)."""

_ZERO_STATS = ("ready", "scheduled", "running", "running_expired", "failed", "oldest_ready_age_seconds",
               "oldest_running_age_seconds", "heartbeat_lag_max_seconds", "heartbeat_lag_p95_seconds",
               "live_workers", "redelivered", "reaped_total", "in_flight", "cancelled", "waiting")


@dataclass(frozen=True)
class QueueStats:
    """One queue's backlog and lease health, as seen by the database clock."""

    queue: str
    ready: int
    scheduled: int
    running: int
    running_expired: int
    completed: int
    failed: int
    oldest_ready_age_seconds: float
    oldest_running_age_seconds: float
    heartbeat_lag_max_seconds: float
    heartbeat_lag_p95_seconds: float
    live_workers: int
    redelivered: int
    reaped_total: int
    in_flight: int = 0
    """Running jobs whose owner the worker registry sees alive (the sum of the workers'
    ``tenure_jobs_in_flight``, give or take an acknowledgement); ``running - in_flight`` are
    held by dead or silent workers and wait for the reaper."""
    paused: bool = False
    """Workers do not claim from a paused queue (`tenure queues pause`)."""
    max_running: int | None = None
    """Global cap on running jobs across all workers (`tenure queues limit`), None: none."""
    cancelled: int = 0
    waiting: int = 0
    """Workflow steps whose deps have not all completed (docs/workflows.md): not runnable yet, so
    not in ``ready``; the write that completes their last dep makes them pending."""
    blocked: int = 0
    """Runnable jobs flow control holds back, whatever the reason (the sum of the three
    ``blocked_*``); they are not in ``ready`` (docs/flow.md), so a scaler reading ``ready``
    adds no worker for them."""
    keys_at_limit: int = 0
    """Flow keys of the queue with their running limit reached."""
    blocked_concurrency: int = 0
    """Of ``blocked``: jobs beyond their key's room under its running limit."""
    blocked_backpressure: int = 0
    """Of ``blocked``: jobs whose rate limit's bucket a handler paused (``ctx.rate_limited``)."""
    blocked_rate: int = 0
    """Of ``blocked``: jobs whose rate limit's bucket holds fewer tokens now than their units."""
    oldest_unblocked_wait_seconds: float | None = None
    """On a flow queue (a per-key running limit, keyed pending jobs or rate-limited ready jobs):
    the wait since ``available_at`` of the oldest runnable job that nothing holds back (its key
    under its running limit, and no job of its key, itself or older, short of tokens or paused:
    the claim takes a key's jobs first in, first out), 0 when there is none among the
    :data:`FLOW_WALK_MAX` oldest or the queue is paused; None on any other queue, or when not
    asked for. The TenureFlowStarvation alert watches it."""
    oldest_unblocked_job_id: int | None = None
    """The id of that job (None when there is none): the alert's proof that the same job waits."""


def _with_blocked(row: Row, held: Row, oldest: bool) -> Row:
    """A ``queue_stats`` row with the blocked counts of ``queue_flow_blocked`` taken out of
    ``ready`` (two statements, two snapshots: no reason may count more than is still ready)."""
    left = int(row["ready"])
    split: dict[str, int] = {}
    for reason in ("concurrency", "backpressure", "rate"):
        split[reason] = min(int(held[f"blocked_{reason}"]), left)
        left -= split[reason]
    flow = oldest and bool(held["flow"])
    job = held["oldest_unblocked_job_id"]
    return {**row, "ready": left, "blocked": int(row["ready"]) - left, "keys_at_limit": int(held["keys_at_limit"]),
            **{f"blocked_{reason}": n for reason, n in split.items()},
            "oldest_unblocked_wait_seconds": float(held["oldest_unblocked_wait_seconds"]) if flow else None,
            "oldest_unblocked_job_id": int(job) if job is not None else None}


class ReadQueries(RepositoryBase):
    """Reads; none of them writes."""

    def get_job(self, job_id: int) -> Row | None:
        return self._one("job_get", {"id": job_id})

    def job_events(self, job_id: int) -> list[Row]:
        return self._rows("job_events_list", {"id": job_id})

    def queue_work(self, queues: Sequence[str]) -> tuple[bool, bool]:
        """``(pending, running)``: whether any of ``queues`` has a pending (ready or scheduled)
        job, and whether any has a running one (any worker's)."""
        row = self._one("queue_work_exists", {"queues": list(queues)})
        return (bool(row["pending"]), bool(row["running"])) if row else (False, False)

    def queue_stats(self, queue: str | None = None, *,
                    completed: dict[str, int] | None | bool = True, oldest: bool = True) -> list[QueueStats]:
        """Per-queue figures. ``completed``: True counts completed jobs now (a scan of their
        index, ~60 ms at a million rows), False reports 0, or pass counts read earlier with
        :meth:`completed_counts` (the exporter refreshes them on a slower cadence). ``oldest``:
        find each flow queue's oldest job that nothing holds back (a walk of up to
        :data:`FLOW_WALK_MAX` jobs each; False leaves ``oldest_unblocked_*`` None)."""
        rows = {r["queue"]: r for r in self._rows("queue_stats", {"queue": queue})}
        counts: dict[str, int] = {}
        if completed is True:
            counts = self.completed_counts(queue)
        elif isinstance(completed, dict):
            counts = {q: n for q, n in completed.items() if queue is None or q == queue}
        for name in counts.keys() - rows.keys():
            rows[name] = {"queue": name, **{f: 0 for f in _ZERO_STATS}, "paused": False, "max_running": None}
        active = sorted(name for name, r in rows.items() if int(r["ready"]) or int(r["running"]))
        params = {"queues": active, "oldest": oldest, "walk": FLOW_WALK_MAX}
        for r in self._rows("queue_flow_blocked", params) if active else ():
            rows[r["queue"]] = _with_blocked(rows[r["queue"]], r, oldest)
        return [QueueStats(**{**rows[name], "completed": counts.get(name, 0)}) for name in sorted(rows)]

    def completed_counts(self, queue: str | None = None) -> dict[str, int]:
        return {r["queue"]: int(r["completed"]) for r in self._rows("queue_completed_counts", {"queue": queue})}

    def runtime_quantiles(self, window_seconds: float) -> list[Row]:
        return self._rows("job_runtime_quantiles", {"window": float(window_seconds)})

    def listen(self) -> None:
        """LISTEN on the wake-up channel; notifications then arrive on ``self.conn.notifies()``."""
        self._rows("queue_listen")

    def db_now(self) -> Row:
        row = self._one("db_now")
        assert row is not None
        return row

    def running_jobs(self, queue: str | None = None, limit: int = 1000) -> list[Row]:
        """Running jobs, oldest first, with lease state and owner liveness (DB clock)."""
        return self._rows("job_running_list", {"queue": queue, "limit": limit})

    def reap_review(self, window_seconds: float, queue: str | None = None) -> list[Row]:
        """Reaps within the window per queue and task, with later writes from the reaped token."""
        return self._rows("job_reap_review", {"window": float(window_seconds), "queue": queue})

    def job_statuses(self, ids: Sequence[int]) -> dict[int, Row]:
        """``{id: {status, queue_name, task, payload, payload_version}}`` for the ids that exist."""
        return {int(r["id"]): r for r in self._rows("job_status_many", {"ids": list(ids)})}
