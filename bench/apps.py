"""The no-op apps the comparison runs through each system's own command line.

tenure: ``tenure worker --app bench.apps:async_app`` (or ``sync_app``, the out-of-the-box
case; ``flow_app`` records latencies). pgqueuer: ``pgq run bench.apps:pgqueuer_factory``
(asyncpg connection from ``BENCH_DSN``). Handlers do nothing, so the figures are the queues' own
overhead.

Latency recording (the flow scenario): with ``BENCH_LATENCY_DIR`` set, the pgqueuer handler and
``flow_app``'s handler note, for every job whose payload carries ``t`` (the producer's wall
clock just before its enqueue statement), ``t`` and the handler's own start time, as pairs of
doubles appended to ``BENCH_LATENCY_DIR/lat-<pid>.bin`` by a background thread every
``FLUSH_SECONDS`` (tenure's CLI ends with ``os._exit``, so nothing is left for exit time).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from array import array
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tenure.worker.app import App

FLUSH_SECONDS = 0.5


class LatencyLog:
    """``(enqueued, started)`` wall-clock pairs of this process, flushed to one file."""

    def __init__(self, directory: str) -> None:
        self.path = Path(directory) / f"lat-{os.getpid()}.bin"
        self._buf = array("d")
        self._lock = threading.Lock()
        threading.Thread(target=self._flusher, name="bench-latency-flush", daemon=True).start()
        atexit.register(self.flush)

    def note(self, payload: Any) -> None:
        started = time.time()
        if isinstance(payload, (bytes, str)):
            payload = json.loads(payload)
        if isinstance(payload, dict) and "t" in payload:
            with self._lock:
                self._buf.append(float(payload["t"]))
                self._buf.append(started)

    def flush(self) -> None:
        with self._lock:
            buf, self._buf = self._buf, array("d")
        if buf:
            with open(self.path, "ab") as fh:
                buf.tofile(fh)

    def _flusher(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()


def latency_log() -> LatencyLog | None:
    directory = os.environ.get("BENCH_LATENCY_DIR")
    return LatencyLog(directory) if directory else None


async_app = App()
sync_app = App()
flow_app = App()


@async_app.task("noop")
async def noop_async(ctx: Any) -> None:
    return None


@sync_app.task("noop")
def noop_sync(ctx: Any) -> None:
    return None


_FLOW_LOG: LatencyLog | None = None


@flow_app.task("noop")
async def noop_recorded(ctx: Any) -> None:
    global _FLOW_LOG
    if _FLOW_LOG is None:
        _FLOW_LOG = latency_log()
    if _FLOW_LOG is not None:
        _FLOW_LOG.note(ctx.job.payload)


@asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[Any]:
    """pgqueuer's documented factory shape: a ``PgQueuer`` over one asyncpg connection."""
    import asyncpg
    from pgqueuer import PgQueuer

    conn = await asyncpg.connect(os.environ["BENCH_DSN"])
    pgq = PgQueuer.from_asyncpg_connection(conn)

    record = latency_log()

    @pgq.entrypoint("noop")
    async def noop(job: Any) -> None:
        if record is not None:
            record.note(job.payload)

    try:
        yield pgq
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.apps pgqueuer [--batch-size N]``: what ``pgq run … --mode drain`` does.

    pgqueuer 1.6.0's own ``pgq run`` fails before starting with the typer release pip installs
    here (``logconfig.setup_fancy_logger``: ``AttributeError: 'str' object has no attribute
    'name'``), so this calls the function its CLI calls, ``pgqueuer.run`` (the supervisor), on
    uvloop like the CLI, with INFO logging to stderr like the CLI's default.
    """
    import argparse
    import asyncio
    import logging
    from datetime import timedelta

    import pgqueuer
    from pgqueuer.types import QueueExecutionMode

    parser = argparse.ArgumentParser(prog="python -m bench.apps")
    parser.add_argument("system", choices=["pgqueuer"])
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--mode", default="drain", choices=[m.name for m in QueueExecutionMode])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    coro = pgqueuer.run("bench.apps:pgqueuer_factory", batch_size=args.batch_size,
                        mode=QueueExecutionMode[args.mode], dequeue_timeout=timedelta(seconds=30))
    try:
        import uvloop
        uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is part of the [bench] extra
        asyncio.run(coro)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
