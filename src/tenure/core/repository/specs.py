"""What an enqueue is made of: :class:`JobSpec` and the one validator every enqueue path
runs, the payload encoding and its size limit, and the priority range. Pure logic, no SQL."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tenure.core.errors import ConfigError, JobSpecError, PayloadError
from tenure.core.unique import Unique, unique_base

Row = dict[str, Any]
"""One result row of a named query, by column name."""
MAX_PAYLOAD_BYTES_DEFAULT = 256 * 1024
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def env_bytes(name: str, default: int) -> int:
    """A size limit from the environment variable ``name`` (whole bytes, >= 1), else ``default``;
    ConfigError for anything else."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of bytes, got {raw!r}") from None
    if limit < 1:
        raise ConfigError(f"{name} must be >= 1")
    return limit


def max_payload_bytes() -> int:
    """The payload size limit: ``TENURE_MAX_PAYLOAD_BYTES`` or 256 KiB."""
    return env_bytes("TENURE_MAX_PAYLOAD_BYTES", MAX_PAYLOAD_BYTES_DEFAULT)


def encode_payload(payload: Any) -> str:
    """The JSON text stored for ``payload``; PayloadError for what jsonb cannot hold faithfully
    (non-JSON values, NaN/Infinity, NUL characters) or what exceeds the size limit."""
    try:
        # Non-ASCII characters as UTF-8, not \u escapes: a SQL_ASCII database cannot turn an
        # escape above \u007f into jsonb, and the byte size below is then the stored size.
        text = json.dumps(payload if payload is not None else {}, allow_nan=False,
                          separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not valid JSON for storage: {exc}") from None
    if _ESCAPED_NUL.search(text) or "\x00" in text:
        raise PayloadError("payload contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store")
    try:
        size, limit = len(text.encode()), max_payload_bytes()
    except UnicodeEncodeError:
        raise PayloadError("payload contains an unpaired surrogate, which is not valid UTF-8") from None
    if size > limit:
        raise PayloadError(f"payload is {size} bytes, above the {limit}-byte limit (TENURE_MAX_PAYLOAD_BYTES)")
    return text
PRIORITY_MIN = -100
PRIORITY_MAX = 100
PRIORITY_DEFAULT = 0
"""Job priority: an integer in [PRIORITY_MIN, PRIORITY_MAX]; higher runs first."""


def check_priority(priority: Any) -> int:
    """The priority as an int; ConfigError when it is not an integer in the documented range."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"priority must be an integer, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ConfigError(f"priority {priority} is out of range [{PRIORITY_MIN}, {PRIORITY_MAX}] (higher runs first)")
    return priority


@dataclass(frozen=True)
class EnqueueResult:
    id: int
    created: bool
    """False when an existing job with the same idempotency key or unique key was returned (dedup hit)."""
    replaced: bool = False
    """True when a unique ``replace`` or ``debounce`` rewrote that existing pending job (docs/unique.md)."""


MAX_ATTEMPTS_LIMIT = 2**31 - 1
"""Largest ``max_attempts`` (the column is a PostgreSQL integer)."""
DELAY_MAX_SECONDS = 100 * 365 * 86400.0
"""Longest enqueue delay: 100 years (anything longer is a unit mistake)."""


def check_text(what: str, value: Any, *, name: bool = True) -> None:
    if not isinstance(value, str):
        raise JobSpecError(f"{what} must be a string, got {value!r}")
    if not value.strip():
        raise JobSpecError(f"{what} must not be empty, got {value!r}")
    if "\x00" in value:
        raise JobSpecError(f"{what} contains a NUL character, which PostgreSQL text cannot store")
    if name and value != value.strip():
        raise JobSpecError(f"{what} must not start or end with whitespace, got {value!r}")


FLOW_KEY_MAX_BYTES = 200
"""The longest flow key, in UTF-8 bytes (the schema's CHECK says the same)."""


def check_flow_key(value: Any) -> str:
    """Refuse (JobSpecError) a flow key that is not a string, is empty, has a NUL, or is over
    :data:`FLOW_KEY_MAX_BYTES` bytes; returns it."""
    check_text("flow key", value, name=False)
    size = len(value.encode())
    if size > FLOW_KEY_MAX_BYTES:
        raise JobSpecError(f"flow key must be at most {FLOW_KEY_MAX_BYTES} bytes, got {size}")
    return str(value)


RATE_LIMIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A rate limit's name: a letter or digit, then up to 99 of letters, digits, ``_``, ``.``, ``-``
(the schema's CHECK on ``rate_limits.name`` says the same)."""
RATE_UNITS_MAX = 1_000_000
"""The most tokens one job may take from its rate limit (the schema's CHECK on ``jobs.rate_units``)."""


def check_rate_limit_name(value: Any) -> str:
    """Refuse (JobSpecError) a rate limit name that :data:`RATE_LIMIT_NAME` does not match; returns it."""
    if not isinstance(value, str) or not RATE_LIMIT_NAME.fullmatch(value):
        raise JobSpecError(f"rate limit name must be 1 to 100 letters, digits, '_', '.' or '-', starting with "
                           f"a letter or digit, got {value!r}"[:300])
    return value


def check_rate_units(value: Any) -> int:
    """Refuse (JobSpecError) units that are not a whole number from 1 to :data:`RATE_UNITS_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= RATE_UNITS_MAX:
        raise JobSpecError(f"rate limit units must be a whole number from 1 to {RATE_UNITS_MAX}, got {value!r}"[:300])
    return value


def parse_rate_limit_ref(value: Any) -> tuple[str, int]:
    """``"NAME"`` (1 unit) or ``"NAME:UNITS"`` as (name, units); JobSpecError when malformed."""
    if not isinstance(value, str):
        raise JobSpecError(f"rate limit must be a string NAME or NAME:UNITS, got {value!r}"[:300])
    name, sep, units = value.partition(":")
    if not sep:
        return check_rate_limit_name(name), 1
    check_rate_limit_name(name)
    if not units.isascii() or not units.isdigit() or len(units) > 7:
        raise JobSpecError(f"rate limit units must be a whole number from 1 to {RATE_UNITS_MAX}, "
                           f"got {units!r} in {value!r}"[:300])
    return name, check_rate_units(int(units))


def check_rate_limits_known(refs: Iterable[tuple[str, int]], bursts: dict[str, int]) -> None:
    """Refuse (JobSpecError) a reference to a rate limit not in ``bursts`` (name -> burst), or one
    asking more units than the limit's burst (its bucket never holds them, so the job could never
    be claimed)."""
    for name, units in refs:
        burst = bursts.get(name)
        if burst is None:
            raise JobSpecError(f"unknown rate limit {name!r} (create it with `tenure flow rate {name} "
                               f"--per-second R`)"[:300])
        if units > burst:
            raise JobSpecError(f"a job taking {units} units of rate limit {name!r} could never be claimed: "
                               f"its burst is {burst}")


@dataclass(frozen=True)
class JobSpec:
    """One job to enqueue. :meth:`validate` is the one check every enqueue path runs
    (``tenure enqueue`` flags, ``--from-file``, :func:`tenure.enqueue`, :meth:`Repository.enqueue_many`)."""

    task: str
    payload: Any = None
    queue: str = "default"
    max_attempts: int = 5
    delay: float = 0.0
    idempotency_key: str | None = None
    priority: int = PRIORITY_DEFAULT
    flow_key: str | None = None
    """A tenant, an account: what flow control counts and limits by (docs/flow.md)."""
    rate_limit: str | None = None
    """A rate limit's name, ``"NAME"`` (1 unit) or ``"NAME:UNITS"``: the claim takes that many
    tokens from its bucket (docs/flow.md). Enqueue refuses an unknown name."""
    unique: Unique | None = None
    """At most one job per unique key (the task plus payload fields): docs/unique.md."""

    @property
    def rate(self) -> tuple[str, int] | None:
        """The rate limit's (name, units), None without one; JobSpecError when malformed."""
        return parse_rate_limit_ref(self.rate_limit) if self.rate_limit is not None else None

    def validate(self) -> str:
        """Raise JobSpecError (a ValueError) naming the first invalid field: an empty task or queue
        name (or one with surrounding whitespace or a NUL), an empty idempotency key or flow key (or
        one over 200 bytes), a malformed rate limit reference, a unique declaration whose fields
        the payload lacks (or a payload that is not an object), ``max_attempts``
        not a whole number from 1 to 2^31-1, a delay that is negative, not finite or above 100 years,
        or a payload jsonb cannot store (PayloadError). Returns the payload's stored JSON text."""
        return self.validated()[0]

    def validated(self) -> tuple[str, str | None]:
        """:meth:`validate`'s checks; the payload's stored JSON text and the unique key's
        payload-derived part (:func:`tenure.core.unique.unique_base`; None without ``unique``)."""
        text = self._checked_payload()
        if self.unique is None:
            return text, None
        if not isinstance(self.unique, Unique):
            raise JobSpecError(f"unique must be a tenure.Unique, got {self.unique!r}"[:300])
        return text, unique_base(self.task, self.payload, self.unique)

    def _checked_payload(self) -> str:
        check_text("task name", self.task)
        check_text("queue name", self.queue)
        check_priority(self.priority)
        if self.flow_key is not None:
            check_flow_key(self.flow_key)
        if self.rate_limit is not None:
            parse_rate_limit_ref(self.rate_limit)
        if self.idempotency_key is not None:
            check_text("idempotency key", self.idempotency_key, name=False)
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            raise JobSpecError(f"max_attempts must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, got {attempts!r}")
        delay = self.delay
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
            raise JobSpecError(f"delay must be a finite number of seconds, got {delay!r}")
        if not 0 <= delay <= DELAY_MAX_SECONDS:
            raise JobSpecError(f"delay must be from 0 to {DELAY_MAX_SECONDS:.0f} seconds (100 years), got {delay:g}")
        return encode_payload(self.payload)


def iter_batches(items: Iterable[JobSpec], size: int) -> Iterable[list[JobSpec]]:
    batch: list[JobSpec] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
