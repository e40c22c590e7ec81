"""The Flow page's JSON API (issue 38, item 7) through a real `tenure ui` process: GET flow lists
each queue's keys and every rate limit; an admin's changes go through tenure.flow and are audited
as ui:USER; a viewer gets 403 and bad input one JSON message (400, or 404 for an unknown rate
limit), and neither changes anything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

import tenure.flow
from tenure.core.repository import JobSpec, Repository
from ui_server import call, ui_process

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]


@pytest.fixture
def ui(cli_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        yield url


def _settings(repo: Repository) -> Any:
    """Everything a change could touch: the queues' and keys' settings, the rate limits, the audit."""
    queues = [(q.queue, q.per_key_running, [(k["flow_key"], k["running_limit"], k.get("weight")) for k in q.keys])
              for q in tenure.flow.flow_status(repo.conn, schema=repo.schema)]
    rates = [(r["name"], r["per_second"], r["burst"], r["per_key"])
             for r in tenure.flow.rate_status(repo.conn, schema=repo.schema)]
    return queues, rates, tenure.flow.flow_changes(repo.conn, schema=repo.schema, limit=1000)


def test_the_flow_api_shows_keys_and_rate_limits_and_audits_every_change(repo: Repository, ui: str) -> None:
    repo.enqueue_many([JobSpec("bill", queue="tenants", flow_key="tenant:acme") for _ in range(3)]
                      + [JobSpec("bill", queue="tenants", flow_key="tenant:b")])
    api = f"{ui}/api/v1/flow"
    status, answer, _ = call(f"{api}/queues/tenants/per-key-running", "POST", {"per_key_running": 1})
    assert (status, answer) == (200, {"queue": "tenants", "per_key_running": 1, "was": None}), answer
    status, answer, _ = call(f"{api}/queues/tenants/key", "POST", {"key": "tenant:b", "running": 4, "weight": 2.5})
    assert status == 200 and (answer["queue"], answer["key"]) == ("tenants", "tenant:b"), answer
    status, answer, _ = call(f"{api}/rate-limits/smtp", "POST", {"per_second": 5, "burst": 10, "per_key": False})
    assert status == 200 and (answer["name"], answer["burst"]) == ("smtp", 10), answer
    assert call(f"{api}/rate-limits/per-tenant", "POST", {"per_second": 0.5, "per_key": True})[0] == 200

    status, doc, _ = call(api)
    assert status == 200 and set(doc) == {"queues", "rate_limits", "changes", "keys_shown"}, doc
    (tenants,) = doc["queues"]
    assert (tenants["queue"], tenants["per_key_running"], tenants["keys_total"], tenants["blocked"]) == ("tenants", 1, 2, 2)
    keys = {k["flow_key"]: k for k in tenants["keys"]}
    assert (keys["tenant:acme"]["running_limit"], keys["tenant:acme"]["ready"], keys["tenant:acme"]["blocked"]) == (1, 3, 2)
    assert (keys["tenant:b"]["running_limit"], keys["tenant:b"]["own_limit"], keys["tenant:b"]["weight"]) == (4, True, 2.5)
    rates = {r["name"]: r for r in doc["rate_limits"]}
    assert (rates["smtp"]["per_second"], rates["smtp"]["burst"], rates["smtp"]["per_key"]) == (5, 10, False)
    assert (rates["per-tenant"]["burst"], rates["per-tenant"]["per_key"]) == (1, True), "burst: ceil(0.5), at least 1"
    assert {c["changed_by"] for c in doc["changes"]} == {"ui:anonymous"}
    assert {c["setting"] for c in doc["changes"]} >= {"per_key_running", "running", "weight"}
    assert any(c["rate_limit"] == "smtp" and c["queue_name"] is None for c in doc["changes"]), doc["changes"]
    assert [k["flow_key"] for k in call(f"{api}?keys=1")[1]["queues"][0]["keys"]] == ["tenant:acme"], "the busiest"

    # Removing: the key's weight (1), the queue's limit (0), a rate limit; a second delete is 404.
    assert call(f"{api}/queues/tenants/key", "POST", {"key": "tenant:b", "weight": 1})[0] == 200
    assert call(f"{api}/queues/tenants/per-key-running", "POST", {"per_key_running": 0})[1]["per_key_running"] is None
    assert call(f"{api}/rate-limits/smtp/delete", "POST")[1] == {"name": "smtp", "deleted": True}
    assert call(f"{api}/rate-limits/smtp/delete", "POST")[:2] == (404, {"error": "no rate limit 'smtp'"})
    queues, rates_after, changes = _settings(repo)
    assert [r[0] for r in rates_after] == ["per-tenant"]
    assert changes[0]["rate_limit"] == "smtp" and changes[0]["changed_by"] == "ui:anonymous"


MUTATIONS = [("queues/tenants/per-key-running", {"per_key_running": 2}),
             ("queues/tenants/key", {"key": "tenant:acme", "weight": 3}),
             ("rate-limits/smtp", {"per_second": 50}), ("rate-limits/smtp/delete", None)]


def test_a_viewer_reads_the_flow_page_and_every_change_gets_403(repo: Repository, cli_env: dict[str, str],
                                                                tmp_path: Path) -> None:
    repo.enqueue_many([JobSpec("bill", queue="tenants", flow_key="tenant:acme") for _ in range(2)])
    tenure.flow.set_per_key_running(repo.conn, "tenants", 1, schema=repo.schema, requested_by="test")
    tenure.flow.set_rate_limit(repo.conn, "smtp", 5, schema=repo.schema, requested_by="test")
    before = _settings(repo)
    users = tmp_path / "users"
    hashed = bcrypt.hashpw(b"look", bcrypt.gensalt(rounds=4)).decode()
    users.write_text(f"vic:{hashed}:viewer\nada:{hashed}:admin\n")
    viewer: tuple[str, str] | None
    for args, viewer in ((("--users", str(users)), ("vic", "look")), (("--read-only",), None)):
        with ui_process(cli_env, tmp_path / "ui.log", *args) as url:
            status, doc, _ = call(f"{url}/api/v1/flow", user=viewer)
            assert status == 200 and [q["queue"] for q in doc["queues"]] == ["tenants"]
            for path, body in MUTATIONS:
                status, answer, _ = call(f"{url}/api/v1/flow/{path}", "POST", body, user=viewer)
                assert status == 403 and "read-only" in answer["error"], (args, path, answer)
            status, html, _ = call(f"{url}/flow", user=viewer)
            assert status == 200 and 'data-page="flow"' in html and 'data-can-write="false"' in html
    assert _settings(repo) == before


@pytest.mark.parametrize(("path", "body", "message"), [
    ("queues/tenants/per-key-running", {"per_key_running": -1}, "per-key running limit"),
    ("queues/tenants/per-key-running", {"per_key_running": "2"}, "per_key_running must be a whole number"),
    ("queues/tenants/per-key-running", {"per_key_running": 2_000_000}, "1000000"),
    ("queues/tenants/per-key-running", {}, "per_key_running"),
    ("queues/tenants/per-key-running", {"per_key_running": 2, "colour": 1}, "unknown field 'colour'"),
    ("queues/%20/per-key-running", {"per_key_running": 2}, "invalid queue name"),
    ("queues/tenants/key", {"key": "tenant:acme"}, 'give "running"'),
    ("queues/tenants/key", {"key": "", "weight": 2}, "flow key"),
    ("queues/tenants/key", {"weight": 2}, "flow key"),
    ("queues/tenants/key", {"key": "x" * 201, "weight": 2}, "200 bytes"),
    ("queues/tenants/key", {"key": "tenant:acme", "weight": 0}, "weight"),
    ("queues/tenants/key", {"key": "tenant:acme", "weight": 1001}, "weight"),
    ("queues/tenants/key", {"key": "tenant:acme", "weight": "2"}, "weight must be a number"),
    ("queues/tenants/key", {"key": "tenant:acme", "weight": True}, "weight must be a number"),
    ("queues/tenants/key", {"key": "tenant:acme", "running": 1.5}, "running must be a whole number"),
    ("queues/tenants/key", {"key": "tenant:acme", "running": 5, "weight": -2}, "weight"),
    ("rate-limits/bad%20name", {"per_second": 5}, "bad name"),
    ("rate-limits/smtp", {}, "per_second must be a number"),
    ("rate-limits/smtp", {"per_second": 0}, "per"),
    ("rate-limits/smtp", {"per_second": 2e6}, "per"),
    ("rate-limits/smtp", {"per_second": "5"}, "per_second must be a number"),
    ("rate-limits/smtp", {"per_second": 5, "burst": 0}, "burst"),
    ("rate-limits/smtp", {"per_second": 5, "burst": 1.5}, "burst must be a whole number"),
    ("rate-limits/smtp", {"per_second": 5, "per_key": "yes"}, "per_key must be true or false"),
    ("rate-limits/smtp/delete", {"now": True}, "unknown field 'now'"),
])
def test_bad_input_is_one_json_message_and_changes_nothing(repo: Repository, ui: str, path: str, body: Any,
                                                           message: str) -> None:
    repo.enqueue_many([JobSpec("bill", queue="tenants", flow_key="tenant:acme") for _ in range(2)])
    tenure.flow.set_per_key_running(repo.conn, "tenants", 1, schema=repo.schema, requested_by="test")
    tenure.flow.set_rate_limit(repo.conn, "smtp", 5, schema=repo.schema, requested_by="test")
    before = _settings(repo)
    status, answer, headers = call(f"{ui}/api/v1/flow/{path}", "POST", body)
    assert status == 400 and headers["content-type"].startswith("application/json"), answer
    assert list(answer) == ["error"] and message in answer["error"] and "Traceback" not in answer["error"], answer
    assert len(answer["error"].splitlines()) == 1
    assert _settings(repo) == before


@pytest.mark.parametrize(("query", "message"), [("keys=0", "keys must be"), ("keys=x", "keys must be"),
                                                 ("keys=501", "keys must be"), ("colour=red", "unknown parameter")])
def test_a_bad_query_of_the_flow_status_is_400(ui: str, query: str, message: str) -> None:
    status, answer, _ = call(f"{ui}/api/v1/flow?{query}")
    assert status == 400 and list(answer) == ["error"] and message in answer["error"], answer


def test_a_value_json_allows_but_no_limit_does_is_refused(repo: Repository, ui: str) -> None:
    """NaN and Infinity parse as JSON numbers in Python: the checks refuse them."""
    before = _settings(repo)
    for path, raw in (("rate-limits/smtp", b'{"per_second": NaN}'), ("rate-limits/smtp", b'{"per_second": Infinity}'),
                      ("queues/tenants/key", b'{"key": "k", "weight": Infinity}'),
                      ("queues/tenants/key", b'{"key": "k", "weight": NaN}')):
        status, answer, _ = call(f"{ui}/api/v1/flow/{path}", "POST", raw=raw, headers={"Content-Type": "application/json"})
        assert status == 400 and list(answer) == ["error"], (raw, answer)
    assert _settings(repo) == before
