"""Queue-level figures, computed by one SQL query (``queue_stats``) and shared by
`tenure stats`, the Prometheus exporter and the operator's scaler, so all three agree.

:class:`QueueStats` is defined beside the query that fills it (``tenure.core.repository.reads``)
and re-exported here; this module only adds a short-lived connection around it."""

from __future__ import annotations

from tenure.core.db import connect
from tenure.core.repository import Repository
from tenure.core.repository.reads import QueueStats

__all__ = ["QueueStats", "fetch_queue_stats"]


def fetch_queue_stats(dsn: str, schema: str = "tenure", queue: str | None = None, *,
                      completed: bool = False, oldest: bool = False) -> list[QueueStats]:
    """Open a short connection and read the stats (raises psycopg.OperationalError when down).

    The completed count (a scan of its index) and the oldest job nothing holds back (a walk of
    a flow queue's oldest jobs) are skipped unless asked for: scaling needs neither. ``ready``
    never counts a blocked job, so a scaler reading it adds no worker for jobs flow control
    holds back.
    """
    with connect(dsn, application_name="tenure-stats") as conn:
        return Repository(conn, schema).queue_stats(queue, completed=completed, oldest=oldest)
