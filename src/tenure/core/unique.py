"""Unique jobs (issue 39 item 3): at most one job per unique key among the jobs in the chosen
states. :class:`Unique` is the declaration (``@app.task(unique=tenure.Unique(by=[...]))``,
``tenure enqueue --unique-by``), :func:`unique_base` the key's payload-derived part. Pure logic,
no SQL: the key's time bucket is added by the enqueue statement, by the database clock, and a
partial unique index over ``jobs.unique_key`` enforces it (docs/unique.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tenure.core.errors import JobSpecError

UNIQUE_STATES_ALLOWED = ("pending", "running", "failed", "cancelled")
"""The states a unique key may cover: the states of jobs that live in ``jobs`` (completed jobs
move to ``job_history``, which the unique index cannot cover)."""
UNIQUE_STATES_REQUIRED = ("pending", "running")
"""States every declaration covers: the claim, the reaper and retries move a job between them,
and such a move must never meet another job holding its key."""
UNIQUE_STATES_DEFAULT = UNIQUE_STATES_REQUIRED
ON_CONFLICT_MODES = ("skip", "replace", "debounce")
ON_CONFLICT_DEFAULT = "skip"
UNIQUE_PERIOD_MAX = 100 * 365 * 86400
"""The longest period, in whole seconds: 100 years (as the longest delay)."""
UNIQUE_FIELDS_MAX = 32


def _check_by(by: Any) -> tuple[str, ...]:
    if isinstance(by, str) or not isinstance(by, Iterable):
        raise JobSpecError(f"unique by must be a list of payload field names, got {by!r}"[:300])
    fields = tuple(by)
    if not fields:
        raise JobSpecError("unique by must name at least one payload field")
    if len(fields) > UNIQUE_FIELDS_MAX:
        raise JobSpecError(f"unique by names {len(fields)} fields, at most {UNIQUE_FIELDS_MAX}")
    for name in fields:
        if not isinstance(name, str) or not name.strip() or "\x00" in name or name != name.strip():
            raise JobSpecError(f"unique by field names must be non-empty strings without surrounding "
                               f"whitespace, got {name!r}"[:300])
    if len(set(fields)) != len(fields):
        raise JobSpecError(f"unique by names a field twice: {', '.join(fields)}"[:300])
    return fields


def _check_period(period: Any) -> int | None:
    if period is None:
        return None
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not math.isfinite(period) \
            or period != int(period) or not 1 <= period <= UNIQUE_PERIOD_MAX:
        raise JobSpecError(f"unique period must be a whole number of seconds from 1 to {UNIQUE_PERIOD_MAX}, "
                           f"got {period!r}"[:300])
    return int(period)


def _check_states(states: Any) -> tuple[str, ...]:
    if isinstance(states, str) or not isinstance(states, Iterable):
        raise JobSpecError(f"unique states must be a list of job states, got {states!r}"[:300])
    given = tuple(states)
    for state in given:
        if state == "completed":
            raise JobSpecError("unique states cannot include completed: completed jobs leave the jobs table "
                               "for job_history, which the unique index does not cover (use an idempotency key)")
        if state not in UNIQUE_STATES_ALLOWED:
            raise JobSpecError(f"unknown unique state {state!r} (states: {', '.join(UNIQUE_STATES_ALLOWED)})"[:300])
    missing = [s for s in UNIQUE_STATES_REQUIRED if s not in given]
    if missing:
        raise JobSpecError(f"unique states must include {' and '.join(UNIQUE_STATES_REQUIRED)} (missing "
                           f"{', '.join(missing)}): the claim and the reaper move jobs between them")
    return tuple(s for s in UNIQUE_STATES_ALLOWED if s in given)


@dataclass(frozen=True)
class Unique:
    """At most one job per key among jobs in ``states``: the key is the task plus the payload's
    ``by`` fields (top-level fields of a JSON object payload), and with ``period`` the time
    bucket ``floor(now / period)`` of the enqueue (database clock). ``on_conflict``: ``skip``
    returns the existing job's id; ``replace`` also puts the new payload in it when it is
    pending; ``debounce`` (needs ``period``; no time bucket) replaces a pending job's payload and
    moves its start to ``period`` seconds from now (a new job also waits ``period``).
    Invalid values raise JobSpecError (a ValueError) on construction. See docs/unique.md."""

    by: Sequence[str]
    """Normalised to a tuple."""
    period: int | None = None
    states: Sequence[str] = UNIQUE_STATES_DEFAULT
    """Normalised to a tuple in the order of :data:`UNIQUE_STATES_ALLOWED`."""
    on_conflict: str = ON_CONFLICT_DEFAULT

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", _check_by(self.by))
        object.__setattr__(self, "period", _check_period(self.period))
        object.__setattr__(self, "states", _check_states(self.states))
        if self.on_conflict not in ON_CONFLICT_MODES:
            raise JobSpecError(f"unique on_conflict must be one of {', '.join(ON_CONFLICT_MODES)}, "
                               f"got {self.on_conflict!r}"[:300])
        if self.on_conflict == "debounce" and self.period is None:
            raise JobSpecError("unique on_conflict debounce needs a period (how long to wait for quiet)")

    @property
    def bucket_period(self) -> int | None:
        """The period that buckets the key by time: None without one, and for debounce (whose
        period is the quiet time, not a bucket)."""
        return None if self.on_conflict == "debounce" else self.period

    @property
    def updates(self) -> bool:
        """Whether a conflict rewrites a pending holder (replace, debounce) rather than skipping."""
        return self.on_conflict != "skip"


def _canonical(value: Any) -> Any:
    """A whole float as its int (1.0 and 1 are one key, as in jsonb); containers recursively."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def unique_base(task: str, payload: Any, unique: Unique) -> str:
    """The payload-derived part of the unique key: sha256 (hex) of the canonical JSON of the
    task and the ``by`` fields' names and values. JobSpecError when the payload is not a JSON
    object or lacks a ``by`` field (a missing field is refused, not hashed as null: docs/unique.md)."""
    if not isinstance(payload, dict):
        raise JobSpecError(f"unique by needs a JSON object payload, got {type(payload).__name__}")
    missing = [f for f in unique.by if f not in payload]
    if missing:
        raise JobSpecError(f"unique field {missing[0]!r} is missing from the payload"[:300])
    doc = {"task": task, "by": {f: _canonical(payload[f]) for f in unique.by}}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse_unique_by(text: str) -> tuple[str, ...]:
    """``FIELD[,FIELD...]`` (the CLI's ``--unique-by``) as field names; JobSpecError when empty."""
    return _check_by([part.strip() for part in text.split(",")] if text.strip() else [])
