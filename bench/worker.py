"""One benchmark worker or producer process: ``python -m bench.worker SYSTEM ROLE [options]``.

SYSTEM is tenure, pgqueuer or procrastinate; ROLE is ``work`` (serve no-op jobs until SIGTERM)
or ``produce`` (enqueue at a fixed rate for a fixed time; the producer's ``n``-th job carries
``bench.payloads.payload(n, --payload-bytes, {"t": …})``, the same bytes for every system).
Handlers are no-ops; with ``--record`` they note enqueue→start latency (payload field ``t``, the
producer's wall clock just before the enqueue statement; same machine, same clock) and write them
to ``--out`` as JSON at exit. ``--hold`` makes handlers sleep for an hour (heartbeat scenario).
Each worker prints ``READY`` on stdout once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from bench import payloads

LATENCIES: list[float] = []


def _dump(path: str | None) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(LATENCIES, fh)


def _note(payload: Any) -> None:
    if isinstance(payload, dict) and "t" in payload:
        LATENCIES.append((time.time() - float(payload["t"])) * 1000.0)


# -- tenure -----------------------------------------------------------------------------------
def tenure_work(args: argparse.Namespace) -> None:
    from tenure.worker.app import App as _App
    from tenure.worker.heartbeat import HeartbeatConfig
    from tenure.worker.runtime import Worker, WorkerConfig

    app = _App()
    record, hold = args.record, args.hold
    if args.handler == "async":
        @app.task("noop")
        async def noop_async(ctx: Any) -> None:
            if record:
                _note(ctx.job.payload)
            if hold:
                await asyncio.sleep(3600)
    else:
        @app.task("noop")
        def noop_sync(ctx: Any) -> None:
            if record:
                _note(ctx.job.payload)
            if hold:
                ctx.lease_lost.wait(3600)

    hb = HeartbeatConfig(interval=args.heartbeat) if args.heartbeat else HeartbeatConfig()
    worker = Worker(app, WorkerConfig(concurrency=args.concurrency, claim_batch=args.batch, heartbeat=hb),
                    dsn=args.dsn, schema="tenure")
    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    signal.signal(signal.SIGINT, lambda *_: worker.request_stop())
    threading.Timer(0.3, lambda: print("READY", flush=True)).start()
    worker.run()


def tenure_produce(args: argparse.Namespace) -> None:
    from tenure.core.db import connect
    from tenure.core.repository import JobSpec, Repository

    with connect(args.dsn) as conn:
        repo = Repository(conn, "tenure")

        def send(first: int, n: int) -> None:
            repo.enqueue_many([JobSpec("noop", p) for p in _batch(args, "tenure", first, n)])

        _paced(args, send)


def _batch(args: argparse.Namespace, system: str, first: int, n: int) -> list[Any]:
    """The payloads of the producer's jobs ``first`` … ``first + n - 1``, each stamped with the
    wall clock as it is made (field ``t``, the same way for every system) and padded to
    ``--payload-bytes``."""
    size = args.payload_bytes
    return [payloads.batch(system, first + j, 1, size, {"t": time.time()})[0] for j in range(n)]


def _due(args: argparse.Namespace, tick: int, sent: int) -> int:
    """Jobs due by tick ``tick`` (0-based) minus those ``sent``: a statement slower than a tick is
    caught up in the next one, so the arrival rate holds on average."""
    per_tick = max(1, round(float(args.rate) * float(args.tick)))
    return (tick + 1) * per_tick - sent


def _paced(args: argparse.Namespace, send: Any) -> None:
    """Send ``rate`` jobs/s in ticks of ``tick`` seconds for ``duration`` seconds (sync);
    ``send(first, n)`` enqueues the producer's jobs ``first`` … ``first + n - 1``."""
    start = time.monotonic()
    ticks = int(args.duration / args.tick)
    sent = 0
    for i in range(ticks):
        target = start + i * args.tick
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        n = _due(args, min(ticks - 1, int((time.monotonic() - start) / args.tick)), sent)
        if n > 0:
            send(sent, n)
            sent += n
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - start}), flush=True)


async def _apaced(args: argparse.Namespace, send: Any) -> None:
    start = time.monotonic()
    ticks = int(args.duration / args.tick)
    sent = 0
    for i in range(ticks):
        delay = start + i * args.tick - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n = _due(args, min(ticks - 1, int((time.monotonic() - start) / args.tick)), sent)
        if n > 0:
            await send(sent, n)
            sent += n
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - start}), flush=True)


# -- pgqueuer ---------------------------------------------------------------------------------
async def pgqueuer_work(args: argparse.Namespace) -> None:
    import asyncpg
    from pgqueuer import QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(args.dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    record, hold = args.record, args.hold

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        if record and job.payload:
            _note(json.loads(job.payload))
        if hold:
            await asyncio.sleep(3600)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    loop.call_later(0.3, lambda: print("READY", flush=True))
    await qm.run(batch_size=args.batch)


async def pgqueuer_produce(args: argparse.Namespace) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(args.dsn)
    q = Queries(AsyncpgDriver(conn))

    async def send(first: int, n: int) -> None:
        await q.enqueue(["noop"] * n, _batch(args, "pgqueuer", first, n), [0] * n)

    await _apaced(args, send)
    await conn.close()


# -- procrastinate ----------------------------------------------------------------------------
def _procrastinate_app(dsn: str, record: bool, hold: bool) -> Any:
    import procrastinate

    from bench.systems import procrastinate_connector

    app = procrastinate.App(connector=procrastinate_connector(dsn))

    @app.task(name="noop")
    async def noop(**kwargs: Any) -> None:
        if record:
            _note(kwargs)
        if hold:
            await asyncio.sleep(3600)

    return app


async def procrastinate_work(args: argparse.Namespace) -> None:
    app = _procrastinate_app(args.dsn, args.record, args.hold)
    async with app.open_async():
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, lambda: print("READY", flush=True))
        await app.run_worker_async(concurrency=args.concurrency, wait=True, install_signal_handlers=True)


async def procrastinate_produce(args: argparse.Namespace) -> None:
    app = _procrastinate_app(args.dsn, False, False)
    async with app.open_async():
        task = app.tasks["noop"]

        async def send(first: int, n: int) -> None:
            await task.batch_defer_async(*_batch(args, "procrastinate", first, n))

        await _apaced(args, send)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("system", choices=["tenure", "pgqueuer", "procrastinate"])
    parser.add_argument("role", choices=["work", "produce"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--handler", choices=["sync", "async"], default="async")
    parser.add_argument("--heartbeat", type=float, default=0.0, help="tenure heartbeat interval (0: default)")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--tick", type=float, default=0.01)
    parser.add_argument("--duration", type=float, default=20.0)
    payloads.add_argument(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover - part of the [bench] extra
        pass
    try:
        if args.system == "tenure":
            (tenure_work if args.role == "work" else tenure_produce)(args)
        elif args.system == "pgqueuer":
            asyncio.run(pgqueuer_work(args) if args.role == "work" else pgqueuer_produce(args))
        else:
            asyncio.run(procrastinate_work(args) if args.role == "work" else procrastinate_produce(args))
    finally:
        _dump(args.out)
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    main()
    sys.stdout.flush()
    os._exit(0)  # do not wait for non-daemon pool threads of the peers
