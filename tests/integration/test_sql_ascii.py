"""A database created with the C locale (SQL_ASCII, as Debian's postgres image makes by default).

Found on the kind cluster: psycopg returns text columns as bytes on a SQL_ASCII connection, so the
operator saw queue ``b'emails'``, never matched ``emails`` and never scaled up. Every tenure
connection now asks for UTF-8 on the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tenure.core.db import connect
from tenure.core.repository import Repository
from tenure.core.stats import fetch_queue_stats


@pytest.fixture
def sql_ascii_dsn(dsn: str) -> Iterator[str]:
    name = f"ascii_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
                      " TEMPLATE template0")
    yield psycopg.conninfo.make_conninfo(dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_text_is_text_on_a_sql_ascii_database(sql_ascii_dsn: str) -> None:
    with psycopg.connect(sql_ascii_dsn) as raw:  # the trap: a plain connection gets bytes
        assert raw.execute("SHOW server_encoding").fetchone() == (b"SQL_ASCII",)
        assert raw.execute("SELECT 'x'::text").fetchone() == (b"x",)
    with connect(sql_ascii_dsn) as conn:
        repo = Repository(conn, "tenure")
        repo.migrate()
        repo.enqueue("send_invoice_email", {"to": "zoë@example.com"}, queue="emails")
        [job] = repo.claim("w1", ["emails"], 10, 30)
        assert job.task == "send_invoice_email"
        assert job.payload == {"to": "zoë@example.com"}
    [row] = [r for r in fetch_queue_stats(sql_ascii_dsn, "tenure", "emails") if r.queue == "emails"]
    assert row.running == 1


def test_payload_text_is_utf8_and_a_lone_surrogate_is_refused() -> None:
    from tenure.core.errors import PayloadError
    from tenure.core.repository import encode_payload

    assert encode_payload({"to": "zoë"}) == '{"to":"zoë"}'
    assert encode_payload({"c": "\x01"}) == '{"c":"\\u0001"}'  # control characters stay escaped
    with pytest.raises(PayloadError, match="surrogate"):
        encode_payload({"bad": "\ud800"})
    with pytest.raises(PayloadError, match="NUL"):
        encode_payload({"nul": "a\x00b"})


def test_the_sqs_and_ui_pools_read_text_as_text(sql_ascii_dsn: str) -> None:
    """Found on the kind cluster again: `tenure sqs` and `tenure ui` open their connections from a
    ``psycopg_pool.ConnectionPool``, not :func:`connect`; without its options the SQS server read
    a queue name back as bytes, sent it as bytea (``text = bytea`` on every receive) and stored
    names such as ``\\x6b696e64``."""
    from tenure.sqs.service import SqsConfig, SqsService
    from tenure.ui.config import UiConfig
    from tenure.ui.service import UiService

    for service in (SqsService(SqsConfig(dsn=sql_ascii_dsn, schema="tenure")),
                    UiService(UiConfig(dsn=sql_ascii_dsn, schema="tenure", read_only=True))):
        service.pool.open(wait=True, timeout=30)
        try:
            with service.pool.connection() as conn:
                assert conn.execute("SELECT 'kind-components'::text").fetchone() == ("kind-components",)
        finally:
            service.pool.close()
