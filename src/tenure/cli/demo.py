"""`tenure demo`: watch a crash get recovered, on the embedded database (or ``--database-url``);
the jobs stay on the queue ``demo`` for `tenure ui` to show."""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command, positive_int
from tenure.demo import run_demo

ORDER = 100


def register(sub: Any) -> None:
    p = command(sub, "demo", "watch a crash get recovered, on an embedded database")
    p.add_argument("--jobs", type=positive_int, default=20)
    p.set_defaults(func=cmd_demo, no_db=True)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args)
