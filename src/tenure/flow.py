"""Flow control (issue 38) as a Python API shared by the CLI (`tenure flow …`), the operator and
users' code: a queue's running limit per flow key, one key's own limit, and what they hold back.

The claim statement enforces the limits under the queue's claim gate, counting live running rows
(docs/flow.md), so a limit holds across every worker and pod, a frozen worker's job keeps its
key's slot until the reaper takes it, and a refused late completion frees nothing twice. Every
change is recorded in ``flow_changes`` with who asked. Bad input raises
:class:`~tenure.core.errors.ConfigError` (the CLI's exit 2) and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.control import check_queue_name, default_requester
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import FlowStore, Repository
from tenure.core.repository.specs import check_flow_key

RUNNING_LIMIT_MAX = 1_000_000
"""The largest running limit accepted (a larger one is a typo, not a limit)."""
KEYS_SHOWN_DEFAULT = 50
"""How many keys per queue :func:`flow_status` reports (the busiest first)."""


def check_running_limit(value: Any, what: str = "running limit") -> int:
    """A whole number from 0 (no limit) to :data:`RUNNING_LIMIT_MAX`; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= RUNNING_LIMIT_MAX:
        raise ConfigError(f"{what} must be a whole number from 0 (no limit) to {RUNNING_LIMIT_MAX}, got {value!r}")
    return value


def check_key(key: Any) -> str:
    """A flow key as jobs carry it (1 to 200 bytes, no NUL); ConfigError otherwise."""
    try:
        return check_flow_key(key)
    except JobSpecError as exc:
        raise ConfigError(str(exc)) from None


def _repo(conn: psycopg.Connection[Any], schema: str) -> FlowStore:
    return Repository(conn, schema)


def set_per_key_running(conn: psycopg.Connection[Any], queue: str, running: int, *, schema: str = "tenure",
                        requested_by: str | None = None) -> dict[str, Any]:
    """Cap the running jobs of every flow key of ``queue`` across all workers and pods; 0 removes
    the cap. Keys above a lowered cap keep their running jobs; no new claims until below it."""
    check_queue_name(queue)
    check_running_limit(running, "per-key running limit")
    return dict(_repo(conn, schema).flow_per_key_set(queue, running or None,
                                                     requested_by=requested_by or default_requester()))


def set_key_running(conn: psycopg.Connection[Any], queue: str, key: str, running: int, *,
                    schema: str = "tenure", requested_by: str | None = None) -> dict[str, Any]:
    """Cap one key's running jobs in ``queue`` (it overrides the queue's per-key cap); 0 removes
    the key's own cap, so the queue's per-key cap applies to it again."""
    check_queue_name(queue)
    check_key(key)
    check_running_limit(running)
    return dict(_repo(conn, schema).flow_key_running_set(queue, key, running or None,
                                                         requested_by=requested_by or default_requester()))


@dataclass(frozen=True)
class QueueFlow:
    """One queue's flow limits and its keys (the busiest :data:`KEYS_SHOWN_DEFAULT`)."""

    queue: str
    per_key_running: int | None
    paused: bool
    keys_total: int
    """Keys with a limit of their own, running jobs or ready jobs (all of them, not only those shown)."""
    blocked: int
    """Ready jobs held back by their key's limit, over every key (not only those shown)."""
    keys: list[dict[str, Any]]
    """flow_key, running, running_limit, own_limit, ready, blocked, oldest_wait_seconds."""

    def as_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "per_key_running": self.per_key_running, "paused": self.paused,
                "keys_total": self.keys_total, "blocked": self.blocked, "keys": self.keys}


def flow_status(conn: psycopg.Connection[Any], *, schema: str = "tenure",
                keys: int = KEYS_SHOWN_DEFAULT) -> list[QueueFlow]:
    """Every queue with a flow limit, with its busiest keys: running, limit, blocked, oldest wait."""
    if isinstance(keys, bool) or not isinstance(keys, int) or keys < 1:
        raise ConfigError(f"the number of keys shown must be >= 1, got {keys!r}")
    repo = _repo(conn, schema)
    out = []
    for q in repo.flow_queue_list():
        rows = [dict(r) for r in repo.flow_key_status(q["queue"], keys)]
        total, blocked = (int(rows[0]["keys_total"]), int(rows[0]["blocked_total"])) if rows else (0, 0)
        for r in rows:
            del r["keys_total"], r["blocked_total"]
        out.append(QueueFlow(q["queue"], q["per_key_running"], bool(q["paused"]), total, blocked, rows))
    return out


def flow_changes(conn: psycopg.Connection[Any], *, schema: str = "tenure", queue: str | None = None,
                 limit: int = 50) -> list[dict[str, Any]]:
    """The latest flow-control changes (who, when, what, from, to), newest first."""
    return [dict(r) for r in _repo(conn, schema).flow_change_list(queue, limit)]
