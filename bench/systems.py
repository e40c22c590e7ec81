"""Per-system adapters: schema install, backlog fill, progress probe and worker command line.

Every system gets a fresh database per run (same server, same settings), an identical backlog
of no-op jobs (job ``i`` carries ``bench.payloads.payload(i, payload_bytes)``, the same bytes for
every system; ``payload_bytes`` 0: empty payloads), and its best configuration found on this
machine (stated in ``describe``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench import payloads
from bench.sqlfile import bench_queries

SYSTEMS = ("tenure", "pgqueuer", "procrastinate")
FILL_CHUNK = 10_000
BULK_CHUNK = 50_000
"""Rows per statement of a bulk fixture with payloads (``bulk_insert``)."""


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


def producer_cmd(system: str, dsn: str, rate: float, duration: float, *, payload_bytes: int = 0) -> list[str]:
    return [sys.executable, "-m", "bench.worker", system, "produce", "--dsn", dsn,
            "--rate", str(rate), "--duration", str(duration), "--payload-bytes", str(payload_bytes)]


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


def fill(system: str, dsn: str, n: int, *, fast: bool = False, payload_bytes: int = 0) -> None:
    """Enqueue ``n`` no-op jobs through each system's own batch API (``fast``: tenure bulk SQL);
    job ``i`` (0-based) carries ``payloads.payload(i, payload_bytes)`` (0: ``{}``, as before)."""
    if system == "tenure":
        from tenure.core.db import connect
        from tenure.core.repository import JobSpec, Repository
        with connect(dsn) as conn:
            if fast:
                bulk_insert(conn, "tenure_fill_pending", n, payload_bytes)
                conn.execute(bench_queries("tenure")["tenure_vacuum"])
                return
            repo = Repository(conn, "tenure")
            for start, k in chunks(n):
                repo.enqueue_many([JobSpec("noop", p) for p in payloads.batch("tenure", start, k, payload_bytes)])
    elif system == "pgqueuer":
        asyncio.run(_pgqueuer_fill(dsn, n, payload_bytes))
    else:
        asyncio.run(_procrastinate_fill(dsn, n, payload_bytes))


def chunks(n: int, size: int | None = None) -> list[tuple[int, int]]:
    """``(first job index, count)`` of each statement of a fill of ``n`` jobs (``size``: FILL_CHUNK)."""
    size = size or FILL_CHUNK
    return [(start, min(size, n - start)) for start in range(0, n, size)]


def bulk_insert(conn: Any, query: str, n: int, payload_bytes: int, *, first: int = 0) -> None:
    """Run the bulk fixture ``query`` of bench/queries.sql for ``n`` rows: as one statement of
    ``%(n)s`` rows with empty payloads when ``payload_bytes`` is 0 (as before), else its
    ``<query>_payloads`` form once per chunk, with the payloads of jobs ``first`` … ``first + n - 1``
    (``%(payloads)s``, JSON texts; ``%(offset)s``: the chunk's first row's position before it)."""
    q = bench_queries("tenure")
    if payload_bytes <= 0:
        conn.execute(q[query], {"n": n})
        return
    for start, k in chunks(n, BULK_CHUNK):
        texts = payloads.batch("sql", first + start, k, payload_bytes)
        conn.execute(q[f"{query}_payloads"], {"payloads": texts, "offset": start})


async def _pgqueuer_fill(dsn: str, n: int, payload_bytes: int = 0) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    conn = await asyncpg.connect(dsn)
    try:
        q = Queries(AsyncpgDriver(conn))
        for start, k in chunks(n):
            await q.enqueue(["noop"] * k, payloads.batch("pgqueuer", start, k, payload_bytes), [0] * k)
    finally:
        await conn.close()


def procrastinate_connector(dsn: str) -> Any:
    """procrastinate's psycopg connector, serializing task arguments as tenure does (``payloads.dumps``)."""
    import procrastinate
    return procrastinate.PsycopgConnector(conninfo=dsn, json_dumps=payloads.dumps)


async def _procrastinate_fill(dsn: str, n: int, payload_bytes: int = 0) -> None:
    import procrastinate
    app = procrastinate.App(connector=procrastinate_connector(dsn))

    @app.task(name="noop")
    async def noop(**kwargs: Any) -> None:
        return None

    async with app.open_async():
        for start, k in chunks(n):
            await noop.batch_defer_async(*payloads.batch("procrastinate", start, k, payload_bytes))


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
