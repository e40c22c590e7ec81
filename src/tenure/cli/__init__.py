"""The `tenure` command line. Bad input and configuration errors exit 2 with one line on stderr.

One module per command group (``migrate``, ``enqueue``, ``worker``, ``reaper``, ``dlq``...), each
defining ``ORDER`` and ``register(subparsers)``; shared helpers live in :mod:`tenure.cli.common`.
:func:`build_parser` imports every module of this package: adding a command group is adding a
module (named as its command), and a module that fails to import fails `tenure --help` loudly
instead of dropping its command. :func:`main` builds only the invoked command's parser when the
command line names it plainly (start-up: the other commands' imports, e.g. ``doctor`` and
``chaos``, cost a worker 50-100 ms of CPU), else the whole tree. Only ``tenure operator`` imports its service lazily (kopf takes seconds to
import); a unit test imports every tenure module so that one cannot rot unnoticed either.

Nothing in tenure imports this package (an import-linter contract in ``make lint``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

import psycopg

from tenure.cli.common import EXIT_CONFIG, Parser, add_global_options, duration, positive_int
from tenure.core.db import resolve_dsn, resolve_schema
from tenure.core.errors import ConfigError, JobSpecError, SchemaTooNewError, first_line
from tenure.observability import logs, traces

__all__ = ["build_parser", "command_modules", "command_names", "duration", "invoked_command", "main", "positive_int"]

_NOT_COMMANDS = frozenset({"common"})


def command_names() -> list[str]:
    """Every command module's name (each registers the command of the same name), unimported."""
    return [info.name for info in pkgutil.iter_modules(__path__)
            if not info.name.startswith("_") and info.name not in _NOT_COMMANDS]


def command_modules(only: str | None = None) -> list[ModuleType]:
    """Every command module of this package (or just ``only``), in ``tenure --help`` order.
    Import errors propagate."""
    modules = []
    for name in command_names():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        if not callable(getattr(module, "register", None)) or not isinstance(getattr(module, "ORDER", None), int):
            raise RuntimeError(f"{module.__name__} is not a command module: it needs ORDER and register(subparsers)")
        modules.append(module)
    return sorted(modules, key=lambda m: (m.ORDER, m.__name__))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command ``only`` alone."""
    parser = Parser(prog="tenure", description="A PostgreSQL job queue that ends zombie jobs.")
    add_global_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in command_modules(only):
        module.register(sub)
    return parser


_VALUE_OPTIONS = frozenset({"--database-url", "--schema", "--log-level"})
"""Global options that take the next argument as their value."""


def invoked_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when that is plain: the first argument that is neither a
    global option nor its value. None (build every parser) for help, an abbreviated or unknown
    option, or no command."""
    names = set(command_names())
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _VALUE_OPTIONS:
            i += 2
        elif arg == "--log-json" or (arg.startswith("--") and arg.split("=", 1)[0] in _VALUE_OPTIONS and "=" in arg):
            i += 1
        elif arg.startswith("-"):
            return None
        else:
            return arg if arg in names else None
    return None


TRACED_COMMANDS = frozenset({"worker", "reaper", "enqueue", "sqs", "ui"})
"""Commands that set up OpenTelemetry from the OTEL_* environment (docs/observability.md, Traces)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(invoked_command(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    logs.configure(args.log_json, args.log_level)
    tracing = traces.NOT_SET_UP
    try:
        if args.command in TRACED_COMMANDS:
            tracing = traces.setup_tracing_from_env(args.command)
        args.schema = resolve_schema(args.schema)
        args.dsn = args.database_url if getattr(args, "no_db", False) else resolve_dsn(args.database_url)
        return int(args.func(args) or 0)
    except (ConfigError, JobSpecError, SchemaTooNewError) as exc:
        sys.stderr.write(f"tenure: error: {first_line(exc)}\n")
        return EXIT_CONFIG
    except psycopg.OperationalError as exc:
        sys.stderr.write(f"tenure: error: cannot connect to the database: {first_line(exc)}\n")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    finally:
        tracing.shutdown()  # the last spans are exported before the process ends (--burst too)
