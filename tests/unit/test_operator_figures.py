"""DSN resolution in the JobQueue's namespace (tenure.operator.figures)."""

from __future__ import annotations

import pytest

from tenure.operator import figures as fg


@pytest.mark.parametrize(("dsn", "host"), [
    ("postgresql://tenure:tenure@postgres:5432/tenure", "postgres.tenure-demo.svc"),
    ("host=db port=5432 dbname=x", "db.tenure-demo.svc"),
    ("postgresql://u@pg-0.pg,pg-1.pg/x", "pg-0.pg.tenure-demo.svc,pg-1.pg.tenure-demo.svc"),
    ("postgresql://u@pg-rw.other.svc/x", "pg-rw.other.svc"),
    ("postgresql://u@pg.example.com/x", "pg.example.com"),
    ("postgresql://u@10.0.0.7/x", "10.0.0.7"),
    ("postgresql://u@[::1]/x", "::1"),
    ("postgresql://u@localhost/x", "localhost"),
    ("host=/var/run/postgresql dbname=x", "/var/run/postgresql"),
])
def test_dsn_host_resolves_as_in_the_jobqueue_namespace(dsn: str, host: str) -> None:
    """The operator reads the queue from its own namespace: a host the JobQueue's pods would
    find through their DNS search path gets the JobQueue's namespace; names that resolve only
    as given are left alone (found on kind: 'postgres' did not resolve from the operator)."""
    from psycopg.conninfo import conninfo_to_dict

    in_cluster = {"postgres.tenure-demo.svc", "db.tenure-demo.svc", "pg-0.pg.tenure-demo.svc",
                  "pg-1.pg.tenure-demo.svc"}
    asked: list[str] = []

    def resolves(name: str) -> bool:
        asked.append(name)
        return name in in_cluster

    out = fg.dsn_in_namespace(dsn, "tenure-demo", resolves)
    assert conninfo_to_dict(out)["host"] == host
    assert {k: v for k, v in conninfo_to_dict(out).items() if k != "host"} == {
        k: v for k, v in conninfo_to_dict(dsn).items() if k != "host"}
    assert not [a for a in asked if a.startswith(("10.", "::1", "localhost", "/", "pg-rw."))]
    assert fg.dsn_in_namespace("not a dsn", "ns", resolves) == "not a dsn"
    assert fg.dsn_in_namespace("dbname=x", "ns", resolves) == "dbname=x"


def test_a_host_that_does_not_resolve_in_the_namespace_is_kept() -> None:
    dsn = "postgresql://u:p@db.internal/q"
    assert fg.dsn_in_namespace(dsn, "shop", lambda name: False) == dsn
