"""The `tenure` command line. Bad input and configuration errors exit 2 with one line on stderr.

One module per command group (``migrate``, ``enqueue``, ``worker``, ``reaper``, ``dlq``...), each
defining ``ORDER`` and ``register(subparsers)``; shared helpers live in :mod:`tenure.cli.common`.
:func:`build_parser` imports every module of this package: adding a command group is adding a
module, and a module that fails to import fails every `tenure` invocation loudly instead of
dropping its command. Only ``tenure operator`` imports its service lazily (kopf takes seconds to
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
from tenure.observability import logs

__all__ = ["build_parser", "command_modules", "duration", "main", "positive_int"]

_NOT_COMMANDS = frozenset({"common"})


def command_modules() -> list[ModuleType]:
    """Every command module of this package, in ``tenure --help`` order. Import errors propagate."""
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_COMMANDS:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not callable(getattr(module, "register", None)) or not isinstance(getattr(module, "ORDER", None), int):
            raise RuntimeError(f"{module.__name__} is not a command module: it needs ORDER and register(subparsers)")
        modules.append(module)
    return sorted(modules, key=lambda m: (m.ORDER, m.__name__))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tenure", description="A PostgreSQL job queue that ends zombie jobs.")
    add_global_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in command_modules():
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.log_json, args.log_level)
    try:
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
