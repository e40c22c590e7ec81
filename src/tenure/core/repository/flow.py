"""Flow control (issue 38): per-key running limits and their status; the claim enforces them
(:meth:`~tenure.core.repository.lease.LeaseQueries.claim`). Every change is recorded in
``flow_changes`` with who asked."""

from __future__ import annotations

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class FlowQueries(RepositoryBase):
    """Limits by flow key, and what they hold back."""

    def flow_per_key_set(self, queue: str, running: int | None, *, requested_by: str) -> Row:
        """Cap the running jobs of every flow key of ``queue`` (None removes the cap); returns
        ``per_key_running`` after and ``old_per_key_running``."""
        row = self._one("flow_per_key_set", {"queue": queue, "running": running, "requested_by": requested_by,
                                             "channel": self.channel})
        assert row is not None
        return row

    def flow_key_running_set(self, queue: str, key: str, running: int | None, *, requested_by: str) -> Row:
        """Cap one key's running jobs in ``queue`` (None: the key's own cap is removed, the queue's
        per-key cap applies again); returns ``running`` after (None when removed) and ``old_running``."""
        if running is None:
            row = self._one("flow_key_running_clear", {"queue": queue, "key": key, "requested_by": requested_by,
                                                       "channel": self.channel})
            assert row is not None
            return {"running": None, "old_running": row["old_running"]}
        row = self._one("flow_key_running_set", {"queue": queue, "key": key, "running": running,
                                                 "requested_by": requested_by, "channel": self.channel})
        assert row is not None
        return row

    def flow_key_limits(self, queue: str) -> dict[str, int]:
        """Every key of ``queue`` with a running limit of its own, and that limit."""
        return {str(r["flow_key"]): int(r["running"]) for r in self._rows("flow_key_limit_list", {"queue": queue})}

    def flow_queue_list(self) -> list[Row]:
        """The queues with a flow limit: ``per_key_running``, ``paused``, ``key_limits``."""
        return self._rows("flow_queue_list")

    def flow_key_status(self, queue: str, limit: int) -> list[Row]:
        """The busiest ``limit`` keys of ``queue``: running, running_limit, own_limit, ready,
        blocked, oldest_wait_seconds, and keys_total (every key, on each row)."""
        return self._rows("flow_key_status", {"queue": queue, "limit": limit})

    def flow_change_list(self, queue: str | None, limit: int) -> list[Row]:
        """The latest flow-control changes, newest first."""
        return self._rows("flow_change_list", {"queue": queue, "limit": limit})

