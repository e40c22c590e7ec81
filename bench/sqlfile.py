"""Loads bench/queries.sql (the benchmark's fixture and measurement SQL, kept out of Python)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tenure.core.queries import parse_named_queries, quote_ident

FLOOR_SCRIPT = Path(__file__).with_name("floor.sql")


@lru_cache(maxsize=None)
def bench_queries(schema: str = "tenure") -> dict[str, str]:
    text = Path(__file__).with_name("queries.sql").read_text(encoding="utf-8")
    quoted = quote_ident(schema)
    return {name: sql.replace("{schema}", quoted) for name, (_, sql) in parse_named_queries(text).items()}
