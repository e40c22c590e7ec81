"""The SQL exporter (queue-level metrics) against a real PostgreSQL, scraped over HTTP.

The collector's output must equal ``repo.queue_stats()`` (the same query `tenure stats` runs),
and the endpoint must keep answering, with the error counter rising, while the database is
unreachable. Unreachability is real: the exporter talks to PostgreSQL through a TCP relay that
the test cuts.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tenure.chaos.proxy import TcpProxy
from tenure.core.backoff import RetryPolicy
from tenure.core.repository import JobSpec, Repository
from tenure.core.stats import QueueStats
from tenure.observability.exporter import QueueCollector
from tenure.observability.http import serve
from tenure.reaper.reaper import Reaper, ReaperConfig
from tenure.worker.metrics import db_reconnects_counter

pytestmark = pytest.mark.integration

AGE_FIELDS = ("oldest_ready_age_seconds", "oldest_running_age_seconds", "heartbeat_lag_max_seconds",
              "heartbeat_lag_p95_seconds", "oldest_unblocked_wait_seconds")
GAUGES = {
    "running_expired": "tenure_queue_running_expired_leases",
    "oldest_ready_age_seconds": "tenure_queue_oldest_ready_age_seconds",
    "oldest_running_age_seconds": "tenure_queue_oldest_running_age_seconds",
    "heartbeat_lag_max_seconds": "tenure_queue_heartbeat_lag_max_seconds",
    "heartbeat_lag_p95_seconds": "tenure_queue_heartbeat_lag_p95_seconds",
    "failed": "tenure_queue_dead_letter_jobs",
    "redelivered": "tenure_queue_redelivered_jobs",
    "live_workers": "tenure_queue_live_workers",
    "paused": "tenure_queue_paused",
    "max_running": "tenure_queue_max_running",
    "keys_at_limit": "tenure_flow_keys_at_limit",
    "oldest_unblocked_wait_seconds": "tenure_flow_oldest_unblocked_wait_seconds",
    "oldest_unblocked_job_id": "tenure_flow_oldest_unblocked_job_id",
}


@pytest.fixture
def relay(dsn: str) -> Iterator[TcpProxy]:
    """A TCP proxy to PostgreSQL that the test can cut (``drop``: every connection aborted, new
    ones refused) and heal (``pass``)."""
    proxy = TcpProxy.to(dsn)
    yield proxy
    proxy.stop()


def _stop(server: ThreadingHTTPServer, collector: QueueCollector) -> None:
    server.shutdown()
    server.server_close()
    collector.close()


def _scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _stats_from_metrics(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> dict[str, dict[str, float]]:
    """Rebuild QueueStats-like dicts per queue from the scraped samples."""
    queues: dict[str, dict[str, float]] = {}
    for labels, value in metrics.get("tenure_queue_jobs", {}).items():
        d = dict(labels)
        queues.setdefault(d["queue"], {})[d["state"]] = value
    for field, name in GAUGES.items():
        for labels, value in metrics.get(name, {}).items():
            queues.setdefault(dict(labels)["queue"], {})[field] = value
    for labels, value in metrics.get("tenure_queue_reaped_jobs_total", {}).items():
        queues.setdefault(dict(labels)["queue"], {})["reaped_total"] = value
    for labels, value in metrics.get("tenure_flow_blocked_jobs", {}).items():
        d = dict(labels)
        queues.setdefault(d["queue"], {})[f"blocked_{d['reason']}"] = value
    return queues


# Figures `tenure stats` shows but the exporter does not serve: in flight is the sum of the
# workers' own tenure_jobs_in_flight gauges on the dashboards.
NOT_EXPORTED = ("queue", "in_flight")


def _expected(stats: list[QueueStats]) -> dict[str, dict[str, float]]:
    return {s.queue: {k: float(v) for k, v in s.__dict__.items() if k not in NOT_EXPORTED and v is not None}
            for s in stats}


def _populate(dsn: str, schema: str, repo: Repository) -> None:
    """Two queues in every state: ready, scheduled, running (live and expired), completed, failed, reaped."""
    repo.worker_register("w-live", host="h", pid=1, queues=["emails"], concurrency=4, heartbeat_seconds=30,
                         version="t")
    for i in range(5):
        repo.enqueue("send", {"i": i}, queue="emails")
    repo.enqueue("send", queue="emails", delay=3600)
    done = repo.claim("w-live", ["emails"], 2, 60)
    repo.complete_many("w-live", [(j.id, j.lock_token) for j in done])
    [failing] = repo.claim("w-live", ["emails"], 1, 60)
    assert repo.retry("w-live", failing.id, failing.lock_token, delay=0, error="boom", error_code="timeout")
    [dead] = repo.claim("w-live", ["emails"], 1, 60)
    assert repo.dead_letter("w-live", dead.id, dead.lock_token, error="bad", error_code="permanent")
    repo.claim("w-live", ["emails"], 1, 60)  # one running, heartbeating worker
    cancelled = repo.enqueue("send", queue="emails").id
    assert repo.cancel([cancelled], "test")
    repo.queue_control_set("emails", requested_by="test", max_running=10, set_limit=True)
    repo.queue_control_set("paused-q", requested_by="test", paused=True)

    for i in range(3):
        repo.enqueue("resize", {"i": i}, queue="images")
    repo.claim("w-gone", ["images"], 2, 0.1)  # owner never heartbeats: leases expire
    time.sleep(0.3)
    reaper = Reaper(ReaperConfig(grace=0.0, batch=1, retry=RetryPolicy(3600, 3600, 5)), dsn=dsn, schema=schema,
                    rng=random.Random(2))
    assert len(reaper.run_once()) == 1  # one reaped, one still expired

    # A flow limit: key "a" has 1 running of 1, its 2 other ready jobs are blocked, "b" runs.
    repo.enqueue_many([JobSpec("t", queue="tenants", flow_key="a") for _ in range(3)]
                      + [JobSpec("t", queue="tenants", flow_key="b")])
    repo.flow_per_key_set("tenants", 1, requested_by="test")
    assert sorted(str(j.flow_key) for j in repo.claim("w-live", ["tenants"], 10, 60)) == ["a", "b"]

    # Rate limits (rows written by SQL: the counts are tested apart from the rate-limit API): "api"
    # is empty, "hold" is paused by a handler, "per" is per key (its fewest tokens: k2's 0.25).
    s = f'"{schema}"'
    repo.conn.execute(f"INSERT INTO {s}.rate_limits (name, per_second, burst, per_key) VALUES "
                      "('api', 0.001, 2, false), ('hold', 10, 10, false), ('per', 0.001, 4, true)")
    repo.conn.execute(f"INSERT INTO {s}.rate_buckets (limit_name, flow_key, tokens, paused_until) VALUES "
                      "('api', '', 0, NULL), ('hold', '', 10, now() + interval '1 hour'), "
                      "('per', 'k1', 1.5, NULL), ('per', 'k2', 0.25, NULL)")
    ids = [repo.enqueue("call", queue="rated").id for _ in range(3)]
    repo.conn.execute(f"UPDATE {s}.jobs SET rate_limit = r FROM unnest(%(ids)s::bigint[], %(rates)s::text[]) AS "
                      "u(id, r) WHERE jobs.id = u.id", {"ids": ids, "rates": ["api", "hold", None]})


def test_scrape_equals_queue_stats(dsn: str, schema: str, repo: Repository) -> None:
    _populate(dsn, schema, repo)
    collector = QueueCollector(dsn, schema, min_interval=0, completed_interval=0)
    registry = CollectorRegistry()
    registry.register(collector)
    server = serve(0, registry, host="127.0.0.1")
    try:
        before = repo.queue_stats()
        samples = _scrape(server.server_address[1])
        scraped = _stats_from_metrics(samples)
        after = repo.queue_stats()
    finally:
        _stop(server, collector)
    assert set(scraped) == {"emails", "images", "paused-q", "tenants", "rated"}
    blocked = samples["tenure_flow_blocked_jobs"]
    assert blocked[(("queue", "tenants"), ("reason", "concurrency"))] == 2
    assert {r: blocked[(("queue", "rated"), ("reason", r))] for r in ("concurrency", "backpressure", "rate")} == \
        {"concurrency": 0, "backpressure": 1, "rate": 1}
    assert {r: blocked[(("queue", "emails"), ("reason", r))] for r in ("concurrency", "backpressure", "rate")} == \
        {"concurrency": 0, "backpressure": 0, "rate": 0}  # every queue, every reason: 0 when none
    tokens, paused = samples["tenure_rate_limit_tokens"], samples["tenure_rate_limit_paused"]
    assert tokens[(("limit", "api"),)] < 0.01 and tokens[(("limit", "hold"),)] == 0  # paused: none to take
    assert 0.25 <= tokens[(("limit", "per"),)] < 0.26
    assert {k[0][1]: v for k, v in paused.items()} == {"api": 0, "hold": 1, "per": 0}
    # The oldest job nothing holds back: on flow queues only (keys or rate limits).
    waits = samples["tenure_flow_oldest_unblocked_wait_seconds"]
    assert set(waits) == {(("queue", "tenants"),), (("queue", "rated"),)}
    assert samples["tenure_flow_oldest_unblocked_job_id"][(("queue", "tenants"),)] == 0  # every key at its limit
    exp_before, exp_after = _expected(before), _expected(after)
    for queue, values in exp_before.items():
        got = scraped[queue]
        for field, value in values.items():
            if field in AGE_FIELDS:  # grow with the clock between the three reads
                assert value - 0.01 <= got[field] <= exp_after[queue][field] + 0.01, (queue, field)
            else:
                assert got[field] == value == exp_after[queue][field], (queue, field)
    # The workload really reached every state the exporter reports.
    emails, images, tenants = exp_before["emails"], exp_before["images"], exp_before["tenants"]
    assert (tenants["ready"], tenants["blocked"], tenants["running"], tenants["keys_at_limit"]) == (0, 2, 2, 2)
    assert (exp_before["rated"]["ready"], exp_before["rated"]["blocked"]) == (1, 2)
    # Jobs without a key are one key, taken first in, first out: the runnable one waits behind them.
    assert "oldest_unblocked_job_id" not in exp_before["rated"]
    assert samples["tenure_flow_oldest_unblocked_job_id"][(("queue", "rated"),)] == 0
    assert (emails["ready"], emails["scheduled"], emails["running"], emails["completed"], emails["failed"]) == \
        (1, 1, 1, 2, 1)
    assert emails["redelivered"] == 1 and emails["live_workers"] == 1 and emails["oldest_running_age_seconds"] > 0
    assert (images["running"], images["running_expired"], images["reaped_total"]) == (1, 1, 1)
    assert images["heartbeat_lag_max_seconds"] >= 0.3


def test_endpoint_answers_and_errors_rise_while_the_database_is_unreachable(
        dsn: str, schema: str, repo: Repository, relay: TcpProxy) -> None:
    repo.enqueue("t", queue="q1")
    collector = QueueCollector(relay.dsn_for(dsn), schema, min_interval=0, completed_interval=0)
    registry = CollectorRegistry()
    registry.register(collector)
    server = serve(0, registry, host="127.0.0.1")
    port = server.server_address[1]
    try:
        ok = _scrape(port)
        assert ok["tenure_queue_jobs"][(("queue", "q1"), ("state", "ready"))] == 1
        assert ok["tenure_exporter_errors_total"][()] == 0
        last_success = ok["tenure_exporter_last_success_timestamp_seconds"][()]
        assert last_success > time.time() - 60

        relay.set_mode("drop")
        for expected_errors in (1, 2):
            down = _scrape(port)  # still HTTP 200
            assert down["tenure_exporter_errors_total"][()] == expected_errors
            assert "tenure_queue_jobs" not in down  # no stale queue series
            assert down["tenure_exporter_last_success_timestamp_seconds"][()] == last_success
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            assert resp.status == 200

        relay.set_mode("pass")
        deadline = time.monotonic() + 15
        while True:
            back = _scrape(port)
            if "tenure_queue_jobs" in back or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert back["tenure_queue_jobs"][(("queue", "q1"), ("state", "ready"))] == 1
        assert back["tenure_exporter_errors_total"][()] >= 2
        assert back["tenure_exporter_last_success_timestamp_seconds"][()] > last_success
    finally:
        _stop(server, collector)


def test_exporter_serves_reaper_figures_from_the_database(dsn: str, schema: str, repo: Repository) -> None:
    """A reaper with no metrics port (the CronJob's `--once` pod) still shows up: reaps by
    outcome and owner status from job_events, and its last cycle from reaper_cycles."""
    collector = QueueCollector(dsn, schema, min_interval=0.0)
    registry = CollectorRegistry()
    registry.register(collector)
    server = serve(0, registry)
    port = server.server_address[1]
    try:
        before = _scrape(port)
        assert "tenure_reaper_cycles_total" not in before  # no reaper has run yet
        assert before.get("tenure_queue_reaps_total", {}) == {}
        repo.enqueue("t", queue="mail", max_attempts=1)
        repo.enqueue("t", queue="mail", max_attempts=5)
        repo.claim("gone-worker", ["mail"], 2, 0.05)
        time.sleep(0.2)
        reaper = Reaper(ReaperConfig(grace=0.0, retry=RetryPolicy(base_delay=10, max_delay=20)),
                        dsn=dsn, schema=schema, rng=random.Random(1))
        assert len(reaper.run_once()) == 2
        reaper.run_once()  # a quiet cycle counts too
        after = _scrape(port)
    finally:
        _stop(server, collector)
    reaps = {dict(labels)["outcome"]: (dict(labels)["owner_status"], value)
             for labels, value in after["tenure_queue_reaps_total"].items()}
    assert reaps == {"requeued": ("unknown", 1.0), "dead_lettered": ("unknown", 1.0)}
    assert after["tenure_reaper_cycles_total"][()] == 2.0
    assert after["tenure_reaper_last_cycle_reaped_jobs"][()] == 0.0
    assert after["tenure_reaper_last_cycle_duration_seconds"][()] >= 0.0
    assert abs(after["tenure_reaper_last_cycle_timestamp_seconds"][()] - time.time()) < 60


def test_exporter_reports_schema_skew_and_serves_a_newer_schema(
        dsn: str, schema: str, repo: Repository, conn: Any) -> None:
    """Issue 22, item 6: a schema one version ahead of the exporter's code (another image
    migrated it) is not refused: the queue figures are still served and the skew is shown."""
    from tenure.core.queries import migrations

    repo.enqueue("t", queue="q1")
    collector = QueueCollector(dsn, schema, min_interval=0, completed_interval=0)
    registry = CollectorRegistry()
    registry.register(collector)
    server = serve(0, registry, host="127.0.0.1")
    port = server.server_address[1]
    try:
        assert _scrape(port)["tenure_exporter_schema_skew"][()] == 0
        conn.execute(f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES (%s, %s)',
                     (len(migrations()) + 1, "from_newer_code"))
        ahead = _scrape(port)
        assert ahead["tenure_exporter_schema_skew"][()] == 1
        assert ahead["tenure_queue_jobs"][(("queue", "q1"), ("state", "ready"))] == 1
        assert ahead["tenure_exporter_errors_total"][()] == 0
    finally:
        _stop(server, collector)


def _terminate(repo: Repository, application_name: str) -> int:
    """End every backend whose application_name starts with ``application_name``; how many."""
    row = repo.conn.execute("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
                            "WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                            (application_name + "%",)).fetchone()
    return int(row["n"]) if row else 0


def test_exporter_and_reaper_reconnects_are_counted(dsn: str, schema: str, repo: Repository) -> None:
    """Issue 22 item 10: a dropped connection is counted in tenure_db_reconnects_total, by role,
    as the worker's are, and the service recovers on a fresh connection."""
    registry = CollectorRegistry()
    reconnects = db_reconnects_counter(registry)
    collector = QueueCollector(dsn, schema, min_interval=0, completed_interval=0,
                               on_reconnect=reconnects.labels("exporter").inc)
    try:
        assert collector.read() is not None
        assert _terminate(repo, "tenure-exporter") == 1
        assert collector.read() is None  # the dropped connection: counted, then re-opened
        assert registry.get_sample_value("tenure_db_reconnects_total", {"role": "exporter"}) == 1
        assert collector.read() is not None
    finally:
        collector.close()

    reaper = Reaper(ReaperConfig(grace=0.0, interval=0.1), dsn=dsn, schema=schema)
    stop = threading.Event()
    cycles: list[float] = []
    thread = threading.Thread(target=reaper.run_forever,
                              args=(stop, lambda _r, s: cycles.append(s), reconnects.labels("reaper").inc))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not cycles and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cycles, "the reaper loop never completed a cycle"
        while _terminate(repo, "tenure-reaper") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        while registry.get_sample_value("tenure_db_reconnects_total", {"role": "reaper"}) != 1:
            assert time.monotonic() < deadline, "the reaper's reconnect was not counted"
            time.sleep(0.05)
        after = len(cycles)
        while len(cycles) == after:
            assert time.monotonic() < deadline, "the reaper did not recover after its connection was ended"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
