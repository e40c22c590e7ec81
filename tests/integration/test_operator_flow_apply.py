"""The operator's application of spec.flow against a real PostgreSQL (issue 38 item 7): one
transaction through tenure.flow, level-based and idempotent (a second pass changes nothing and
writes no flow_changes row), key settings owned by the queue's JobQueue, a rate limit deleted
only by the JobQueue that set it last, and the first error rolling the whole pass back."""

from __future__ import annotations

from typing import Any

import pytest

from tenure import flow
from tenure.core.db import Connection
from tenure.core.repository import Repository
from tenure.operator import figures as fg
from tenure.operator import spec as s

pytestmark = pytest.mark.integration

OWNER = "operator:shop/mail"
OTHER = "operator:shop/billing"


def _flow(flow_spec: dict[str, Any]) -> s.FlowSpec:
    parsed = s.parse_spec({"queue": "emails", "image": "i", "app": "a:b",
                           "database": {"secretRef": {"name": "db"}}, "flow": flow_spec}).flow
    assert parsed is not None
    return parsed


def _changes(conn: Connection, schema: str) -> list[dict[str, Any]]:
    return flow.flow_changes(conn, schema=schema, limit=1000)


def _keys(conn: Connection, schema: str) -> dict[str, tuple[int | None, float]]:
    (queue,) = [q for q in flow.flow_status(conn, schema=schema, keys=1000) if q.queue == "emails"]
    return {k["flow_key"]: (k["running_limit"] if k["own_limit"] else None, k["weight"]) for k in queue.keys}


def _rates(conn: Connection, schema: str) -> dict[str, tuple[float, int, bool, str]]:
    return {r["name"]: (r["per_second"], r["burst"], r["per_key"], r["updated_by"])
            for r in flow.rate_status(conn, schema=schema)}


def test_apply_is_level_based_and_a_second_pass_writes_nothing(dsn: str, schema: str, conn: Connection) -> None:
    # Set by hand beforehand: a key limit and a weight of the queue, and two rate limits.
    flow.set_key_running(conn, "emails", "cli", 7, schema=schema, requested_by="cli:me")
    flow.set_key_weight(conn, "emails", "cli-weight", 5, schema=schema, requested_by="cli:me")
    flow.set_rate_limit(conn, "smtp", 10, schema=schema, requested_by="cli:me")
    flow.set_rate_limit(conn, "billing-api", 3, schema=schema, requested_by=OTHER)
    before = len(_changes(conn, schema))
    wanted = _flow({"perKeyRunning": 3,
                    "keys": [{"key": "a", "running": 1}, {"key": "big", "weight": 4},
                             {"key": "both", "running": 2, "weight": 0.5}],
                    "rateLimits": [{"name": "smtp", "perSecond": 10},  # as the CLI set it: not written
                                   {"name": "api", "perSecond": 50, "burst": 5, "perKey": True}]})
    done = fg.apply_flow(dsn, schema, "emails", wanted, OWNER)
    assert done.plan.summary() == ("perKeyRunning=3; 2 key limit(s) set; 1 key limit(s) removed; "
                                   "2 key weight(s) set; 1 key weight(s) removed; 1 rate limit(s) set")
    assert _keys(conn, schema) == {"a": (1, 1.0), "big": (None, 4.0), "both": (2, 0.5)}
    assert _rates(conn, schema) == {"smtp": (10.0, 10, False, "cli:me"), "api": (50.0, 5, True, OWNER),
                                    "billing-api": (3.0, 3, False, OTHER)}
    written = len(_changes(conn, schema))
    assert written > before
    assert {c["changed_by"] for c in _changes(conn, schema)[:written - before]} == {OWNER}
    assert done.limits == fg.read_flow_limits(Repository(conn, schema), "emails", wanted, OWNER)

    again = fg.apply_flow(dsn, schema, "emails", wanted, OWNER)
    assert again.plan.empty and again.limits == done.limits
    assert len(_changes(conn, schema)) == written  # no audit row: nothing was written

    # A smaller spec: "both" keeps its weight without its limit, "big" loses its weight, "api"
    # (ours) is deleted; "smtp" (the CLI's, never written by us) and the other JobQueue's stay.
    smaller = _flow({"perKeyRunning": 3, "keys": [{"key": "a", "running": 1}, {"key": "both", "weight": 0.5}]})
    done = fg.apply_flow(dsn, schema, "emails", smaller, OWNER)
    assert done.plan.summary() == "1 key limit(s) removed; 1 key weight(s) removed; 1 rate limit(s) deleted"
    assert _keys(conn, schema) == {"a": (1, 1.0), "both": (None, 0.5)}
    assert set(_rates(conn, schema)) == {"smtp", "billing-api"}
    written = len(_changes(conn, schema))
    assert fg.apply_flow(dsn, schema, "emails", smaller, OWNER).plan.empty
    assert len(_changes(conn, schema)) == written


def test_a_listed_rate_limit_changed_by_hand_is_put_back_and_becomes_the_jobqueues(
        dsn: str, schema: str, conn: Connection) -> None:
    wanted = _flow({"rateLimits": [{"name": "smtp", "perSecond": 10}]})
    fg.apply_flow(dsn, schema, "emails", wanted, OWNER)
    flow.set_rate_limit(conn, "smtp", 99, schema=schema, requested_by="cli:me")
    done = fg.apply_flow(dsn, schema, "emails", wanted, OWNER)
    assert done.plan.set_rates == (("smtp", (10.0, 10, False)),)
    assert _rates(conn, schema)["smtp"] == (10.0, 10, False, OWNER)
    # Changed by hand and then dropped from the spec: someone else set it last, so it stays.
    flow.set_rate_limit(conn, "smtp", 20, schema=schema, requested_by="cli:me")
    assert fg.apply_flow(dsn, schema, "emails", s.FlowSpec(), OWNER).plan.empty
    assert set(_rates(conn, schema)) == {"smtp"}


def test_the_first_error_rolls_the_whole_pass_back(dsn: str, schema: str, conn: Connection) -> None:
    # A spec that skipped validation: the rate limit is written first, then the bad weight fails.
    bad = s.FlowSpec(per_key_running=2, keys=(s.FlowKeySpec("a", 1, 0.0),),
                     rate_limits=(s.RateLimitSpec("smtp", 10.0),))
    with pytest.raises(fg.StatsUnavailable) as failed:
        fg.apply_flow(dsn, schema, "emails", bad, OWNER)
    assert failed.value.reason == "InvalidFlowSpec"
    assert "weight" in str(failed.value) and "\n" not in str(failed.value)
    assert _rates(conn, schema) == {} and _changes(conn, schema) == []
    assert flow.flow_status(conn, schema=schema) == []


def test_a_schema_without_the_rate_tables_is_reported(dsn: str, schema: str, conn: Connection) -> None:
    conn.execute(f'DROP TABLE "{schema}".rate_buckets, "{schema}".rate_limits')
    with pytest.raises(fg.StatsUnavailable) as failed:
        fg.apply_flow(dsn, schema, "emails", _flow({"perKeyRunning": 1}), OWNER)
    assert failed.value.reason == "FlowSchemaMissing"
