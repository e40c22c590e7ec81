"""`tenure migrate`: create or upgrade the schema (idempotent; migrations take an advisory lock)."""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command, open_repo
from tenure.reaper.history import ensure_partitions

ORDER = 10


def register(sub: Any) -> None:
    command(sub, "migrate", "create or upgrade the schema (idempotent)").set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    conn, repo = open_repo(args, check=False)
    with conn:
        applied = repo.migrate()
        version = repo.schema_version()
        ensure_partitions(repo)  # the day partitions of job_history around today (0009)
    print(f"schema {args.schema!r} at version {version}" + (f" (applied {applied})" if applied else " (up to date)"))
    return 0
