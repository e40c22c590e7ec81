"""The job browser bench's database: millions of mostly finished jobs, seeded once and reused.

``seed(dsn, schema, total)`` migrates the schema, then inserts jobs 1..total in batches with
``INSERT … SELECT generate_series`` (bench/experiments/ui_scale.sql ``seed_jobs``; every row a pure function
of its number), with the secondary indexes dropped during the load and rebuilt after it, then
one audit trail in five (``seed_events``) and ``VACUUM (ANALYZE)``. The schema's
``bench_ui_seed`` row records a finished seed, which later runs reuse as is (later migrations,
e.g. a new index, are applied to it by ``migrate``); an unfinished one is dropped and redone.

Limits: rows are inserted in their final state, so the heap is perfectly ordered by id and
``created_at`` (a live system's updates move row versions; BRIN ranges get wider over time), and
there are no dead tuples.

Used by the experiments ui_scale, ui_index_cost (``ui_queries``) and history_migration; the data
is described in docs/performance.md, "The job browser at 5M jobs (issue 24)".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import psycopg

from bench.console import log
from tenure.core.db import connect
from tenure.core.queries import parse_named_queries, quote_ident
from tenure.core.repository import Repository

BATCH_DEFAULT = 250_000
RUNNING_DEFAULT = 300
BACKLOG_FRACTION = 0.002
"""The newest 0.2% of the jobs are the ready backlog (bench/experiments/ui_scale.sql ``seed_jobs``)."""
DATABASE_DEFAULT = "tenure_ui_scale"


@lru_cache(maxsize=None)
def ui_queries(schema: str) -> dict[str, str]:
    text = Path(__file__).with_name("ui_scale.sql").read_text(encoding="utf-8")
    quoted = quote_ident(schema)
    return {name: sql.replace("{schema}", quoted) for name, (_, sql) in parse_named_queries(text).items()}


@dataclass(frozen=True)
class Seed:
    """What the bench found or made."""

    anchor: datetime
    total: int
    seeded_now: bool
    seconds: float
    counts: dict[str, int]


def ensure_database(admin_dsn: str, name: str) -> str:
    """``name`` on the server of ``admin_dsn`` (created if missing); its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute(ui_queries("public")["database_exists"], {"name": name}).fetchone()
        if not row or not row[0]:
            conn.execute(f"CREATE DATABASE {quote_ident(name)}")
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def _secondary_indexes(conn: psycopg.Connection[Any], schema: str, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(ui_queries(schema)["secondary_indexes"], {"schema_name": schema, "table": table}).fetchall()
    return [(str(r["indexname"]), str(r["indexdef"])) for r in rows]


def seed(dsn: str, schema: str, total: int, *, batch: int = BATCH_DEFAULT, reuse: bool = True) -> Seed:
    """Make sure ``schema`` holds the seeded ``total`` jobs (see the module docstring)."""
    q = ui_queries(schema)
    started = time.monotonic()
    with connect(dsn, application_name="tenure-bench-seed") as conn:
        Repository(conn, schema).migrate()
        conn.execute(q["seed_meta_create"])
        meta = conn.execute(q["seed_meta_get"]).fetchone()
        if reuse and meta and meta["done"] and int(str(meta["total"])) == total:
            log(f"reusing the seed of {total:,} jobs taken at {meta['anchor']} in schema {schema}")
            return Seed(_when(meta["anchor"]), total, False, 0.0, _counts(conn, q))
        if reuse and meta and meta["done"]:
            raise SystemExit(f"schema {schema} holds a seed of {int(str(meta['total'])):,} jobs, not {total:,}: "
                             "pass --reseed to replace it, or another --schema")
        conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
        Repository(conn, schema).migrate()
        conn.execute(q["seed_meta_create"])
        row = conn.execute(q["seed_meta_start"], {"total": total}).fetchone()
        assert row is not None
        anchor = _when(row["anchor"])
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        dropped = {t: _secondary_indexes(conn, schema, t) for t in ("jobs", "job_events")}
        for indexes in dropped.values():
            for name, _ in indexes:
                conn.execute(f"DROP INDEX {quote_ident(schema)}.{quote_ident(name)}")
        lo = 1
        while lo <= total:
            hi = min(total, lo + batch - 1)
            t0 = time.monotonic()
            with conn.transaction():
                conn.execute(q["seed_jobs"], {"lo": lo, "hi": hi, "total": total, "anchor": anchor,
                                              "running": RUNNING_DEFAULT,
                                              "lag": BACKLOG_FRACTION * 30 * 86400,
                                              "ready_after": int(total * (1 - BACKLOG_FRACTION))})
                conn.execute(q["seed_events"], {"lo": lo, "hi": hi})
                conn.execute(q["seed_meta_progress"], {"seeded": hi, "done": False})
            log(f"  seeded jobs {lo:,}..{hi:,} of {total:,} ({time.monotonic() - t0:.1f}s)")
            lo = hi + 1
        for table, indexes in dropped.items():
            for name, definition in indexes:
                t0 = time.monotonic()
                conn.execute(definition)
                log(f"  rebuilt {table}.{name} ({time.monotonic() - t0:.1f}s)")
        conn.execute(q["seed_sequence"], {"table": f"{quote_ident(schema)}.jobs"})
        for table in ("jobs", "job_events"):
            t0 = time.monotonic()
            conn.execute(f"VACUUM (ANALYZE) {quote_ident(schema)}.{table}")
            log(f"  vacuum analyze {table} ({time.monotonic() - t0:.1f}s)")
        conn.execute(q["seed_meta_progress"], {"seeded": total, "done": True})
        return Seed(anchor, total, True, time.monotonic() - started, _counts(conn, q))


def _when(value: object) -> datetime:
    assert isinstance(value, datetime)
    return value


def _counts(conn: psycopg.Connection[Any], q: dict[str, str]) -> dict[str, int]:
    return {str(r["status"]): int(str(r["n"])) for r in conn.execute(q["seed_counts"]).fetchall()}
