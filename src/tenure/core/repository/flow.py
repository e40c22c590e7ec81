"""Flow control (issue 38): per-key running limits, flow keys' weights, named rate limits and
their status; the claim enforces them (:meth:`~tenure.core.repository.claim.ClaimQueries.claim`).
Every change is recorded in ``flow_changes`` with who asked."""

from __future__ import annotations

from collections.abc import Sequence

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class FlowQueries(RepositoryBase):
    """Limits and weights by flow key, rate limits, and what they hold back."""

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

    def flow_key_weight_set(self, queue: str, key: str, weight: float, *, requested_by: str) -> Row:
        """Set one key's fairness weight in ``queue`` (1 removes it, keeping the key's running
        limit); returns ``weight`` after and ``old_weight`` (1 when it had none)."""
        params = {"queue": queue, "key": key, "weight": float(weight), "requested_by": requested_by,
                  "channel": self.channel}
        if weight == 1:
            row = self._one("flow_key_weight_clear", params)
            assert row is not None
            return {"weight": 1.0, "old_weight": float(row["old_weight"])}
        row = self._one("flow_key_weight_set", params)
        assert row is not None
        return {"weight": float(row["weight"]), "old_weight": float(row["old_weight"])}

    def flow_rate_set(self, name: str, per_second: float, burst: int, per_key: bool, *, requested_by: str) -> Row:
        """Create or change the rate limit ``name``; returns it after (name, per_second, burst,
        per_key) and before (``old_per_second``, ``old_burst``, ``old_per_key``: None when new)."""
        row = self._one("flow_rate_set", {"name": name, "per_second": float(per_second), "burst": burst,
                                          "per_key": per_key, "requested_by": requested_by, "channel": self.channel})
        assert row is not None
        return row

    def flow_rate_delete(self, name: str, *, requested_by: str) -> Row | None:
        """Delete the rate limit ``name`` and its buckets; returns it, None when there was none."""
        return self._one("flow_rate_delete", {"name": name, "requested_by": requested_by, "channel": self.channel})

    def flow_rate_list(self) -> list[Row]:
        """Every rate limit with its buckets now: buckets, tokens (the shared bucket's, or the
        fewest of a per-key limit's), paused_buckets, paused_until."""
        return self._rows("flow_rate_list")

    def flow_key_limits(self, queue: str) -> dict[str, int]:
        """Every key of ``queue`` with a running limit of its own, and that limit."""
        return {str(r["flow_key"]): int(r["running"]) for r in self._rows("flow_key_limit_list", {"queue": queue})}

    def flow_key_settings(self, queue: str) -> list[Row]:
        """Every flow_keys row of ``queue``: flow_key, running (None: no own limit), weight."""
        return self._rows("flow_key_setting_list", {"queue": queue})

    def flow_rate_settings(self, names: Sequence[str], owner: str) -> list[Row]:
        """The rate limits named in ``names`` or last set by ``owner``: name, per_second, burst,
        per_key, updated_by (rate_limits only: no bucket is read)."""
        return self._rows("flow_rate_setting_list", {"names": list(names), "owner": owner})

    def flow_queue_list(self) -> list[Row]:
        """The queues with a flow setting: ``per_key_running``, ``paused``, ``key_limits``, ``key_weights``."""
        return self._rows("flow_queue_list")

    def flow_key_status(self, queue: str, limit: int) -> list[Row]:
        """The busiest ``limit`` keys of ``queue``: running, running_limit, own_limit, weight, ready,
        blocked, oldest_wait_seconds, and keys_total (every key, on each row)."""
        return self._rows("flow_key_status", {"queue": queue, "limit": limit})

    def flow_change_list(self, queue: str | None, limit: int) -> list[Row]:
        """The latest flow-control changes, newest first."""
        return self._rows("flow_change_list", {"queue": queue, "limit": limit})

