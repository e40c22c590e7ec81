"""The Flow page's JSON API under ``{prefix}/api/v1/flow`` (issue 38; docs/ui.md, docs/flow.md).

``GET flow`` reads through :mod:`tenure.flow`, as ``tenure flow list`` does: per queue with flow
settings its per-key running limit and busiest keys, every rate limit with its tokens now, and
the latest changes. The ``POST`` handlers change one setting each through the same functions as
the CLI, audited in ``flow_changes`` as ``ui:USER``; the app refuses them (403) to a viewer
before they run. Every value is checked before anything changes, so bad input (400, one JSON
message) and an unknown rate limit (404) change nothing.
"""

from __future__ import annotations

from typing import Any

from tenure import flow as tenure_flow
from tenure.control import check_queue_name
from tenure.ui.api import ApiError, Call, Handler

KEYS_SHOWN_MAX = 500
"""The most keys per queue ``GET flow?keys=N`` reports."""
CHANGES_SHOWN = 20
"""How many of the latest flow-control changes ``GET flow`` reports."""


def _only(body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0]!r} (known: {', '.join(known) or 'none'})")


def _whole(body: dict[str, Any], name: str, hint: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be a whole number ({hint}), got {value!r}")
    return value


def _number(body: dict[str, Any], name: str, hint: str) -> float:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{name} must be a number ({hint}), got {value!r}")
    return float(value)


def flow(call: Call) -> dict[str, Any]:
    """``?keys=N`` (default :data:`tenure.flow.KEYS_SHOWN_DEFAULT`): ``{queues, rate_limits,
    changes, keys_shown}``."""
    unknown = sorted(set(call.query) - {"keys"})
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: keys)")
    text = call.query.get("keys") or str(tenure_flow.KEYS_SHOWN_DEFAULT)
    if not text.isdigit() or not 1 <= int(text) <= KEYS_SHOWN_MAX:
        raise ApiError(400, f"keys must be a whole number from 1 to {KEYS_SHOWN_MAX}, got {text!r}")
    with call.service.connection() as conn:
        queues = [q.as_json() for q in tenure_flow.flow_status(conn, schema=call.schema, keys=int(text))]
        rates = tenure_flow.rate_status(conn, schema=call.schema)
        changes = tenure_flow.flow_changes(conn, schema=call.schema, limit=CHANGES_SHOWN)
    return {"queues": queues, "rate_limits": rates, "changes": changes, "keys_shown": int(text)}


def per_key_running(call: Call) -> dict[str, Any]:
    """``{"per_key_running": N}`` (0 removes it): the running limit of every key of the queue."""
    _only(call.body, ("per_key_running",))
    running = _whole(call.body, "per_key_running", "0 removes the limit")
    queue = call.path["name"]
    with call.service.connection() as conn:
        row = tenure_flow.set_per_key_running(conn, queue, running, schema=call.schema, requested_by=call.who)
    return {"queue": queue, "per_key_running": row.get("per_key_running"), "was": row.get("old_per_key_running")}


def key_set(call: Call) -> dict[str, Any]:
    """``{"key": K, "running": N, "weight": W}`` with ``running`` (0 removes the key's own limit),
    ``weight`` (1 is the default) or both; both change in one transaction."""
    _only(call.body, ("key", "running", "weight"))
    queue = check_queue_name(call.path["name"])
    key = tenure_flow.check_key(call.body.get("key"))
    if call.body.get("running") is None and call.body.get("weight") is None:
        raise ApiError(400, 'give "running" (0 removes the key\'s own limit), "weight" (1 is the default), or both')
    running = weight = None
    if call.body.get("running") is not None:
        running = tenure_flow.check_running_limit(_whole(call.body, "running", "0 removes the key's own limit"))
    if call.body.get("weight") is not None:
        weight = tenure_flow.check_weight(_number(call.body, "weight", "above 0, at most 1000; 1 is the default"))
    out: dict[str, Any] = {"queue": queue, "key": key}
    with call.service.connection() as conn, conn.transaction():
        if running is not None:
            out["running"] = tenure_flow.set_key_running(conn, queue, key, running, schema=call.schema,
                                                         requested_by=call.who)
        if weight is not None:
            out["weight"] = tenure_flow.set_key_weight(conn, queue, key, weight, schema=call.schema,
                                                       requested_by=call.who)
    return out


def rate_limit_set(call: Call) -> dict[str, Any]:
    """``{"per_second": X, "burst": B, "per_key": bool}``: create or change the rate limit
    named in the path (``burst`` left out: at least 1 and per_second rounded up)."""
    _only(call.body, ("per_second", "burst", "per_key"))
    name = tenure_flow.check_rate_limit_name(call.path["name"])
    per_second = tenure_flow.check_per_second(_number(call.body, "per_second", "tokens per second, at most 1e6"))
    burst = None
    if call.body.get("burst") is not None:
        burst = tenure_flow.check_burst(_whole(call.body, "burst", "1 to 1,000,000 tokens"))
    per_key = call.body.get("per_key", False)
    if not isinstance(per_key, bool):
        raise ApiError(400, f"per_key must be true or false, got {per_key!r}")
    with call.service.connection() as conn:
        return tenure_flow.set_rate_limit(conn, name, per_second, burst=burst, per_key=per_key, schema=call.schema,
                                          requested_by=call.who)


def rate_limit_delete(call: Call) -> dict[str, Any]:
    """Delete the rate limit named in the path (404 if there is none); its jobs are no longer
    held back by it."""
    _only(call.body, ())
    name = tenure_flow.check_rate_limit_name(call.path["name"])
    with call.service.connection() as conn:
        deleted = tenure_flow.delete_rate_limit(conn, name, schema=call.schema, requested_by=call.who)
    if not deleted:
        raise ApiError(404, f"no rate limit {name!r}")
    return {"name": name, "deleted": True}


ROUTES: list[tuple[str, str, Handler, bool]] = [
    ("GET", "flow", flow, False),
    ("POST", "flow/queues/{name}/per-key-running", per_key_running, True),
    ("POST", "flow/queues/{name}/key", key_set, True),
    ("POST", "flow/rate-limits/{name}", rate_limit_set, True),
    ("POST", "flow/rate-limits/{name}/delete", rate_limit_delete, True),
]
"""(method, path under api/v1/, handler, mutates), served next to :data:`tenure.ui.api.ROUTES`."""
