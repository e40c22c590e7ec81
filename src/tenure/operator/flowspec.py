"""``spec.flow`` of a JobQueue (issue 38, item 7): its typed view, parsing and validation.

The JobQueue declares its queue's flow settings: the running limit per flow key, each listed
key's own running limit and weight, and the rate limits it needs (``rateLimits``). Parsing and
:meth:`FlowSpec.validate` judge an object as the CRD's schema and CEL rules do
(:mod:`tenure.operator.crd` builds those from the constants here), with the checks of
``tenure.flow``, so an object that never met the API server is judged alike. Errors are
:class:`~tenure.core.errors.ConfigError` naming the field (``spec.py`` turns them into its
``SpecError``). What the operator does with a valid spec: ``figures.plan_flow``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from tenure.core.errors import ConfigError
from tenure.core.repository.specs import FLOW_KEY_MAX_BYTES as FLOW_KEY_MAX_BYTES
from tenure.flow import (
    BURST_MAX,
    PER_SECOND_MAX,
    WEIGHT_MAX,
    check_burst,
    check_key,
    check_per_second,
    check_rate_limit_name,
    check_running_limit,
    check_weight,
    default_burst,
)
from tenure.flow import RUNNING_LIMIT_MAX as RUNNING_LIMIT_MAX

FLOW_PER_KEY_RUNNING_DEFAULT = 0
#: At most this many entries in ``spec.flow.keys`` (bounds the object and the CEL cost).
FLOW_KEYS_MAX = 1000
#: A flow key in ``spec.flow.keys`` is at most this many characters (the CRD's maxLength, which
#: bounds the CEL cost) and at most :data:`FLOW_KEY_MAX_BYTES` UTF-8 bytes (the database's limit).
FLOW_KEY_MAX_LENGTH = FLOW_KEY_MAX_BYTES
#: A key's weight when ``weight`` is not given: the claim's plain round-robin share.
FLOW_WEIGHT_DEFAULT = 1.0
#: The largest weight (``tenure.flow.WEIGHT_MAX``; the flow_keys_weight_range constraint).
FLOW_WEIGHT_MAX = int(WEIGHT_MAX)
#: At most this many entries in ``spec.flow.rateLimits``.
FLOW_RATE_LIMITS_MAX = 100
#: A rate limit's name (the rate_limits table's CHECK, ``tenure.flow.check_rate_limit_name``).
RATE_LIMIT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
RATE_LIMIT_NAME_MAX_LENGTH = 100
#: Bounds of a rate limit's refill rate (above 0) and bucket size (the table's CHECKs).
RATE_PER_SECOND_MAX = int(PER_SECOND_MAX)
RATE_BURST_MAX = BURST_MAX
RATE_PER_KEY_DEFAULT = False


@dataclasses.dataclass(frozen=True)
class FlowKeySpec:
    """One key's own settings (``spec.flow.keys[]``): its running limit (0: none of its own,
    the queue's per-key limit applies) and its weight in the claim's round-robin (1: plain)."""

    key: str
    running: int = 0
    weight: float = FLOW_WEIGHT_DEFAULT


class RateSetting(NamedTuple):
    """A rate limit as the database stores it: tokens per second, bucket size, one bucket per key."""

    per_second: float
    burst: int
    per_key: bool


@dataclasses.dataclass(frozen=True)
class RateLimitSpec:
    """One rate limit (``spec.flow.rateLimits[]``): a token bucket shared by every job that
    names it, in any queue; ``burst`` None takes ``tenure.flow.set_rate_limit``'s default."""

    name: str
    per_second: float
    burst: int | None = None
    per_key: bool = RATE_PER_KEY_DEFAULT

    def setting(self) -> RateSetting:
        """What the database should hold (without ``burst``, ``tenure.flow.default_burst``, as
        ``tenure.flow.set_rate_limit`` stores it)."""
        burst = self.burst if self.burst is not None else default_burst(self.per_second)
        return RateSetting(float(self.per_second), burst, self.per_key)


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """``spec.flow``: the queue's flow settings (issue 38), owned by the JobQueue while declared.

    Declared (even ``{}``), the operator makes the database match on every full pass: the
    per-key running cap, exactly the listed keys' own limits and weights (every other key's
    are removed, whoever set them), and the listed rate limits (a rate limit the spec no longer
    lists is deleted only when this JobQueue set it last). Absent, the operator leaves the
    queue's flow settings alone (``tenure flow`` manages them)."""

    per_key_running: int = FLOW_PER_KEY_RUNNING_DEFAULT
    """Running jobs per flow key of the queue across all pods (`tenure flow limit
    --per-key-running`); 0: no cap."""
    keys: tuple[FlowKeySpec, ...] = ()
    """Keys with a limit or weight of their own; running 0 and weight 1 mean none."""
    rate_limits: tuple[RateLimitSpec, ...] = ()
    """Rate limits the queue's jobs name (shared across queues: see the class docstring)."""

    def key_limits(self) -> dict[str, int]:
        """The keys' own limits the database should hold (entries with running 0 left out)."""
        return {k.key: k.running for k in self.keys if k.running > 0}

    def key_weights(self) -> dict[str, float]:
        """The keys' weights the database should hold (entries with weight 1 left out)."""
        return {k.key: float(k.weight) for k in self.keys if k.weight != FLOW_WEIGHT_DEFAULT}

    def rate_settings(self) -> dict[str, RateSetting]:
        """The rate limits the database should hold, by name."""
        return {r.name: r.setting() for r in self.rate_limits}

    def validate(self) -> None:
        """The CRD's rules for ``spec.flow`` (schema bounds, CEL rules, unique keys and names)."""
        _check(check_running_limit, self.per_key_running, "spec.flow.perKeyRunning", named=True)
        _check_count(self.keys, FLOW_KEYS_MAX, "spec.flow.keys")
        seen: set[str] = set()
        for i, entry in enumerate(self.keys):
            where = f"spec.flow.keys[{i}]"
            _check(check_key, entry.key, f"{where}.key")
            if entry.key in seen:
                raise ConfigError(f"{where}.key {entry.key!r} is listed twice: "
                                  f"spec.flow.keys must be unique by key")
            seen.add(entry.key)
            _check(check_running_limit, entry.running, f"{where}.running", named=True)
            _check(check_weight, entry.weight, f"{where}.weight")
        _check_count(self.rate_limits, FLOW_RATE_LIMITS_MAX, "spec.flow.rateLimits")
        names: set[str] = set()
        for i, limit in enumerate(self.rate_limits):
            where = f"spec.flow.rateLimits[{i}]"
            _check(check_rate_limit_name, limit.name, f"{where}.name")
            if limit.name in names:
                raise ConfigError(f"{where}.name {limit.name!r} is listed twice: "
                                  f"spec.flow.rateLimits must be unique by name")
            names.add(limit.name)
            _check(check_per_second, limit.per_second, f"{where}.perSecond")
            if limit.burst is not None:
                _check(check_burst, limit.burst, f"{where}.burst")


def _check(check: Callable[..., object], value: Any, what: str, *, named: bool = False) -> None:
    """Run one of tenure.flow's checks; its ConfigError names the field (``named``: the check
    takes the field's name itself)."""
    try:
        if named:
            check(value, what)
        else:
            check(value)
    except ConfigError as exc:
        raise ConfigError(str(exc) if named else f"{what}: {exc}") from None


def _check_count(entries: tuple[Any, ...], most: int, what: str) -> None:
    if len(entries) > most:
        raise ConfigError(f"{what} must have at most {most} entries, got {len(entries)}")


def _get(obj: Mapping[str, Any], key: str, kind: type, default: Any, path: str) -> Any:
    """``obj[key]`` of type ``kind`` (default when absent); bool is refused where a number is
    expected, and a number where a flag is; ``float`` accepts whole numbers too (JSON has one
    number type)."""
    value = obj.get(key)
    if value is None:
        return default
    if kind in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{path}{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if kind is float:
        if not isinstance(value, int | float):
            raise ConfigError(f"{path}{key} must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, kind):
        raise ConfigError(f"{path}{key} must be {'an integer' if kind is int else 'a ' + kind.__name__}, "
                          f"got {value!r}")
    return value


def _entries(flow: Mapping[str, Any], field: str, path: str, needs: str) -> list[Mapping[str, Any]]:
    entries: list[Mapping[str, Any]] = _get(flow, field, list, [], path)
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{path}{field}[{i}] must be an object with {needs}")
    return entries


def parse_flow(flow: Mapping[str, Any], path: str = "spec.flow.") -> FlowSpec:
    """A FlowSpec from ``spec.flow`` (camelCase, as stored; types checked, not yet validated)."""
    keys = []
    for i, entry in enumerate(_entries(flow, "keys", path, "key and running or weight")):
        where = f"{path}keys[{i}]."
        if entry.get("key") is None:
            raise ConfigError(f"{where}key is required")
        if entry.get("running") is None and entry.get("weight") is None:
            raise ConfigError(f"{where[:-1]} needs running or weight (or both)")
        keys.append(FlowKeySpec(key=_get(entry, "key", str, "", where),
                                running=_get(entry, "running", int, 0, where),
                                weight=_get(entry, "weight", float, FLOW_WEIGHT_DEFAULT, where)))
    limits = []
    for i, entry in enumerate(_entries(flow, "rateLimits", path, "name and perSecond")):
        where = f"{path}rateLimits[{i}]."
        for required in ("name", "perSecond"):
            if entry.get(required) is None:
                raise ConfigError(f"{where}{required} is required")
        limits.append(RateLimitSpec(name=_get(entry, "name", str, "", where),
                                    per_second=_get(entry, "perSecond", float, 0.0, where),
                                    burst=_get(entry, "burst", int, None, where),
                                    per_key=_get(entry, "perKey", bool, RATE_PER_KEY_DEFAULT, where)))
    return FlowSpec(
        per_key_running=_get(flow, "perKeyRunning", int, FLOW_PER_KEY_RUNNING_DEFAULT, path),
        keys=tuple(keys),
        rate_limits=tuple(limits),
    )
