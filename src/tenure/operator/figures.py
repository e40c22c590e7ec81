"""The operator's one edge to the database: queue figures, queue controls, flow settings (the
plan of ``spec.flow`` and its application), DSN resolution.

The engine never opens a connection itself: it calls a :data:`StatsFetcher`, a
:data:`ControlApplier` and a :data:`FlowApplier` (these functions in production, fakes in unit
tests). They read and write only through ``tenure.core`` (``fetch_queue_stats``, the
repository's flow face) and the APIs the CLI uses (``tenure.control``, ``tenure.flow``), and
turn every database failure into :class:`StatsUnavailable` with a CamelCase reason the
JobQueue's conditions show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tenure.operator import scaler as sc
from tenure.operator.flowspec import FLOW_WEIGHT_DEFAULT, RateSetting
from tenure.operator.settings import STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT
from tenure.operator.spec import FlowSpec

if TYPE_CHECKING:
    import psycopg

    from tenure.core.repository import FlowStore

#: Kubernetes' default ``ndots``: a name with fewer dots is tried with the search path first.
NDOTS = 5


@dataclasses.dataclass(frozen=True)
class QueueFigures:
    """The queue figures the operator shows in status and feeds to the scaler."""

    ready: int = 0
    scheduled: int = 0
    running: int = 0
    running_expired: int = 0
    completed: int = 0
    failed: int = 0
    live_workers: int = 0
    oldest_ready_age_seconds: float = 0.0
    paused: bool = False
    max_running: int = 0
    """The queue's controls as stored in the database (0: no limit)."""

    def load(self) -> sc.QueueLoad:
        return sc.QueueLoad(ready=self.ready, running=self.running, scheduled=self.scheduled)


class StatsUnavailable(Exception):
    """Stats could not be read; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: (dsn, schema, queue) -> figures; raises StatsUnavailable.
StatsFetcher = Callable[[str, str, str], QueueFigures]
#: (dsn, schema, queue, paused, max_running) -> None: store spec.paused/maxRunning; raises StatsUnavailable.
ControlApplier = Callable[[str, str, str, bool, int], None]


def resolves(name: str) -> bool:
    """Whether ``name`` resolves from here (one DNS lookup)."""
    import socket

    try:
        return bool(socket.getaddrinfo(name, None))
    except OSError:  # socket.gaierror: NXDOMAIN, no resolver
        return False


def dsn_in_namespace(dsn: str, namespace: str, resolver: Callable[[str], bool] | None = None) -> str:
    """The DSN as a pod in ``namespace`` would resolve it.

    A Secret's DSN is written for the JobQueue's pods, whose DNS search path starts with their
    namespace: ``postgres`` or ``pg-0.pg`` mean a Service (or a StatefulSet pod) in that
    namespace. The operator runs in its own namespace, so like that search path each host name
    with fewer than five dots (Kubernetes' ``ndots``) is tried as ``HOST.NAMESPACE.svc`` first,
    and that name is used when it resolves. IP addresses, ``localhost``, socket directories and
    names that do not resolve in the namespace are kept, as is a DSN psycopg cannot parse (the
    caller reports that). ``resolver`` defaults to :func:`resolves` (looked up at call time).
    Limits: only ``host`` (``hostaddr`` is an address already); one DNS lookup per host per call.
    """
    import ipaddress

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    lookup = resolver if resolver is not None else resolves
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn
    host = params.get("host")
    if not isinstance(host, str) or not host:
        return dsn

    def qualify(name: str) -> str:
        if not name or name == "localhost" or name.startswith("/") or name.count(".") >= NDOTS:
            return name
        if name.endswith((".svc", ".svc.cluster.local", ".")):
            return name
        try:
            ipaddress.ip_address(name)
            return name
        except ValueError:
            pass
        candidate = f"{name}.{namespace}.svc"
        return candidate if lookup(candidate) else name

    qualified = ",".join(qualify(h) for h in host.split(","))
    return dsn if qualified == host else make_conninfo(dsn, host=qualified)


def fetch_figures(
    dsn: str, schema: str, queue: str, connect_timeout: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT
) -> QueueFigures:
    """Read one queue's figures with ``tenure.core.stats.fetch_queue_stats``."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from tenure.core.stats import fetch_queue_stats

    try:
        if "connect_timeout" not in conninfo_to_dict(dsn):
            dsn = make_conninfo(dsn, connect_timeout=connect_timeout)
    except psycopg.ProgrammingError as exc:
        raise StatsUnavailable("InvalidDSN", f"the DSN in the Secret is invalid: {exc}") from exc
    try:
        rows = fetch_queue_stats(dsn, schema, queue)
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        raise StatsUnavailable(
            "SchemaMissing", f"schema {schema!r} has no tenure tables: {one_line(exc)}"
        ) from exc
    except psycopg.OperationalError as exc:
        raise StatsUnavailable("DatabaseUnreachable", one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StatsUnavailable("DatabaseError", one_line(exc)) from exc
    for row in rows:
        if row.queue == queue:
            return QueueFigures(
                ready=row.ready,
                scheduled=row.scheduled,
                running=row.running,
                running_expired=row.running_expired,
                completed=row.completed,
                failed=row.failed,
                live_workers=row.live_workers,
                oldest_ready_age_seconds=float(row.oldest_ready_age_seconds),
                paused=bool(row.paused),
                max_running=int(row.max_running or 0),
            )
    return QueueFigures()  # a queue nobody enqueued to yet is an empty queue


def apply_controls(dsn: str, schema: str, queue: str, paused: bool, max_running: int,
                   connect_timeout: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT) -> None:
    """Store the JobQueue's ``paused``/``maxRunning`` in the queue's control row (audited as
    ``operator``), through the same API as `tenure queues pause|limit`."""
    import psycopg

    from tenure import control
    from tenure.core.db import connect

    try:
        with connect(psycopg.conninfo.make_conninfo(dsn, connect_timeout=connect_timeout),
                     application_name="tenure-operator") as conn:
            control.set_paused(conn, queue, paused, schema=schema, requested_by="operator")
            control.set_max_running(conn, queue, max_running, schema=schema, requested_by="operator")
    except psycopg.OperationalError as exc:
        raise StatsUnavailable("DatabaseUnreachable", one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StatsUnavailable("DatabaseError", one_line(exc)) from exc


@dataclasses.dataclass(frozen=True)
class FlowLimits:
    """A queue's flow settings as the database holds them, and the rate limits that matter to
    one JobQueue (those its spec lists, and those it set last)."""

    per_key_running: int = 0
    """The running cap of every flow key (0: none)."""
    keys: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Each key with a running limit of its own, and that limit."""
    weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Each key with a weight other than 1, and that weight."""
    rates: Mapping[str, RateSetting] = dataclasses.field(default_factory=dict)
    """The rate limits the spec lists or the JobQueue owns, as stored."""
    owned_rates: frozenset[str] = frozenset()
    """The rate limits this JobQueue set last (``rate_limits.updated_by``): the only ones it
    deletes when its spec no longer lists them."""


@dataclasses.dataclass(frozen=True)
class FlowPlan:
    """What brings a queue's flow settings in line with ``spec.flow``: only what differs."""

    per_key_running: int | None = None
    """The new per-key cap (0 removes it); None: already right."""
    set_keys: tuple[tuple[str, int], ...] = ()
    """Keys whose own limit is missing or different, with the limit to set."""
    remove_keys: tuple[str, ...] = ()
    """Keys with an own limit the spec does not list (or lists with running 0)."""
    set_weights: tuple[tuple[str, float], ...] = ()
    """Keys whose weight is missing or different, with the weight to set."""
    remove_weights: tuple[str, ...] = ()
    """Keys with a weight the spec does not list (or lists as 1): back to 1."""
    set_rates: tuple[tuple[str, RateSetting], ...] = ()
    """Rate limits the spec lists that are missing or different."""
    delete_rates: tuple[str, ...] = ()
    """Rate limits this JobQueue set last that the spec no longer lists."""

    @property
    def empty(self) -> bool:
        return self.per_key_running is None and not (
            self.set_keys or self.remove_keys or self.set_weights or self.remove_weights
            or self.set_rates or self.delete_rates)

    def summary(self) -> str:
        """One line for the Event, e.g. ``perKeyRunning=5; 2 key limit(s) set; 1 rate limit(s) set``."""
        parts = [] if self.per_key_running is None else [f"perKeyRunning={self.per_key_running}"]
        for done, what in ((self.set_keys, "key limit(s) set"), (self.remove_keys, "key limit(s) removed"),
                           (self.set_weights, "key weight(s) set"),
                           (self.remove_weights, "key weight(s) removed"),
                           (self.set_rates, "rate limit(s) set"),
                           (self.delete_rates, "rate limit(s) deleted")):
            if done:
                parts.append(f"{len(done)} {what}")
        return "; ".join(parts) or "unchanged"

    def after(self, current: FlowLimits) -> FlowLimits:
        """``current`` with the plan applied (the set rate limits become this JobQueue's)."""
        keys = {k: v for k, v in current.keys.items() if k not in self.remove_keys}
        keys.update(self.set_keys)
        weights = {k: v for k, v in current.weights.items() if k not in self.remove_weights}
        weights.update(self.set_weights)
        rates = {k: v for k, v in current.rates.items() if k not in self.delete_rates}
        rates.update(self.set_rates)
        owned = (current.owned_rates - set(self.delete_rates)) | {name for name, _ in self.set_rates}
        per_key = current.per_key_running if self.per_key_running is None else self.per_key_running
        return FlowLimits(per_key, keys, weights, rates, frozenset(owned))


def plan_flow(current: FlowLimits, wanted: FlowSpec) -> FlowPlan:
    """The changes that make ``current`` equal ``wanted``; empty when equal. The JobQueue owns
    every key setting of its queue while ``spec.flow`` is set, so unlisted keys lose their own
    limit and weight; rate limits are shared across queues, so an unlisted one is deleted only
    when this JobQueue set it last (``current.owned_rates``)."""
    want_keys, want_weights, want_rates = wanted.key_limits(), wanted.key_weights(), wanted.rate_settings()
    return FlowPlan(
        per_key_running=(None if current.per_key_running == wanted.per_key_running
                         else wanted.per_key_running),
        set_keys=tuple((k, n) for k, n in want_keys.items() if current.keys.get(k) != n),
        remove_keys=tuple(sorted(k for k in current.keys if k not in want_keys)),
        set_weights=tuple((k, w) for k, w in want_weights.items() if current.weights.get(k) != w),
        remove_weights=tuple(sorted(k for k in current.weights if k not in want_weights)),
        set_rates=tuple((n, r) for n, r in want_rates.items() if current.rates.get(n) != r),
        delete_rates=tuple(sorted(n for n in current.owned_rates if n not in want_rates)),
    )


@dataclasses.dataclass(frozen=True)
class FlowApplied:
    """The result of :func:`apply_flow`: what it changed and the settings after."""

    plan: FlowPlan
    limits: FlowLimits


#: (dsn, schema, queue, spec.flow, requested_by) -> what was applied; raises StatsUnavailable.
FlowApplier = Callable[[str, str, str, FlowSpec, str], FlowApplied]


def read_flow_limits(repo: FlowStore, queue: str, wanted: FlowSpec | None = None,
                     owner: str = "") -> FlowLimits:
    """``queue``'s per-key cap, every key's own limit and weight, and the rate limits ``wanted``
    lists or ``owner`` set last, through the repository's flow face
    (``tenure.core.repository.FlowStore``): three small reads of the control tables
    (queues, flow_keys, rate_limits), never of the jobs."""
    row = next((q for q in repo.flow_queue_list() if q["queue"] == queue), None)
    per_key = int(row["per_key_running"] or 0) if row is not None else 0
    keys: dict[str, int] = {}
    weights: dict[str, float] = {}
    for k in repo.flow_key_settings(queue):
        if k["running"] is not None:
            keys[str(k["flow_key"])] = int(k["running"])
        if float(k["weight"]) != FLOW_WEIGHT_DEFAULT:
            weights[str(k["flow_key"])] = float(k["weight"])
    names = [r.name for r in wanted.rate_limits] if wanted is not None else []
    stored = repo.flow_rate_settings(names, owner)
    rates = {str(r["name"]): RateSetting(float(r["per_second"]), int(r["burst"]), bool(r["per_key"]))
             for r in stored}
    owned = frozenset(str(r["name"]) for r in stored if owner and r["updated_by"] == owner)
    return FlowLimits(per_key, keys, weights, rates, owned)


def _apply_plan(conn: psycopg.Connection[Any], queue: str, plan: FlowPlan, schema: str, by: str) -> None:
    """Make ``plan``'s changes through ``tenure.flow`` (each recorded in flow_changes as ``by``):
    rate limits first, then each key's own limit and weight, the per-key cap last (its claim
    gate row stays locked for the shortest time)."""
    from tenure import flow

    for name in plan.delete_rates:
        flow.delete_rate_limit(conn, name, schema=schema, requested_by=by)
    for name, rate in plan.set_rates:
        flow.set_rate_limit(conn, name, rate.per_second, burst=rate.burst, per_key=rate.per_key,
                            schema=schema, requested_by=by)
    for key in plan.remove_keys:
        flow.set_key_running(conn, queue, key, 0, schema=schema, requested_by=by)
    for key, running in plan.set_keys:
        flow.set_key_running(conn, queue, key, running, schema=schema, requested_by=by)
    for key in plan.remove_weights:
        flow.set_key_weight(conn, queue, key, FLOW_WEIGHT_DEFAULT, schema=schema, requested_by=by)
    for key, weight in plan.set_weights:
        flow.set_key_weight(conn, queue, key, weight, schema=schema, requested_by=by)
    if plan.per_key_running is not None:
        flow.set_per_key_running(conn, queue, plan.per_key_running, schema=schema, requested_by=by)


def apply_flow(dsn: str, schema: str, queue: str, wanted: FlowSpec, requested_by: str,
               connect_timeout: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT) -> FlowApplied:
    """Bring ``queue``'s flow settings and ``spec.flow``'s rate limits in line with the spec in
    one transaction, through ``tenure.flow`` (as `tenure flow` does; each change recorded in
    flow_changes as ``requested_by``, which is also how a rate limit's owner is known). Reads
    first and changes only what differs: a pass with nothing to change writes nothing. The
    first error rolls the whole pass back."""
    import psycopg

    from tenure.core.db import connect
    from tenure.core.errors import ConfigError
    from tenure.core.repository import Repository

    try:
        with connect(psycopg.conninfo.make_conninfo(dsn, connect_timeout=connect_timeout),
                     application_name="tenure-operator") as conn, conn.transaction():
            repo: FlowStore = Repository(conn, schema)
            current = read_flow_limits(repo, queue, wanted, requested_by)
            plan = plan_flow(current, wanted)
            _apply_plan(conn, queue, plan, schema, requested_by)
    except ConfigError as exc:
        raise StatsUnavailable("InvalidFlowSpec", one_line(exc)) from exc
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn,
            psycopg.errors.UndefinedFunction) as exc:
        raise StatsUnavailable(
            "FlowSchemaMissing", f"schema {schema!r} lacks the flow-control tables of this image"
            f" (run tenure migrate with it): {one_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        raise StatsUnavailable("DatabaseUnreachable", one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StatsUnavailable("DatabaseError", one_line(exc)) from exc
    return FlowApplied(plan, plan.after(current))


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters (its type when it has no text)."""
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
