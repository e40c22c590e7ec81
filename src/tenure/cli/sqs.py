"""`tenure sqs`: serve an SQS-compatible API over tenure's leases (docs/sqs.md).

Requests must be signed (SigV4) with a key of ``--credentials FILE``; ``--no-auth`` accepts
every request and must be given explicitly. Binds to loopback unless ``--bind`` says otherwise.
The schema must be migrated (`tenure migrate`). Prints ``sqs listening on http://HOST:PORT``
once it accepts connections (``--bind 127.0.0.1:0`` picks a free port)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from tenure.cli.common import command, duration, serve_asgi
from tenure.core.shutdown import SHUTDOWN_DELAY_DEFAULT
from tenure.sqs.auth import load_credentials
from tenure.sqs.service import (
    ACCOUNT_DEFAULT,
    BIND_DEFAULT,
    REGION_DEFAULT,
    SWEEP_INTERVAL_DEFAULT,
    SqsConfig,
    SqsService,
)

ORDER = 55
log = logging.getLogger("tenure.sqs")


def register(sub: Any) -> None:
    p = command(sub, "sqs", "serve an SQS-compatible API (AWS JSON 1.0 and query protocols) over tenure's queues")
    p.add_argument("--bind", default=BIND_DEFAULT, help=f"HOST:PORT to listen on (default {BIND_DEFAULT})")
    auth = p.add_mutually_exclusive_group(required=True)
    auth.add_argument("--credentials", metavar="FILE",
                      help="keys allowed to call, one per line: ACCESS_KEY_ID:SECRET_ACCESS_KEY:QUEUE_GLOB[,GLOB...]")
    auth.add_argument("--no-auth", action="store_true", help="accept unsigned requests from anyone who can connect")
    p.add_argument("--account-id", default=ACCOUNT_DEFAULT, help=f"the account id in queue URLs and ARNs (default {ACCOUNT_DEFAULT})")
    p.add_argument("--region", default=REGION_DEFAULT, help=f"the region in ARNs and in signatures' scope (default {REGION_DEFAULT})")
    p.add_argument("--shutdown-delay", type=duration, default=SHUTDOWN_DELAY_DEFAULT, metavar="DURATION",
                   help="on SIGTERM, fail /healthz and serve on this long, then drain (0: at once); behind a "
                        "load balancer, longer than it takes to drop the endpoint, e.g. 5s (default 0)")
    p.add_argument("--sweep-interval", type=duration, default=SWEEP_INTERVAL_DEFAULT, metavar="DURATION",
                   help="how often this replica deletes messages past their queue's MessageRetentionPeriod and "
                        f"resumes message move tasks whose runner stopped (default {SWEEP_INTERVAL_DEFAULT:g}s)")
    p.set_defaults(func=cmd_sqs)


def cmd_sqs(args: argparse.Namespace) -> int:
    from tenure.sqs.app import build_app

    credentials = load_credentials(args.credentials) if args.credentials else None
    config = SqsConfig(dsn=args.dsn, schema=args.schema, bind=args.bind, account_id=args.account_id,
                       region=args.region, credentials=credentials, shutdown_delay=args.shutdown_delay,
                       sweep_interval=args.sweep_interval)
    config.validate()
    if credentials is None:
        log.warning("tenure sqs: --no-auth: every request is accepted unsigned; bind to a trusted network only")
    service = SqsService(config)
    serve_asgi("sqs", service, build_app(service), config.bind, shutdown_delay=config.shutdown_delay)
    return 0
