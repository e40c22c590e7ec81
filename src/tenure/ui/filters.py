"""The job browser's filter and paging parameters, from a query string (``GET api/v1/jobs``)
or a JSON object (the ``filter`` of a bulk action or a DLQ replay). Pure: no database.

Every field is optional: ``id``, ``queue``, ``status``, ``task``, ``priority_min``,
``priority_max``, ``created_since``, ``finished_since`` (an ISO-8601 timestamp, or a duration
back from now such as ``90s``, ``15m``, ``2h``, ``7d``), ``idempotency_key``, ``payload`` (a
JSON object the payload must contain, e.g. ``{"invoice_id": 42}``) and ``flow_key`` (exact; 1 to
200 bytes: no job has an empty key, so an empty ``flow_key`` is refused rather than ignored). An
unknown field or a bad value raises :class:`FilterError`, answered 400 with one message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from tenure.control import JOB_STATUSES
from tenure.core.errors import JobSpecError
from tenure.core.repository import PRIORITY_MAX, PRIORITY_MIN, JobFilter
from tenure.core.repository.specs import check_flow_key

FIELDS = ("id", "queue", "status", "task", "priority_min", "priority_max", "created_since", "finished_since",
          "idempotency_key", "payload", "flow_key")
TEXT_MAX = 500
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FilterError(ValueError):
    """A bad filter or paging parameter (400)."""


def parse_filter(values: Mapping[str, Any], *, extra: tuple[str, ...] = ()) -> JobFilter:
    """A :class:`JobFilter` from query parameters or a JSON object; keys in ``extra`` are
    allowed and ignored (paging). Empty strings mean "no condition", but for ``flow_key``."""
    unknown = sorted(set(values) - set(FIELDS) - set(extra))
    if unknown:
        raise FilterError(f"unknown filter {unknown[0]!r} (known: {', '.join(FIELDS)})")
    v = {k: x for k, x in values.items() if k in FIELDS and x is not None and x != ""}
    status = _text(v, "status")
    if status is not None and status not in JOB_STATUSES:
        raise FilterError(f"unknown status {status!r} (one of {', '.join(JOB_STATUSES)})")
    created_after, created_within = _since(v, "created_since")
    finished_after, finished_within = _since(v, "finished_since")
    low, high = _int(v, "priority_min", PRIORITY_MIN, PRIORITY_MAX), _int(v, "priority_max", PRIORITY_MIN, PRIORITY_MAX)
    if low is not None and high is not None and low > high:
        raise FilterError(f"priority_min {low} is above priority_max {high}")
    return JobFilter(id=_int(v, "id", 1, 2**63 - 1), queue=_text(v, "queue"), status=status, task=_text(v, "task"),
                     priority_min=low, priority_max=high, created_after=created_after, created_within=created_within,
                     finished_after=finished_after, finished_within=finished_within,
                     idempotency_key=_text(v, "idempotency_key"), payload=_payload(v),
                     flow_key=_flow_key(values.get("flow_key")))


def filter_to_query(flt: JobFilter) -> dict[str, str]:
    """The query parameters that give back ``flt`` (for links and the next page)."""
    out: dict[str, str] = {}
    for key in ("id", "queue", "status", "task", "priority_min", "priority_max", "idempotency_key", "payload",
                "flow_key"):
        value = getattr(flt, key)
        if value is not None:
            out[key] = str(value)
    for name, after, within in (("created_since", flt.created_after, flt.created_within),
                                ("finished_since", flt.finished_after, flt.finished_within)):
        if after is not None:
            out[name] = after.isoformat()
        elif within is not None:
            out[name] = f"{within:g}s"
    return out


def parse_limit(value: Any, default: int, maximum: int) -> int:
    if value is None or value == "":
        return default
    number = _as_int(value, "limit")
    if not 1 <= number <= maximum:
        raise FilterError(f"limit must be between 1 and {maximum}, got {number}")
    return number


def parse_cursor(value: Any) -> int | None:
    """The keyset cursor: the id of the last job of the previous page (``next_cursor``)."""
    if value is None or value == "":
        return None
    number = _as_int(value, "cursor")
    if number < 1:
        raise FilterError("cursor must be a next_cursor value from a previous page")
    return number


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise FilterError(f"{name} must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        return int(value)
    raise FilterError(f"{name} must be an integer, got {value!r}")


def _int(v: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    if name not in v:
        return None
    number = _as_int(v[name], name)
    if not low <= number <= high:
        raise FilterError(f"{name} must be between {low} and {high}, got {number}")
    return number


def _text(v: Mapping[str, Any], name: str) -> str | None:
    if name not in v:
        return None
    value = v[name]
    if not isinstance(value, str):
        raise FilterError(f"{name} must be a string")
    if len(value) > TEXT_MAX or "\x00" in value:
        raise FilterError(f"{name} is too long or contains NUL")
    return value


def _flow_key(value: Any) -> str | None:
    """An exact flow key, checked as enqueue checks it (1 to 200 bytes, no NUL); None: no condition."""
    if value is None:
        return None
    try:
        return check_flow_key(value)
    except JobSpecError as exc:
        raise FilterError(f"flow_key: {exc}") from None


def _since(v: Mapping[str, Any], name: str) -> tuple[datetime | None, float | None]:
    value = _text(v, name)
    if value is None:
        return None, None
    match = _DURATION.match(value)
    if match:
        return None, float(match.group(1)) * _UNITS[match.group(2)]
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{name} must be an ISO-8601 time or a duration such as 15m, 2h, 7d; got {value!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)), None


def _payload(v: Mapping[str, Any]) -> str | None:
    if "payload" not in v:
        return None
    value = v["payload"]
    if isinstance(value, str):
        if len(value) > 10_000:
            raise FilterError("payload filter is too long")
        try:
            value = json.loads(value)
        except ValueError:
            raise FilterError('payload must be a JSON object such as {"invoice_id": 42}') from None
    if not isinstance(value, dict):
        raise FilterError('payload must be a JSON object such as {"invoice_id": 42}')
    return json.dumps(value)
