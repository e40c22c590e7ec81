"""The partition proxy does what the chaos run relies on: pass, drop (reset) and blackhole (hang)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from tenure.chaos.proxy import TcpProxy
from tenure.core.db import connect

pytestmark = pytest.mark.chaos


@pytest.fixture
def proxy(dsn: str) -> Iterator[tuple[TcpProxy, str]]:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    p = TcpProxy(str(info.get("host") or "127.0.0.1"), int(str(info.get("port") or 5432)))
    p.start()
    info.update(host="127.0.0.1", port=str(p.port))
    yield p, psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})
    p.stop()


def _select_one(conn: psycopg.Connection[dict[str, object]]) -> object:
    row = conn.execute("SELECT 1 AS one").fetchone()
    return row["one"] if row else None


def test_drop_resets_connections_and_refuses_new_ones_until_healed(proxy: tuple[TcpProxy, str]) -> None:
    p, via = proxy
    conn = connect(via)
    assert _select_one(conn) == 1
    p.set_mode("drop")
    with pytest.raises(psycopg.OperationalError):
        _select_one(conn)
    with pytest.raises(psycopg.OperationalError):
        connect(via)
    p.set_mode("pass")
    with connect(via) as fresh:
        assert _select_one(fresh) == 1
    assert p.connections_dropped >= 1


def test_blackhole_hangs_statements_until_healed(proxy: tuple[TcpProxy, str]) -> None:
    p, via = proxy
    conn = connect(via)
    assert _select_one(conn) == 1
    p.set_mode("blackhole")
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(_select_one(conn)), daemon=True)
    worker.start()
    worker.join(timeout=1.0)
    assert worker.is_alive() and not result, "a statement crossed the blackhole"
    p.set_mode("pass")
    worker.join(timeout=15)
    assert result == [1]
    conn.close()
