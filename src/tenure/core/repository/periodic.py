"""Periodic schedules: the last slot enqueued per schedule, advanced and enqueued in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import PRIORITY_DEFAULT, Row, check_priority, encode_payload


class PeriodicQueries(RepositoryBase):
    """Schedules and their slots."""

    def periodic_get(self, names: Sequence[str]) -> dict[str, Row]:
        return {r["name"]: r for r in self._rows("periodic_schedule_get", {"names": list(names)})}

    def periodic_init(self, *, name: str, task: str, queue: str, cron: str, timezone: str,
                      slot: datetime) -> None:
        self._rows("periodic_schedule_init", {"name": name, "task": task, "queue": queue, "cron": cron,
                                              "timezone": timezone, "slot": slot})

    def periodic_enqueue_slot(self, *, name: str, task: str, queue: str, cron: str, timezone: str,
                              slot: datetime, payload: Any, idempotency_key: str, skipped: int = 0,
                              max_attempts: int = 5, priority: int = PRIORITY_DEFAULT) -> int | None:
        """Advance the schedule to ``slot`` and enqueue its job; the job id, or None when another
        scheduler already did (or the slot is not after the last one)."""
        row = self._one("periodic_enqueue_slot", {
            "name": name, "task": task, "queue": queue, "cron": cron, "timezone": timezone, "slot": slot,
            "payload": encode_payload(payload), "idempotency_key": idempotency_key, "skipped": skipped,
            "max_attempts": max_attempts, "priority": check_priority(priority), "channel": self.channel})
        return int(row["id"]) if row else None
