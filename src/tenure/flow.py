"""Flow control (issue 38) as a Python API shared by the CLI (`tenure flow …`), the operator, the
UI and users' code: a queue's running limit per flow key, one key's own limit and weight, named
rate limits (token buckets), and what they hold back.

The claim statement enforces the limits under the queue's claim gate, counting live running rows
(docs/flow.md), so a limit holds across every worker and pod, a frozen worker's job keeps its
key's slot until the reaper takes it, and a refused late completion frees nothing twice. Every
change is recorded in ``flow_changes`` with who asked. Bad input raises
:class:`~tenure.core.errors.ConfigError` (the CLI's exit 2) and changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.control import check_queue_name, default_requester
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import FlowStore, Repository, specs
from tenure.core.repository.specs import check_flow_key

RUNNING_LIMIT_MAX = 1_000_000
"""The largest running limit accepted (a larger one is a typo, not a limit)."""
KEYS_SHOWN_DEFAULT = 50
"""How many keys per queue :func:`flow_status` reports (the busiest first)."""
PER_SECOND_MAX = 1_000_000.0
"""The fastest rate limit: tokens per second (the schema's CHECK says the same)."""
BURST_MAX = 1_000_000
"""The largest burst (bucket size) of a rate limit."""
WEIGHT_MAX = 1000.0
"""The largest weight of a flow key (the default, and the smallest meaningful share, is 1)."""


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


def check_rate_limit_name(name: Any) -> str:
    """A rate limit's name: 1 to 100 of letters, digits, ``_``, ``.``, ``-``, starting with a letter
    or digit; ConfigError otherwise."""
    try:
        return specs.check_rate_limit_name(name)
    except JobSpecError as exc:
        raise ConfigError(str(exc)) from None


def check_per_second(value: Any) -> float:
    """Tokens per second: a finite number above 0, at most :data:`PER_SECOND_MAX`; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= PER_SECOND_MAX:
        raise ConfigError(f"a rate must be a number of tokens per second above 0 and at most {PER_SECOND_MAX:.0f}, "
                          f"got {value!r}"[:300])
    return float(value)


def check_burst(value: Any) -> int:
    """A bucket size: a whole number from 1 to :data:`BURST_MAX`; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BURST_MAX:
        raise ConfigError(f"a burst must be a whole number from 1 to {BURST_MAX}, got {value!r}"[:300])
    return value


def check_weight(value: Any) -> float:
    """A flow key's weight: a finite number above 0, at most :data:`WEIGHT_MAX`; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= WEIGHT_MAX:
        raise ConfigError(f"a weight must be a number above 0 and at most {WEIGHT_MAX:.0f} (1 is the default), "
                          f"got {value!r}"[:300])
    return float(value)


def parse_rate_limit_ref(ref: Any) -> tuple[str, int]:
    """``"NAME"`` (1 unit) or ``"NAME:UNITS"`` (1 to 1,000,000) as (name, units); ConfigError otherwise."""
    try:
        return specs.parse_rate_limit_ref(ref)
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


def set_key_weight(conn: psycopg.Connection[Any], queue: str, key: str, weight: float, *,
                   schema: str = "tenure", requested_by: str | None = None) -> dict[str, Any]:
    """Give one key of ``queue`` a fairness weight: where keys take turns, each turn of this key
    takes ``weight`` jobs (a fraction carries over to its next turn). 1, the default, removes it.
    Returns ``weight`` and ``old_weight``."""
    check_queue_name(queue)
    check_key(key)
    value = check_weight(weight)
    return dict(_repo(conn, schema).flow_key_weight_set(queue, key, value,
                                                        requested_by=requested_by or default_requester()))


def default_burst(per_second: float) -> int:
    """The burst of a rate limit given none: one second's tokens, at least 1."""
    return max(1, math.ceil(per_second))


def set_rate_limit(conn: psycopg.Connection[Any], name: str, per_second: float, *, burst: int | None = None,
                   per_key: bool = False, schema: str = "tenure", requested_by: str | None = None) -> dict[str, Any]:
    """Create the rate limit ``name``, or change it (every setting: a burst left out is
    :func:`default_burst`): a bucket of ``burst`` tokens refilled at ``per_second``, one per flow
    key with ``per_key`` (jobs without a key share one). Changing ``per_key`` drops the limit's
    buckets, so each starts full. Returns the limit (name, per_second, burst, per_key) with its
    settings before (``old_per_second``, ``old_burst``, ``old_per_key``; None when it is new)."""
    check_rate_limit_name(name)
    rate = check_per_second(per_second)
    size = check_burst(burst) if burst is not None else default_burst(rate)
    if not isinstance(per_key, bool):
        raise ConfigError(f"per_key must be True or False, got {per_key!r}")
    return dict(_repo(conn, schema).flow_rate_set(name, rate, size, per_key,
                                                  requested_by=requested_by or default_requester()))


def delete_rate_limit(conn: psycopg.Connection[Any], name: str, *, schema: str = "tenure",
                      requested_by: str | None = None) -> bool:
    """Delete the rate limit ``name`` and its buckets; False when there was none. Jobs that
    still name it are no longer held back by it; enqueueing a new one naming it is refused."""
    check_rate_limit_name(name)
    return _repo(conn, schema).flow_rate_delete(name, requested_by=requested_by or default_requester()) is not None


def rate_status(conn: psycopg.Connection[Any], *, schema: str = "tenure") -> list[dict[str, Any]]:
    """Every rate limit, by name, with its buckets now (database clock): name, per_second, burst,
    per_key, updated_by, updated_at, ``buckets`` (how many exist: 0 or 1 for a shared limit, one
    per flow key that has been claimed for a per-key limit), ``tokens`` (of the shared bucket; of a
    per-key limit, the fewest any one bucket holds; a bucket not made yet counts as full, and a
    paused one as empty), ``paused_buckets`` and ``paused_until`` (the latest end of a pause, or None)."""
    return [dict(r) for r in _repo(conn, schema).flow_rate_list()]


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
    """flow_key, running, running_limit, own_limit, weight, ready, blocked, oldest_wait_seconds."""

    def as_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "per_key_running": self.per_key_running, "paused": self.paused,
                "keys_total": self.keys_total, "blocked": self.blocked, "keys": self.keys}


def flow_status(conn: psycopg.Connection[Any], *, schema: str = "tenure",
                keys: int = KEYS_SHOWN_DEFAULT) -> list[QueueFlow]:
    """Every queue with a flow setting (a running limit or a key's weight), with its busiest keys:
    running, limit, weight, blocked, oldest wait."""
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
    """The latest flow-control changes (who, when, what, from, to), newest first; a rate limit's
    have ``queue_name`` None and ``rate_limit`` its name (they show only without ``queue``)."""
    return [dict(r) for r in _repo(conn, schema).flow_change_list(queue, limit)]
