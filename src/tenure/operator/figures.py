"""The operator's one edge to the database: queue figures, queue controls, DSN resolution.

The engine never opens a connection itself: it calls a :data:`StatsFetcher` and a
:data:`ControlApplier` (these functions in production, fakes in unit tests). Both read and
write only through ``tenure.core`` (``fetch_queue_stats`` and ``tenure.control``, which go
through the repository), and both turn every database failure into :class:`StatsUnavailable`
with a CamelCase reason the JobQueue's ``Degraded`` condition shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tenure.operator import scaler as sc
from tenure.operator.settings import STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT

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


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters (its type when it has no text)."""
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
