"""What every `tenure` command module shares: the parser class (errors on one line, exit 2), the
global options, argument types, opening the database, and printing tables and JSON.

A command module (one per command group, e.g. ``tenure/cli/dlq.py``) defines ``ORDER`` (its place
in ``tenure --help``) and ``register(subparsers)``, which adds its parsers with :func:`command` so
that each accepts the global options too. :mod:`tenure.cli` finds the modules by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

import psycopg

from tenure.core.db import connect
from tenure.core.errors import ConfigError, first_line
from tenure.core.repository import Repository

EXIT_CONFIG = 2
"""Exit status for bad input and configuration: one line on stderr, nothing changed."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(text: str) -> float:
    """Parse ``30``, ``30s``, ``1.5m``, ``2h``, ``7d`` into seconds (never negative)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (use e.g. 30s, 5m, 2h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def count(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"tenure: error: {message}\n")
        raise SystemExit(EXIT_CONFIG)


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``--database-url``, ``--schema``, ``--log-json`` and ``--log-level``, accepted both before and
    after the subcommand. On subcommands they default to SUPPRESS, so a value given there replaces
    the one given (or defaulted) before the subcommand, and an absent one changes nothing."""
    def default(value: Any) -> Any:
        return value if top_level else argparse.SUPPRESS

    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument("--database-url", dest="database_url", default=default(None),
                       help="PostgreSQL DSN (default: $TENURE_DATABASE_URL, else an embedded server)")
    group.add_argument("--schema", default=default(None), help="Postgres schema (default: $TENURE_SCHEMA or tenure)")
    group.add_argument("--log-json", action="store_true",
                       default=default(os.environ.get("TENURE_LOG_JSON") == "1"),
                       help="structured JSON logs with job id, attempt, lock token and worker id "
                            "(default: $TENURE_LOG_JSON=1)")
    group.add_argument("--log-level", default=default(os.environ.get("TENURE_LOG_LEVEL", "INFO")),
                       help="DEBUG, INFO, WARNING or ERROR (default: $TENURE_LOG_LEVEL or INFO)")


def command(subparsers: Any, name: str, help: str, *, description: str | None = None) -> Parser:
    """Add the command ``name`` (or a subcommand) with the global options."""
    parser: Parser = subparsers.add_parser(name, help=help, description=description or help)
    add_global_options(parser, top_level=False)
    return parser


def subcommands(parser: argparse.ArgumentParser, dest: str) -> Any:
    """The subparsers of a command group such as ``dlq``; a subcommand is required."""
    return parser.add_subparsers(dest=dest, required=True, parser_class=Parser)


def open_repo(args: argparse.Namespace, *, check: bool = True,
              application_name: str = "tenure") -> tuple[psycopg.Connection[Any], Repository]:
    """Connect to ``args.dsn`` and, with ``check``, refuse a missing or newer schema. A command
    binds the repository to the face(s) it uses (``conn, repository = open_repo(args)`` then
    ``repo: DeadLetterStore = repository``: an annotated first assignment, which mypy keeps as
    declared) and uses only that, never the whole :class:`~tenure.core.repository.Repository`."""
    conn = connect(args.dsn, application_name=application_name)
    repo = Repository(conn, args.schema)
    if check:
        try:
            repo.check_schema()
        except BaseException:
            conn.close()
            raise
    return conn, repo


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o)))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print left-aligned columns separated by two spaces."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def listen_socket(bind: str) -> socket.socket:
    """A listening socket on ``HOST:PORT`` (port 0: any free one) for a server command;
    ConfigError (exit 2) when it cannot bind."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {bind}: {exc.strerror or exc}") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def serve_asgi(label: str, service: Any, app: Any, bind: str, *, path: str = "", graceful_seconds: float = 5,
               shutdown_delay: float = 0) -> None:
    """Serve a `tenure ui` or `tenure sqs` app: open ``service`` first (a database it cannot
    open is a ConfigError, exit 2), listen on ``bind``, print ``LABEL listening on
    http://HOST:PORT{path}`` once connections are accepted, and serve until SIGTERM or SIGINT.
    The app's lifespan closes the service.

    The stop (issue 36, :mod:`tenure.core.shutdown`, ``service.shutdown``): the signal fails
    readiness and closes each connection after its response; ``shutdown_delay`` seconds later
    (or at a second signal) the service drains (SQS long polls answered empty, event streams
    ended with a ``retry:`` hint), the listener closes, the requests in flight finish (cut
    after ``graceful_seconds``) and the process returns (exit 0)."""
    import uvicorn
    from psycopg_pool import PoolTimeout

    from tenure.cli._asgi import DrainingServer, close_when_stopping

    try:
        service.open()
    except (psycopg.OperationalError, PoolTimeout) as exc:
        service.close()
        raise ConfigError(f"cannot open the database: {first_line(exc)}") from None
    except BaseException:
        service.close()
        raise
    sock = listen_socket(bind)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(close_when_stopping(app, service.shutdown), log_level="warning", access_log=False,
                            lifespan="on", server_header=False, timeout_graceful_shutdown=int(graceful_seconds))
    server = DrainingServer(config, label, service.shutdown, shutdown_delay)
    shown = f"[{host}]" if ":" in host else host
    print(f"{label} listening on http://{shown}:{port}{path}", flush=True)
    server.run(sockets=[sock])
