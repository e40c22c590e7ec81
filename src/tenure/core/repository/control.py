"""Job and queue control (issue 14): cancel and retry by id, pause, resume and the running limit."""

from __future__ import annotations

from collections.abc import Sequence

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class ControlQueries(RepositoryBase):
    """Every change is audited with who asked."""

    def cancel(self, ids: Sequence[int], requested_by: str) -> list[Row]:
        """Cancel the pending and running jobs among ``ids`` (others are left alone); returns one
        row per cancelled job with ``previous_status`` and the ``revoked_token`` of a running one."""
        return self._rows("job_cancel", {"ids": list(ids), "requested_by": requested_by})

    def retry_jobs(self, ids: Sequence[int], requested_by: str) -> list[int]:
        """Put failed or cancelled jobs back as pending with a fresh attempt budget."""
        return [int(r["id"]) for r in self._rows("job_retry_many", {
            "ids": list(ids), "requested_by": requested_by, "channel": self.channel})]

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
