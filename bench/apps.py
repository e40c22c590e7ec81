"""The no-op apps the comparison runs through each system's own command line.

tenure: ``tenure worker --app bench.apps:async_app`` (or ``sync_app``, the out-of-the-box
case). pgqueuer: ``pgq run bench.apps:pgqueuer_factory`` (asyncpg connection from
``BENCH_DSN``). Handlers do nothing, so the figures are the queues' own overhead.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tenure.worker.app import App

async_app = App()
sync_app = App()


@async_app.task("noop")
async def noop_async(ctx: Any) -> None:
    return None


@sync_app.task("noop")
def noop_sync(ctx: Any) -> None:
    return None


@asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[Any]:
    """pgqueuer's documented factory shape: a ``PgQueuer`` over one asyncpg connection."""
    import asyncpg
    from pgqueuer import PgQueuer

    conn = await asyncpg.connect(os.environ["BENCH_DSN"])
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

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
