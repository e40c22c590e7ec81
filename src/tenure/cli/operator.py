"""`tenure operator`: run the Kubernetes operator (kopf).

The operator module is imported when the command runs, not when the parser is built: kopf and
the Kubernetes client take seconds to import, which every other command would pay for.
"""

from __future__ import annotations

import argparse
from typing import Any

from tenure.cli.common import command

ORDER = 110
LIVENESS_DEFAULT = "http://0.0.0.0:8080/healthz"


def register(sub: Any) -> None:
    p = command(sub, "operator", "run the Kubernetes operator (kopf)")
    p.add_argument("--namespace", action="append", help="watch only these namespaces (default: all)")
    p.add_argument("--liveness", default=LIVENESS_DEFAULT)
    p.set_defaults(func=cmd_operator, no_db=True)


def cmd_operator(args: argparse.Namespace) -> int:
    from tenure.operator.main import run

    run(namespaces=args.namespace or None, all_namespaces=not args.namespace, liveness_endpoint=args.liveness)
    return 0
