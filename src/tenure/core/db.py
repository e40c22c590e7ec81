"""Choosing the database and opening connections.

``TENURE_DATABASE_URL`` (or ``--database-url``) selects the server; without it, an embedded
PostgreSQL under ``$TENURE_HOME`` is started or reused.

High availability: a multi-host DSN (``host=a,b,c port=5432,5432,5432 ...
target_session_attrs=read-write`` or ``postgresql://a:5432,b:5432,c:5432/db?target_session_attrs=
read-write``) makes libpq try each host and keep the one that accepts writes, so a reconnect after
a failover finds the new primary. :func:`connect` adds TCP keepalives and a TCP user timeout
(unless the DSN sets them) so a connection to a primary that vanished from the network fails in
seconds instead of the kernel's ~15 minutes, and :func:`needs_reconnect` tells the services which
errors mean "this connection is to the wrong server or a dead one: reconnect and retry" (a demoted
primary answers writes with SQLSTATE 25006, read_only_sql_transaction).
"""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from tenure.core.errors import ConfigError, first_line

CONNECT_TIMEOUT_DEFAULT = 5
TCP_USER_TIMEOUT_MS_DEFAULT = 10_000
"""Milliseconds sent data may stay unacknowledged before the kernel drops the connection."""
KEEPALIVES_IDLE_DEFAULT = 5
"""Seconds of silence before the first TCP keepalive probe (then every 2 s, 3 probes)."""
RECONNECT_SQLSTATES = frozenset({
    "25006",  # read_only_sql_transaction: a demoted primary (or a standby) refuses the write
    "57P01",  # admin_shutdown: the server is stopping (switchover, restart)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting up or in recovery
    "53300",  # too_many_connections: the new primary is flooded by everyone reconnecting
})
"""SQLSTATEs after which a service reconnects (finding the primary again) and retries."""
SCHEMA_DEFAULT = "tenure"
Connection = psycopg.Connection[dict[str, object]]


def resolve_dsn(database_url: str | None = None) -> str:
    """The DSN to use: the argument, else ``TENURE_DATABASE_URL``, else the embedded server."""
    dsn = database_url or os.environ.get("TENURE_DATABASE_URL")
    if dsn:
        validate_dsn(dsn)
        return dsn
    from tenure.core.embedded import ensure_server, tenure_home
    return ensure_server(tenure_home() / "pgdata").dsn


def resolve_schema(schema: str | None = None) -> str:
    from tenure.core.queries import quote_ident
    name = schema or os.environ.get("TENURE_SCHEMA") or SCHEMA_DEFAULT
    quote_ident(name)
    return name


def validate_dsn(dsn: str) -> None:
    """Reject a malformed DSN with a clear message before any connection attempt."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid database URL: {first_line(exc)}") from None


def needs_reconnect(exc: BaseException) -> bool:
    """True when ``exc`` means the connection is dead or points at a server that cannot take
    writes now: the caller should close it, reconnect (a multi-host DSN finds the new primary)
    and retry. Connection-level failures (``OperationalError``, ``InterfaceError``), SQLSTATE
    class 08 and :data:`RECONNECT_SQLSTATES` qualify; a constraint violation or a bad query does not.
    """
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        return state in RECONNECT_SQLSTATES or state.startswith("08")
    return False


def _tcp_options(dsn: str) -> dict[str, int]:
    """Keepalive and user-timeout settings the DSN does not choose itself."""
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    wanted = {"keepalives": 1, "keepalives_idle": KEEPALIVES_IDLE_DEFAULT, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": TCP_USER_TIMEOUT_MS_DEFAULT}
    return {k: v for k, v in wanted.items() if k not in given}


def connection_options(dsn: str) -> dict[str, int | str]:
    """What every tenure connection adds to ``dsn`` unless the DSN sets it itself: TCP keepalives
    and ``tcp_user_timeout`` (see the module docstring), ``connect_timeout``
    (:data:`CONNECT_TIMEOUT_DEFAULT`) and ``client_encoding=UTF8``. :func:`connect` uses it; a
    ``psycopg_pool.ConnectionPool`` takes it as ``kwargs``, so that its connections behave alike
    (on a SQL_ASCII database they would otherwise read every text column as bytes)."""
    options: dict[str, int | str] = dict(_tcp_options(dsn))
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    if "connect_timeout" not in given:
        options["connect_timeout"] = CONNECT_TIMEOUT_DEFAULT
    # UTF-8 on the wire whatever the database's encoding: on a SQL_ASCII database (initdb with
    # the C locale, e.g. Debian's postgres image) psycopg would otherwise return every text
    # column as bytes, and no task name or queue would match.
    if "client_encoding" not in given:
        options["client_encoding"] = "UTF8"
    return options


def connect(dsn: str, *, autocommit: bool = True, application_name: str = "tenure") -> Connection:
    """A dict-row connection; autocommit so each named query is its own transaction, with
    :func:`connection_options` (a DSN's own settings win)."""
    validate_dsn(dsn)
    options = connection_options(dsn)
    conninfo = psycopg.conninfo.make_conninfo(dsn, application_name=application_name, **options)
    conn = psycopg.connect(conninfo, autocommit=autocommit, row_factory=dict_row)
    set_json_loads(_json_loads, conn)
    return conn


def _json_loads(data: str | bytes) -> Any:
    """``json.loads`` of text: given bytes (psycopg's default) it first detects their encoding,
    about 1 µs per value, and a claim decodes one payload per job."""
    return json.loads(data.decode() if isinstance(data, bytes) else data)
