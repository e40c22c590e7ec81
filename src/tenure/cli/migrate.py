"""`tenure migrate`: create or upgrade the schema (idempotent; migrations take an advisory lock)."""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from tenure.cli.common import command, open_repo
from tenure.core.repository import HistoryStore, SchemaStore
from tenure.reaper.history import ensure_partitions

ORDER = 10


class MigrateStore(SchemaStore, HistoryStore, Protocol):
    """What `tenure migrate` uses: the migrations and the version (schema area), then the day
    partitions of job_history (history area)."""


def register(sub: Any) -> None:
    command(sub, "migrate", "create or upgrade the schema (idempotent)").set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args, check=False)
    repo: MigrateStore = repository
    with conn:
        applied = repo.migrate()
        version = repo.schema_version()
        ensure_partitions(repo)  # the day partitions of job_history around today (0009)
    print(f"schema {args.schema!r} at version {version}" + (f" (applied {applied})" if applied else " (up to date)"))
    return 0
