"""`tenure ui`'s JSON API through a real `tenure ui` process on a real database: filters, keyset
paging, counts, the job document, queue controls, bulk actions on exactly the confirmed set,
the DLQ replay, read-only, basic auth and roles, the trusted proxy header, CSRF, both prefix
modes, the event stream, and bad input as one JSON message (issue 24)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import bcrypt
import pytest

from support.processes import run_cli
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository
from ui_server import StrippingProxy, call, start_ui, ui_process

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]


@pytest.fixture
def ui(cli_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        yield url


def _fail(repo: Repository, ids: list[int], code: str = "boom") -> None:
    """Put jobs in the DLQ as a worker's dead-letter would (status failed, error code)."""
    with repo.conn.cursor() as cur:
        cur.execute(f'UPDATE "{repo.schema}".jobs SET status = \'failed\', failed_at = now(), last_failed_at = now(), '
                    "attempt_count = 1, last_error_code = %s WHERE id = ANY(%s)", (code, ids))


def _ids(url: str, query: str = "") -> list[int]:
    status, body, _ = call(f"{url}/api/v1/jobs?limit=500&{query}")
    assert status == 200, body
    return [j["id"] for j in body["jobs"]]


def test_every_filter_pages_and_counts(repo: Repository, ui: str) -> None:
    a = [repo.enqueue("resize", {"invoice_id": i, "customer": {"tier": "gold" if i % 2 else "free"}},
                      queue="images", priority=i * 10, idempotency_key=f"resize-{i}").id for i in range(5)]
    b = [repo.enqueue("email", {"invoice_id": 100 + i}, queue="mail").id for i in range(4)]
    repo.cancel([b[0], b[1]], "test")
    assert _ids(ui) == sorted(a + b, reverse=True)
    assert _ids(ui, "queue=mail") == sorted(b, reverse=True)
    assert _ids(ui, "task=resize") == sorted(a, reverse=True)
    assert _ids(ui, "status=cancelled") == [b[1], b[0]]
    assert _ids(ui, "status=pending&queue=mail") == [b[3], b[2]]
    assert _ids(ui, "priority_min=20&priority_max=30") == [a[3], a[2]]
    assert _ids(ui, f"id={a[1]}") == [a[1]]
    assert _ids(ui, "idempotency_key=resize-4") == [a[4]]
    assert _ids(ui, "payload=" + quote(json.dumps({"customer": {"tier": "gold"}}))) == [a[3], a[1]]
    assert _ids(ui, "payload=" + quote('{"invoice_id": 101}')) == [b[1]]
    assert _ids(ui, "payload=" + quote('{"invoice_id": 999}')) == []
    assert _ids(ui, "created_since=1h") == sorted(a + b, reverse=True)
    assert _ids(ui, "created_since=2000-01-01T00:00:00Z&task=email") == sorted(b, reverse=True)
    assert _ids(ui, "created_since=2999-01-01") == []
    assert _ids(ui, "finished_since=10m") == [b[1], b[0]]
    # Keyset paging: pages of 2 walk every job once, newest first.
    seen: list[int] = []
    cursor = ""
    while True:
        status, page, _ = call(f"{ui}/api/v1/jobs?limit=2&cursor={cursor}")
        assert status == 200 and len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert seen == sorted(a + b, reverse=True)
    status, counted, _ = call(f"{ui}/api/v1/jobs/count?queue=images")
    assert (status, counted) == (200, {"count": 5, "estimated": False})


def test_the_flow_key_filters_lists_counts_bulk_actions_and_shows(repo: Repository, ui: str) -> None:
    acme = [repo.enqueue("bill", {"n": i}, flow_key="tenant:acme").id for i in range(3)]
    other = repo.enqueue("bill", {"n": 9}, flow_key="tenant:acme-2").id
    plain = repo.enqueue("bill", {"n": 10}).id
    assert _ids(ui, "flow_key=tenant%3Aacme") == sorted(acme, reverse=True)
    assert _ids(ui, "flow_key=tenant%3Aacme&status=pending&task=bill") == sorted(acme, reverse=True)
    assert _ids(ui, "flow_key=tenant") == []
    status, page, _ = call(f"{ui}/api/v1/jobs?flow_key=tenant%3Aacme-2")
    assert status == 200 and [(j["id"], j["flow_key"]) for j in page["jobs"]] == [(other, "tenant:acme-2")]
    assert call(f"{ui}/api/v1/jobs/count?flow_key=tenant%3Aacme")[1] == {"count": 3, "estimated": False}
    status, cancelled, _ = call(f"{ui}/api/v1/jobs/bulk", "POST",
                                {"action": "cancel", "filter": {"flow_key": "tenant:acme"}})
    assert status == 200 and (cancelled["matched"], cancelled["changed"]) == (3, 3)
    assert {i: repo.get_job(i)["status"] for i in acme + [other, plain]} == {  # type: ignore[index]
        **{i: "cancelled" for i in acme}, other: "pending", plain: "pending"}
    status, document, _ = call(f"{ui}/api/v1/jobs/{other}")
    assert status == 200 and document["job"]["flow_key"] == "tenant:acme-2"
    assert call(f"{ui}/api/v1/jobs/{plain}")[1]["job"]["flow_key"] is None


def test_the_queues_count_jobs_held_back_by_a_flow_limit_as_blocked_not_ready(repo: Repository, ui: str) -> None:
    repo.enqueue_many([JobSpec("bill", queue="tenants", flow_key="tenant:acme") for _ in range(4)]
                      + [JobSpec("bill", queue="tenants", flow_key="tenant:b")])
    repo.flow_per_key_set("tenants", 1, requested_by="test")
    assert len(repo.claim("w", ["tenants"], 10, 60)) == 2  # one per key
    status, body, _ = call(f"{ui}/api/v1/queues")
    (tenants,) = [q for q in body["queues"] if q["name"] == "tenants"]
    assert status == 200 and (tenants["counts"]["ready"], tenants["counts"]["blocked"]) == (0, 3)


def test_a_large_match_is_counted_as_a_labelled_estimate(repo: Repository, ui: str) -> None:
    repo.enqueue_many([JobSpec("bulk", {"n": i}) for i in range(10_050)])
    with repo.conn.cursor() as cur:
        cur.execute(f'ANALYZE "{repo.schema}".jobs')
    status, counted, _ = call(f"{ui}/api/v1/jobs/count?task=bulk")
    assert status == 200 and counted["estimated"] is True and counted["count"] > 10_000, counted
    assert call(f"{ui}/api/v1/jobs/count?task=none")[1] == {"count": 0, "estimated": False}


@pytest.mark.parametrize(("path", "method", "body", "message"), [
    ("jobs?status=bogus", "GET", None, "unknown status"),
    ("jobs?payload=%7Bnot", "GET", None, "JSON object"),
    ("jobs?payload=%5B1%5D", "GET", None, "JSON object"),
    ("jobs?limit=0", "GET", None, "limit"),
    ("jobs?cursor=abc", "GET", None, "cursor"),
    ("jobs?priority_min=5&priority_max=1", "GET", None, "priority_min"),
    ("jobs?colour=red", "GET", None, "unknown filter"),
    ("jobs?created_since=yesterday", "GET", None, "ISO-8601"),
    ("jobs?flow_key=", "GET", None, "flow_key: flow key must not be empty"),
    ("jobs/count?flow_key=" + "x" * 201, "GET", None, "flow_key: flow key must be at most 200 bytes"),
    ("jobs/bulk", "POST", {"action": "cancel", "filter": {"flow_key": ""}}, "flow_key"),
    ("dlq/replay", "POST", {"filter": {"flow_key": "é" * 101}}, "at most 200 bytes"),
    ("jobs/abc", "GET", None, "invalid job id"),
    ("jobs/bulk", "POST", {"action": "explode", "filter": {}}, "action"),
    ("jobs/bulk", "POST", {"action": "retry"}, "filter"),
    ("jobs/bulk", "POST", {"action": "retry", "filter": {"status": 3}}, "status"),
    ("queues/q/limit", "POST", {"max_running": "ten"}, "max_running"),
    ("queues/q/limit", "POST", {"max_running": -1}, ">= 0"),
    ("dlq/replay", "POST", {"filter": {}, "rate": 0}, "rate"),
    ("series?window=2h", "GET", None, "unknown window '2h' (one of 1h, 24h, 7d)"),
    ("series?queue=nowhere", "GET", None, "no such queue 'nowhere'"),
    ("series?queue=%0A", "GET", None, "invalid queue name"),
    ("series?window=1h&bucket=5m", "GET", None, "unknown parameter 'bucket'"),
    ("charts?window=1d", "GET", None, "unknown window"),
])
def test_bad_input_is_one_json_message(ui: str, path: str, method: str, body: Any, message: str) -> None:
    status, answer, headers = call(f"{ui}/api/v1/{path}", method, body)
    assert status == 400, answer
    assert headers["content-type"].startswith("application/json")
    assert list(answer) == ["error"] and message in answer["error"] and "Traceback" not in answer["error"]


def test_broken_json_unknown_routes_and_missing_jobs(ui: str) -> None:
    status, answer, _ = call(f"{ui}/api/v1/jobs/bulk", "POST", raw=b"{nope", headers={"Content-Type": "application/json"})
    assert (status, answer) == (400, {"error": "the body is not valid JSON"})
    status, answer, _ = call(f"{ui}/api/v1/nothing-here")
    assert status == 404 and "no such API endpoint" in answer["error"]
    status, answer, _ = call(f"{ui}/api/v1/jobs/987654")
    assert (status, answer) == (404, {"error": "no job 987654"})
    status, answer, _ = call(f"{ui}/api/v1/jobs/987654/cancel", "POST", {})
    assert status == 400 and "no job 987654" in answer["error"]


def test_the_job_document_is_what_jobs_show_json_prints(repo: Repository, ui: str, cli_env: dict[str, str]) -> None:
    job_id = repo.enqueue("charge", {"invoice_id": 7, "card_number": "4111"}).id
    repo.cancel([job_id], "test")
    shown = run_cli(cli_env, "jobs", "show", str(job_id), "--json")
    assert shown.returncode == 0, shown.stderr
    status, document, _ = call(f"{ui}/api/v1/jobs/{job_id}")
    assert status == 200
    cli = json.loads(shown.stdout)
    for volatile in ("db_now",):
        cli["job"].pop(volatile)
        document["job"].pop(volatile)
    assert document == json.loads(json.dumps(cli))
    assert document["job"]["payload"] == {"invoice_id": 7, "card_number": "***"}, "redacted as the DLQ redacts"
    assert [e["event"] for e in document["events"]] == ["cancelled"]


def test_queue_controls_are_audited_with_the_user(conn: Any, schema: str, ui: str) -> None:
    from tenure import control
    assert call(f"{ui}/api/v1/queues/mail/pause", "POST", {})[1] == {"queue": "mail", "paused": True, "changed": True}
    assert call(f"{ui}/api/v1/queues/mail/pause", "POST")[1]["changed"] is False
    assert call(f"{ui}/api/v1/queues/mail/limit", "POST", {"max_running": 3})[1]["max_running"] == 3
    row = next(q for q in control.list_queues(conn, schema=schema) if q["queue"] == "mail")
    assert row["paused"] is True and row["max_running"] == 3 and row["updated_by"] == "ui:anonymous"
    status, body, _ = call(f"{ui}/api/v1/queues")
    mail = next(q for q in body["queues"] if q["name"] == "mail")
    assert status == 200 and mail["paused"] is True and mail["max_running"] == 3
    call(f"{ui}/api/v1/queues/mail/resume", "POST", {})
    assert next(q for q in control.list_queues(conn, schema=schema) if q["queue"] == "mail")["paused"] is False


def test_bulk_retry_changes_exactly_the_confirmed_set(repo: Repository, ui: str) -> None:
    wanted = [repo.enqueue("resize", {"n": i}).id for i in range(5)]
    other = [repo.enqueue("email", {"n": i}).id for i in range(3)]
    pending = [repo.enqueue("resize", {"n": 10 + i}).id for i in range(2)]
    repo.cancel(wanted + other, "test")
    flt = {"task": "resize"}
    status, preview, _ = call(f"{ui}/api/v1/jobs/bulk", "POST", {"action": "retry", "filter": flt, "dry_run": True})
    assert status == 200 and (preview["matched"], preview["changed"]) == (5, 0)
    late = repo.enqueue("resize", {"n": 99}).id  # after the preview: not in the confirmed set
    repo.cancel([late], "test")
    status, answer, _ = call(f"{ui}/api/v1/jobs/bulk", "POST",
                             {"action": "retry", "filter": flt, "expected": 4, "newest_id": preview["newest_id"]})
    assert status == 409 and "nothing was changed" in answer["error"]
    assert {repo.get_job(i)["status"] for i in wanted} == {"cancelled"}  # type: ignore[index]
    status, done, _ = call(f"{ui}/api/v1/jobs/bulk", "POST",
                           {"action": "retry", "filter": flt, "expected": 5, "newest_id": preview["newest_id"]})
    assert status == 200 and (done["matched"], done["changed"]) == (5, 5)
    assert {repo.get_job(i)["status"] for i in wanted + pending} == {"pending"}  # type: ignore[index]
    assert {repo.get_job(i)["status"] for i in other + [late]} == {"cancelled"}  # type: ignore[index]
    events = repo.job_events(wanted[0])
    assert events[-1]["event"] == "retried_by_request" and "ui:anonymous" in (events[-1]["reason"] or "")
    status, cancelled, _ = call(f"{ui}/api/v1/jobs/bulk", "POST", {"action": "cancel", "ids": other + pending})
    assert status == 200 and (cancelled["matched"], cancelled["changed"]) == (2, 2)


def test_dlq_replay_previews_then_replays_the_matching_dead_letters(repo: Repository, ui: str) -> None:
    dead = [repo.enqueue("charge", {"n": i}, queue="billing").id for i in range(4)]
    kept = repo.enqueue("charge", {"n": 9}, queue="other").id
    _fail(repo, dead + [kept])
    body = {"filter": {"queue": "billing"}, "rate": 200}
    status, preview, _ = call(f"{ui}/api/v1/dlq/replay", "POST", {**body, "dry_run": True})
    assert status == 200 and (preview["matched"], preview["replayed"]) == (4, 4)
    assert {repo.get_job(i)["status"] for i in dead} == {"failed"}  # type: ignore[index]
    status, replayed, _ = call(f"{ui}/api/v1/dlq/replay", "POST", body)
    assert status == 200 and sorted(replayed["replayed_ids"]) == dead
    assert {repo.get_job(i)["status"] for i in dead} == {"pending"}  # type: ignore[index]
    assert repo.get_job(kept)["status"] == "failed"  # type: ignore[index]
    assert call(f"{ui}/api/v1/dlq/replay", "POST", body)[1]["matched"] == 0, "a second replay moves nothing"


MUTATIONS = [("queues/q/pause", {}), ("queues/q/resume", {}), ("queues/q/limit", {"max_running": 1}),
             ("jobs/1/cancel", {}), ("jobs/1/retry", {}), ("jobs/bulk", {"action": "cancel", "filter": {}}),
             ("dlq/replay", {"filter": {}})]


def test_read_only_renders_no_action_and_refuses_every_mutation(repo: Repository, cli_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    job_id = repo.enqueue("email", {}).id
    with ui_process(cli_env, tmp_path / "ui.log", "--read-only") as url:
        for path, body in MUTATIONS:
            status, answer, _ = call(f"{url}/api/v1/{path}", "POST", body)
            assert status == 403 and "read-only" in answer["error"], (path, answer)
        assert repo.get_job(job_id)["status"] == "pending"  # type: ignore[index]
        assert call(f"{url}/api/v1/session")[1]["read_only"] is True
        status, html, _ = call(f"{url}/jobs")
        assert status == 200 and 'data-can-write="false"' in html and "data-action" not in html


def test_the_series_add_up_and_a_viewer_reads_them(repo: Repository, cli_env: dict[str, str], tmp_path: Path) -> None:
    """GET series: one point per bucket whose completed counts add up to the jobs completed in
    [from, to); GET charts: the four SVG charts; both readable under --read-only."""
    for queue, n in (("mail", 3), ("images", 2)):
        for i in range(n):
            repo.enqueue("work", {"i": i}, queue=queue)
        claimed = repo.claim("w", [queue], n, 30)
        repo.complete_many("w", [(j.id, j.lock_token) for j in claimed])
    with ui_process(cli_env, tmp_path / "ui.log", "--read-only") as url:
        for window, step, n in (("1h", 60, 60), ("24h", 900, 96), ("7d", 3600, 168)):
            status, doc, _ = call(f"{url}/api/v1/series?window={window}")
            assert status == 200, doc
            assert (doc["window"], doc["bucket_seconds"], doc["buckets"], len(doc["points"])) == (window, step, n, n)
            assert sum(p["completed"] for p in doc["points"]) == doc["totals"]["completed"] == 5
        status, doc, _ = call(f"{url}/api/v1/series?queue=mail")
        assert status == 200 and doc["queue"] == "mail" and doc["totals"]["completed"] == 3
        assert set(doc["points"][-1]) == {"t", "completed", "failed_attempts", "dead_lettered", "wait_jobs", "wait_p50",
                                          "wait_p95", "ready", "blocked", "running"}
        status, doc, _ = call(f"{url}/api/v1/charts?queue=images&window=24h")
        assert status == 200 and sorted(doc["charts"]) == ["depth", "failures", "throughput", "wait"]
        assert 'data-chart="throughput"' in doc["charts"]["throughput"] and 'data-total="2"' in doc["charts"]["throughput"]
        status, html, _ = call(f"{url}/queues/images")
        assert status == 200 and 'data-page="queue"' in html and 'data-queue="images"' in html


def _users_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "users"
    path.write_text("# tenure ui users\n" + "\n".join(lines) + "\n")
    return path


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def test_users_file_basic_auth_and_roles(repo: Repository, cli_env: dict[str, str], tmp_path: Path) -> None:
    users = _users_file(tmp_path, [f"ada:{_hash('s3cret')}:admin", f"vic:{_hash('look')}:viewer"])
    job_id = repo.enqueue("email", {}).id
    with ui_process(cli_env, tmp_path / "ui.log", "--users", str(users)) as url:
        status, answer, headers = call(f"{url}/api/v1/queues")
        assert status == 401 and headers["www-authenticate"].startswith("Basic") and "error" in answer
        assert call(f"{url}/api/v1/queues", user=("ada", "wrong"))[0] == 401
        assert call(f"{url}/", user=("nobody", "x"))[0] == 401
        assert call(f"{url}/api/v1/queues", user=("vic", "look"))[0] == 200
        status, answer, _ = call(f"{url}/api/v1/jobs/{job_id}/cancel", "POST", {}, user=("vic", "look"))
        assert status == 403 and repo.get_job(job_id)["status"] == "pending"  # type: ignore[index]
        status, answer, _ = call(f"{url}/api/v1/jobs/{job_id}/cancel", "POST", {}, user=("ada", "s3cret"))
        assert status == 200 and answer["cancelled"] is True
    assert "ui:ada" in (repo.job_events(job_id)[-1]["reason"] or "")


@pytest.mark.parametrize(("content", "message"), [
    ("ada:notahash:admin", "bcrypt"), ("ada:$2b$04$" + "a" * 53 + ":root", "role"), ("just-a-name", "USER:BCRYPT_HASH:ROLE"),
])
def test_a_bad_users_file_exits_2_with_one_line(cli_env: dict[str, str], tmp_path: Path, content: str,
                                               message: str) -> None:
    users = _users_file(tmp_path, [content])
    r = run_cli(cli_env, "ui", "--bind", "127.0.0.1:0", "--users", str(users))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr


def test_trusted_user_header_takes_the_role_from_the_users_file(repo: Repository, cli_env: dict[str, str],
                                                                tmp_path: Path) -> None:
    users = _users_file(tmp_path, ["alice:-:admin"])
    job_id = repo.enqueue("email", {}).id
    with ui_process(cli_env, tmp_path / "ui.log", "--trusted-user-header", "X-Forwarded-User",
                    "--users", str(users)) as url:
        assert call(f"{url}/api/v1/queues")[0] == 401
        assert call(f"{url}/api/v1/session", headers={"X-Forwarded-User": "bob"})[1]["role"] == "viewer"
        assert call(f"{url}/api/v1/jobs/{job_id}/cancel", "POST", {}, headers={"X-Forwarded-User": "bob"})[0] == 403
        status, _, _ = call(f"{url}/api/v1/jobs/{job_id}/cancel", "POST", {}, headers={"X-Forwarded-User": "alice"})
        assert status == 200
    assert "ui:alice" in (repo.job_events(job_id)[-1]["reason"] or "")


def test_browser_mutations_need_the_same_origin_and_the_csrf_token(repo: Repository, ui: str) -> None:
    job_id = repo.enqueue("email", {}).id
    host = urlsplit(ui).netloc
    token = call(f"{ui}/api/v1/session")[1]["csrf_token"]
    url = f"{ui}/api/v1/jobs/{job_id}/cancel"
    assert call(url, "POST", {}, headers={"Origin": "https://evil.example", "X-CSRF-Token": token})[0] == 403
    assert call(url, "POST", {}, headers={"Origin": f"http://{host}", "Sec-Fetch-Site": "cross-site",
                                          "X-CSRF-Token": token})[0] == 403
    assert call(url, "POST", {}, headers={"Origin": f"http://{host}"})[0] == 403, "no token"
    assert call(url, "POST", raw=b"a=1", headers={"Content-Type": "application/x-www-form-urlencoded"})[0] == 403
    assert repo.get_job(job_id)["status"] == "pending"  # type: ignore[index]
    status, _, _ = call(url, "POST", {}, headers={"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin",
                                                  "X-CSRF-Token": token})
    assert status == 200 and repo.get_job(job_id)["status"] == "cancelled"  # type: ignore[index]


def test_both_prefix_modes_keep_every_link_under_the_prefix(cli_env: dict[str, str], tmp_path: Path) -> None:
    with ui_process(cli_env, tmp_path / "prefixed.log", "--prefix", "/tenure") as url:
        assert url.endswith("/tenure")
        root = url.removesuffix("/tenure")
        assert call(f"{url}/api/v1/queues")[0] == 200
        assert call(f"{root}/api/v1/queues")[0] == 404
        status, _, headers = call(root + "/tenure")
        assert status == 308 and headers["location"] == "/tenure/"
        status, html, _ = call(f"{url}/jobs")
        assert status == 200 and 'data-prefix="/tenure"' in html
        assert all(h.startswith("/tenure/") for h in _links(html)), _links(html)
        assert call(f"{url}/api/v1/openapi.json")[1]["servers"] == [{"url": "/tenure/api/v1"}]
    with ui_process(cli_env, tmp_path / "plain.log") as url, StrippingProxy(url, "/tenure") as proxy:
        status, html, _ = call(f"{proxy.url}/dlq")
        assert status == 200 and all(h.startswith("/tenure/") for h in _links(html))
        assert call(f"{proxy.url}/api/v1/queues")[0] == 200
        assert call(f"{proxy.url}/static/app.js")[0] == 200


def _links(html: str) -> list[str]:
    import re
    return re.findall(r'(?:href|src)="([^"]+)"', html.replace('href="data:,"', ""))


def test_the_event_stream_pushes_a_new_job(ui: str, cli_env: dict[str, str]) -> None:
    parts = urlsplit(ui)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    conn.request("GET", f"{parts.path}/api/v1/events")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type", "").startswith("text/event-stream")
    assert b"event: hello" in resp.readline() + resp.readline() + resp.readline()
    time.sleep(0.6)  # the feed has read where it starts
    enqueued = run_cli(cli_env, "enqueue", "email", "--payload", "{}")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = int(enqueued.stdout.strip().split()[-1])
    deadline = time.monotonic() + 10
    change = None
    while time.monotonic() < deadline and change is None:
        line = resp.readline().decode()
        if line.startswith("data: ") and '"change"' in line:
            change = json.loads(line[6:])
    conn.close()
    assert change is not None and change["new_jobs"][0] <= job_id <= change["new_jobs"][1], change


def test_periodic_and_workers_are_listed(repo: Repository, ui: str) -> None:
    from datetime import datetime, timezone
    repo.periodic_init(name="nightly", task="report", queue="default", cron="0 3 * * *", timezone="Europe/Paris",
                       slot=datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc))
    repo.worker_register("w-1", host="h", pid=1, queues=["default"], concurrency=2, heartbeat_seconds=1,
                         version="t", lease_seconds=10)
    schedules = call(f"{ui}/api/v1/periodic")[1]["schedules"]
    assert [s["name"] for s in schedules] == ["nightly"]
    assert schedules[0]["next_slot"].startswith("2026-12-02T03:00:00+01:00")
    workers = call(f"{ui}/api/v1/workers")[1]["workers"]
    assert [w["id"] for w in workers] == ["w-1"] and workers[0]["held_jobs"] == []


def test_a_schema_not_migrated_exits_2(dsn: str, tmp_path: Path) -> None:
    from support.processes import tenure_env
    env = tenure_env(dsn, "never_migrated")
    r = run_cli(env, "ui", "--bind", "127.0.0.1:0")
    assert r.returncode == 2 and "tenure migrate" in r.stderr, r.stderr
    with connect(dsn) as c:
        c.execute('DROP SCHEMA IF EXISTS "never_migrated" CASCADE')


def test_the_server_binds_to_loopback_by_default() -> None:
    from tenure.ui.config import BIND_DEFAULT
    assert BIND_DEFAULT.startswith("127.0.0.1:")


__all__ = ["start_ui"]
