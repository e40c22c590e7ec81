"""Per-system adapters: schema install, backlog fill, progress probe and worker command line.

Every system gets a fresh database per run (same server, same settings), an identical backlog
of no-op jobs, and its best configuration found on this machine (stated in ``describe``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.sqlfile import bench_queries

SYSTEMS = ("tenure", "pgqueuer", "procrastinate")
FILL_CHUNK = 10_000


@dataclass(frozen=True)
class WorkerPlan:
    """How many worker processes and with what knobs."""

    processes: int
    concurrency: int
    batch: int
    handler: str = "async"
    extra: tuple[str, ...] = field(default=())

    def describe(self, system: str) -> str:
        if system == "pgqueuer":
            return f"{self.processes} proc × batch {self.batch} (asyncpg)"
        if system == "procrastinate":
            return f"{self.processes} proc × concurrency {self.concurrency}"
        return (f"{self.processes} proc × concurrency {self.concurrency} × claim batch {self.batch} "
                f"({self.handler} handlers)")


BEST_DRAIN = {
    "tenure": WorkerPlan(2, 200, 100, "async"),
    "pgqueuer": WorkerPlan(2, 0, 100),
    "procrastinate": WorkerPlan(2, 10, 0),
}
"""Best configuration per system for the no-op drain on this machine (see docs/performance.md)."""


def parse_plan(text: str) -> WorkerPlan:
    """``PROCSxCONCxBATCH[:sync|async]``, e.g. ``2x100x100:async``."""
    spec, _, handler = text.partition(":")
    try:
        p, c, b = (int(x) for x in spec.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PROCSxCONCxBATCH[:sync|async], got {text!r}") from None
    if min(p, c, b) < 1:
        raise argparse.ArgumentTypeError(f"processes, concurrency and batch must be >= 1, got {text!r}")
    if handler not in ("", "sync", "async"):
        raise argparse.ArgumentTypeError(f"handler must be sync or async, got {handler!r}")
    return WorkerPlan(p, c, b, handler or "async")


def worker_cmd(system: str, dsn: str, plan: WorkerPlan, *, record_to: str | None = None,
               hold: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "bench.worker", system, "work", "--dsn", dsn,
           "--concurrency", str(plan.concurrency or 1), "--batch", str(plan.batch or 1),
           "--handler", plan.handler, *plan.extra]
    if record_to:
        cmd += ["--record", "--out", record_to]
    if hold:
        cmd.append("--hold")
    return cmd


def producer_cmd(system: str, dsn: str, rate: float, duration: float) -> list[str]:
    return [sys.executable, "-m", "bench.worker", system, "produce", "--dsn", dsn,
            "--rate", str(rate), "--duration", str(duration)]


def install(system: str, dsn: str) -> None:
    """Create the system's schema in an empty database."""
    if system == "tenure":
        from tenure.core.db import connect
        from tenure.core.repository import Repository
        with connect(dsn) as conn:
            Repository(conn, "tenure").migrate()
    elif system == "pgqueuer":
        asyncio.run(_pgqueuer_install(dsn))
    else:
        asyncio.run(_procrastinate_install(dsn))


async def _pgqueuer_install(dsn: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def _procrastinate_install(dsn: str) -> None:
    import procrastinate
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def fill(system: str, dsn: str, n: int, *, fast: bool = False) -> None:
    """Enqueue ``n`` no-op jobs through each system's own batch API (``fast``: tenure bulk SQL)."""
    if system == "tenure":
        from tenure.core.db import connect
        from tenure.core.repository import JobSpec, Repository
        with connect(dsn) as conn:
            if fast:
                q = bench_queries("tenure")
                conn.execute(q["tenure_fill_pending"], {"n": n})
                conn.execute(q["tenure_vacuum"])
                return
            repo = Repository(conn, "tenure")
            left = n
            while left > 0:
                k = min(FILL_CHUNK, left)
                repo.enqueue_many([JobSpec("noop", {})] * k)
                left -= k
    elif system == "pgqueuer":
        asyncio.run(_pgqueuer_fill(dsn, n))
    else:
        asyncio.run(_procrastinate_fill(dsn, n))


async def _pgqueuer_fill(dsn: str, n: int) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    conn = await asyncpg.connect(dsn)
    try:
        q = Queries(AsyncpgDriver(conn))
        left = n
        while left > 0:
            k = min(FILL_CHUNK, left)
            await q.enqueue(["noop"] * k, [None] * k, [0] * k)
            left -= k
    finally:
        await conn.close()


async def _procrastinate_fill(dsn: str, n: int) -> None:
    import procrastinate
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop(**kwargs: Any) -> None:
        return None

    async with app.open_async():
        left = n
        while left > 0:
            k = min(FILL_CHUNK, left)
            await noop.batch_defer_async(*[{} for _ in range(k)])
            left -= k


class Progress:
    """Counts finished jobs of one system's database (one connection, cheap queries)."""

    def __init__(self, system: str, dsn: str, total: int) -> None:
        self.system, self.total = system, total
        self.conn = psycopg.connect(dsn, autocommit=True)
        q = bench_queries("tenure")
        self._sql = {"tenure": q["tenure_done_count"], "pgqueuer": q["pgqueuer_remaining"],
                     "procrastinate": q["procrastinate_remaining"]}[system]
        self._base = 0
        if system == "tenure":
            self._base = self._count()

    def _count(self) -> int:
        row = self.conn.execute(self._sql).fetchone()
        return int(row[0]) if row else 0

    def done(self) -> int:
        if self.system == "tenure":
            return self._count() - self._base
        return self.total - self._count()

    def close(self) -> None:
        self.conn.close()


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
