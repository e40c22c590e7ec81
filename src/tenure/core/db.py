"""Choosing the database and opening connections.

``TENURE_DATABASE_URL`` (or ``--database-url``) selects the server; without it, an embedded
PostgreSQL under ``$TENURE_HOME`` is started or reused.
"""

from __future__ import annotations

import os

import psycopg
from psycopg.rows import dict_row

from tenure.core.errors import ConfigError, first_line

CONNECT_TIMEOUT_DEFAULT = 5
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


def connect(dsn: str, *, autocommit: bool = True, application_name: str = "tenure") -> Connection:
    """A dict-row connection; autocommit so each named query is its own transaction."""
    validate_dsn(dsn)
    return psycopg.connect(dsn, autocommit=autocommit, row_factory=dict_row,
                           connect_timeout=CONNECT_TIMEOUT_DEFAULT,
                           application_name=application_name)
