"""Loads the named queries of ``sql/queries/*.sql`` (house style: all SQL lives in .sql files).

One file per repository area (``sql/queries/lease.sql`` holds the queries
:mod:`tenure.core.repository.lease` runs, and so on), each opening with a comment that says what
the area is. All files are loaded together: a name is unique across them, and a fragment
(``*_filter``) defined in one file may be spliced into a query of another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable

_NAME = re.compile(r"^-- name: (\w+)\s*$")


def _read(name: str) -> str:
    return resources.files("tenure.core").joinpath("sql", name).read_text(encoding="utf-8")


def query_files() -> list[Traversable]:
    """The area files of ``sql/queries/``, by name."""
    directory = resources.files("tenure.core").joinpath("sql", "queries")
    return sorted((f for f in directory.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)


def parse_named_queries(text: str) -> dict[str, tuple[str, str]]:
    """Split a queries file into ``{name: (description, sql)}``.

    Each block starts with ``-- name: x`` followed by a one-line ``-- description``.
    """
    queries: dict[str, tuple[str, str]] = {}
    name: str | None = None
    description = ""
    body: list[str] = []

    def flush() -> None:
        if name is not None:
            sql = "\n".join(body).strip().rstrip(";")
            if not description or not sql:
                raise ValueError(f"query {name!r} needs a description line and a body")
            queries[name] = (description, sql)

    for line in text.splitlines():
        match = _NAME.match(line)
        if match:
            flush()
            if match.group(1) in queries:
                raise ValueError(f"duplicate query name {match.group(1)!r}")
            name, description, body = match.group(1), "", []
        elif name is not None and not description and line.startswith("-- "):
            description = line[3:].strip()
        elif name is not None:
            body.append(line)
    flush()
    return queries


def parse_query_files(files: Iterable[Traversable]) -> dict[str, tuple[str, str, str]]:
    """All the queries of ``files`` as ``{name: (description, sql, file name)}``; a name defined in
    two files is an error that names both."""
    queries: dict[str, tuple[str, str, str]] = {}
    for file in files:
        for name, (description, sql) in parse_named_queries(file.read_text(encoding="utf-8")).items():
            if name in queries:
                raise ValueError(f"duplicate query name {name!r}: in {queries[name][2]} and in {file.name}")
            queries[name] = (description, sql, file.name)
    return queries


FRAGMENT_SUFFIX = "_filter"
"""A block named ``*_filter`` is a fragment (a WHERE condition), spliced into the queries that
say ``{its_name}``, so several queries share one filter without copies of it."""


@lru_cache(maxsize=None)
def named_queries(schema: str) -> dict[str, str]:
    """Queries with ``{schema}`` replaced by the quoted schema identifier, ``{channel}`` by
    the quoted wake-up channel (LISTEN takes no parameters) and ``{name_filter}`` by that
    fragment's text in parentheses."""
    quoted = quote_ident(schema)
    channel = '"' + notify_channel(schema) + '"'
    parsed = {name: (description, sql) for name, (description, sql, _) in parse_query_files(query_files()).items()}
    fragments = {f"{{{name}}}": sql for name, (_, sql) in parsed.items() if name.endswith(FRAGMENT_SUFFIX)}

    def expand(sql: str) -> str:
        for marker, fragment in fragments.items():
            sql = sql.replace(marker, f"({fragment})")
        return sql.replace("{schema}", quoted).replace("{channel}", channel)

    return {name: expand(sql) for name, (_, sql) in parsed.items()}


def schema_sql() -> str:
    return _read("schema.sql")


def migrations() -> list[tuple[int, str, str]]:
    """``[(version, name, sql)]`` in version order, from ``sql/migrations/NNNN_name.sql``."""
    found = []
    for entry in resources.files("tenure.core").joinpath("sql", "migrations").iterdir():
        match = re.match(r"^(\d{4})_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    for expected, (version, _, _) in enumerate(found, start=1):
        if version != expected:
            raise RuntimeError(f"migration numbering gap: expected {expected:04d}, found {version:04d}")
    return found


_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def quote_ident(name: str) -> str:
    """Quote a schema name; only plain lower-case identifiers are accepted."""
    if not _IDENT.match(name):
        from tenure.core.errors import ConfigError
        raise ConfigError(f"invalid schema name {name!r}: use lower-case letters, digits and _")
    return f'"{name}"'


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel on which enqueues wake workers of this schema."""
    quote_ident(schema)
    return f"{schema}_jobs"
