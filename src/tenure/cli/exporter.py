"""`tenure exporter`: serve queue-level metrics computed from SQL (one per database and schema)."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from prometheus_client import REGISTRY

from tenure.cli.common import command, duration, port
from tenure.observability.exporter import QueueCollector
from tenure.observability.http import serve
from tenure.worker.metrics import db_reconnects_counter

ORDER = 50
PORT_DEFAULT = 9464
INTERVAL_DEFAULT = 5.0


def register(sub: Any) -> None:
    p = command(sub, "exporter", "serve queue-level metrics from SQL")
    p.add_argument("--port", type=port, default=PORT_DEFAULT)
    p.add_argument("--interval", type=duration, default=INTERVAL_DEFAULT, help="cache stats this long between scrapes")
    p.add_argument("--completed-interval", type=duration, default=None,
                   help="refresh the completed counts (an index scan) this often (default 60s)")
    p.set_defaults(func=cmd_exporter)


def cmd_exporter(args: argparse.Namespace) -> int:
    reconnects = db_reconnects_counter(REGISTRY)
    collector = QueueCollector(args.dsn, args.schema, min_interval=args.interval,
                               completed_interval=args.completed_interval,
                               on_reconnect=reconnects.labels("exporter").inc)
    REGISTRY.register(collector)
    server = serve(args.port, REGISTRY, healthz=lambda: (True, "ok"),
                   readyz=lambda: (collector.read() is not None, "database"))
    print(f"exporter listening on :{server.server_address[1]}/metrics", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0
