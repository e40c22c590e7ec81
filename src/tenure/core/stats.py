"""Queue-level figures, computed by one SQL query (``queue_stats``) and shared by
`tenure stats`, the Prometheus exporter and the operator's scaler, so all three agree."""

from __future__ import annotations

from dataclasses import dataclass


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


def fetch_queue_stats(dsn: str, schema: str = "tenure", queue: str | None = None, *,
                      completed: bool = False) -> list[QueueStats]:
    """Open a short connection and read the stats (raises psycopg.OperationalError when down).

    The completed count (a scan of its index) is skipped unless asked for: scaling needs none.
    """
    from tenure.core.db import connect
    from tenure.core.repository import Repository

    with connect(dsn, application_name="tenure-stats") as conn:
        return Repository(conn, schema).queue_stats(queue, completed=completed)
