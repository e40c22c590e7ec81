"""`tenure ui`: the job browser in the browser (docs/ui.md).

Binds to loopback unless ``--bind`` says otherwise. Without ``--users`` or
``--trusted-user-header`` everyone who can connect is an admin (or a viewer with
``--read-only``). The schema must be migrated. Prints ``ui listening on http://HOST:PORT/PREFIX/``
once it accepts connections (``--bind 127.0.0.1:0`` picks a free port)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from tenure.cli.common import command, duration, serve_asgi
from tenure.core.shutdown import SHUTDOWN_DELAY_DEFAULT
from tenure.ui.config import BIND_DEFAULT, UiConfig, normalise_prefix

ORDER = 56
log = logging.getLogger("tenure.ui")


def register(sub: Any) -> None:
    p = command(sub, "ui", "serve the job browser (pages and a JSON API) over the database")
    p.add_argument("--bind", default=BIND_DEFAULT, help=f"HOST:PORT to listen on (default {BIND_DEFAULT})")
    p.add_argument("--prefix", default="", help="serve every page, asset and API call under this path (e.g. /tenure)")
    p.add_argument("--read-only", action="store_true", help="render no action; every change is refused with 403")
    p.add_argument("--users", metavar="FILE", help="HTTP basic auth: lines USER:BCRYPT_HASH:ROLE (admin or viewer)")
    p.add_argument("--trusted-user-header", metavar="NAME",
                   help="take the user from this header set by an authenticating proxy (e.g. X-Forwarded-User); "
                        "the role is theirs in --users, else viewer")
    p.add_argument("--shutdown-delay", type=duration, default=SHUTDOWN_DELAY_DEFAULT, metavar="DURATION",
                   help="on SIGTERM, fail /healthz and serve on this long, then drain (0: at once); behind a "
                        "load balancer, longer than it takes to drop the endpoint, e.g. 5s (default 0)")
    p.set_defaults(func=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    from tenure.ui.app import build_app
    from tenure.ui.service import UiService

    config = UiConfig(dsn=args.dsn, schema=args.schema, bind=args.bind, prefix=normalise_prefix(args.prefix),
                      read_only=args.read_only, users_file=args.users, trusted_user_header=args.trusted_user_header,
                      shutdown_delay=args.shutdown_delay)
    config.validate()
    if not config.users_file and not config.trusted_user_header and not config.read_only:
        log.warning("tenure ui: no --users and no --trusted-user-header: whoever can connect may change jobs")
    service = UiService(config)
    serve_asgi("ui", service, build_app(service), config.bind, path=f"{config.prefix}/", graceful_seconds=3,
               shutdown_delay=config.shutdown_delay)
    return 0
