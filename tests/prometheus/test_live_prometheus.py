"""Every dashboard panel and every alert expression, evaluated by a real Prometheus that scrapes a
real worker, a real reaper, the real SQL exporter and a real `tenure sqs` (driven by boto3) while
a workload runs.

The workload reaches every state the dashboards draw: completions, handler timeouts that
retry, permanent failures (DLQ), enqueue-time and effect dedup, long runners (in flight,
heartbeat lag), and a worker frozen with SIGSTOP whose job is reaped and whose late
completion is rejected (reaped jobs, leases lost, stale writes). SQS requests (a send, a
receive, a delete, a refused GetQueueUrl) fill the overview's SQS API row.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from livestack import Prometheus, free_port, http_get, wait_for
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository
from tenure.observability.alerts import ALERT_NAMES, AlertThresholds, render_rules

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
FAST = AlertThresholds().with_for_seconds(1, evaluation_interval_seconds=1)
SUBSTITUTIONS = {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "5m", "${queue}": ".*", "$queue": ".*"}

# Panel queries allowed to return nothing with this workload, and why.
EXPECTED_EMPTY = {
    "tenure_jobs_released_total": "no worker is drained with jobs in flight while it is still being scraped",
    "tenure_jobs_deferred_total": "deferral needs two attempts inside one effect at once; these effects take microseconds",
    'outcome="dead_lettered"': "the reaper only requeues here: the frozen worker's job had attempts left",
    "tenure_queue_max_running": "a gauge only for queues with a global running limit; none is set here",
    "tenure_jobs_cancelled_while_running_total": "this workload cancels nothing (job control is tested in "
                                                 "tests/integration/test_worker_job_control.py)",
    "tenure_job_timeouts_total": "no task here has a timeout",
    "tenure_periodic_enqueued_total": "this app declares no periodic schedule",
    "tenure_periodic_slots_skipped_total": "this app declares no periodic schedule",
}
# Queries that must return a real (finite) number for the `live` queue.
KEY_QUERIES = {
    "jobs by state": 'max by (queue, state) (tenure_queue_jobs{queue=~".*"})',
    "claims": 'sum by (queue) (rate(tenure_jobs_claimed_total{queue=~".*"}[1m]))',
    "completions": 'sum by (queue) (rate(tenure_jobs_completed_total{queue=~".*"}[1m]))',
    "runtime p99": 'histogram_quantile(0.99, sum by (queue, le) '
                   '(rate(tenure_job_runtime_seconds_bucket{queue=~".*"}[1m])))',
    "heartbeat lag": 'max by (queue) (tenure_queue_heartbeat_lag_max_seconds{queue=~".*"})',
    "in flight": 'sum by (queue) (tenure_jobs_in_flight{queue=~".*"})',
}


def _panel_queries() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []

    def walk(dashboard: str, panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    out.append((dashboard, panel.get("title", "?"), target["expr"]))
            walk(dashboard, panel.get("panels") or [])

    for path in sorted((ROOT / "dashboards").glob("*.json")):
        walk(path.stem, json.loads(path.read_text(encoding="utf-8")).get("panels", []))
    return out


def substitute(expr: str) -> str:
    for var, value in SUBSTITUTIONS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted Grafana variable in {expr!r}"
    return expr


def _values(result: dict[str, Any]) -> list[float]:
    return [float(r["value"][1]) for r in result["data"]["result"]]


def _scrape(port: int) -> dict[str, dict[str, float]]:
    code, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    queues: dict[str, dict[str, float]] = {}
    names = {"tenure_queue_running_expired_leases": "running_expired",
             "tenure_queue_oldest_ready_age_seconds": "oldest_ready_age_seconds",
             "tenure_queue_oldest_running_age_seconds": "oldest_running_age_seconds",
             "tenure_queue_heartbeat_lag_max_seconds": "heartbeat_lag_max_seconds",
             "tenure_queue_heartbeat_lag_p95_seconds": "heartbeat_lag_p95_seconds",
             "tenure_queue_dead_letter_jobs": "failed", "tenure_queue_redelivered_jobs": "redelivered",
             "tenure_queue_live_workers": "live_workers", "tenure_queue_reaped_jobs_total": "reaped_total",
             "tenure_flow_oldest_unblocked_wait_seconds": "oldest_unblocked_wait_seconds"}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "tenure_queue_jobs":
                queues.setdefault(s.labels["queue"], {})[s.labels["state"]] = s.value
            elif s.name in names:
                queues.setdefault(s.labels["queue"], {})[names[s.name]] = s.value
    return queues


def _stats_json(env: dict[str, str]) -> dict[str, dict[str, float]]:
    out = subprocess.run([sys.executable, "-m", "tenure.cli", "stats", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return {row.pop("queue"): {k: float(v) for k, v in row.items() if isinstance(v, (int, float))}
            for row in json.loads(out.stdout)}


def _sqs_traffic(port: int) -> None:
    """Requests by action with outcomes ok and QueueDoesNotExist, and latencies, for the SQS row."""
    import boto3
    from botocore.exceptions import ClientError

    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                       aws_access_key_id="live", aws_secret_access_key="live")
    url = sqs.create_queue(QueueName="sqs-live")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    assert got
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                    for i, m in enumerate(got)])
    try:
        sqs.get_queue_url(QueueName="no-such-queue")
        raise AssertionError("GetQueueUrl of a missing queue succeeded")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def _flow_queue(repo: Repository, schema: str) -> None:
    """A flow queue no worker serves, for the "Flow control" row: keyed jobs, a per-key running
    limit, and a rate limit whose bucket a handler paused (rate-limit rows written by SQL)."""
    for i in range(4):
        repo.enqueue("noop", {}, queue="flow-live", flow_key=f"tenant:{i % 2}")
    repo.flow_per_key_set("flow-live", 2, requested_by="live-test")
    s = f'"{schema}"'
    repo.conn.execute(f"INSERT INTO {s}.rate_limits (name, per_second, burst) VALUES ('live-api', 1, 5)")
    repo.conn.execute(f"INSERT INTO {s}.rate_buckets (limit_name, tokens, paused_until) "
                      "VALUES ('live-api', 0, now() + interval '1 hour')")
    repo.conn.execute(f"UPDATE {s}.jobs SET rate_limit = 'live-api' WHERE queue_name = 'flow-live' "
                      "AND flow_key = 'tenant:1'")


def _feed(dsn: str, schema: str, stop: threading.Event) -> None:
    """A steady trickle of short jobs so that rates and quantiles have fresh samples."""
    rng = random.Random(7)
    with connect(dsn) as conn:
        repo = Repository(conn, schema)
        while not stop.wait(0.25):
            repo.enqueue("work", {"seconds": rng.choice([0.02, 0.05, 0.1, 0.3])}, queue="live")


def test_every_panel_and_alert_expression_against_a_live_prometheus(
        prometheus_bin: str, tenure_proc: Any, tenure_env: dict[str, str], dsn: str, schema: str,
        repo: Repository, tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("exporter", "worker_a", "worker_b", "reaper", "sqs")}
    tenure_proc("exporter", "--port", str(ports["exporter"]), "--interval", "0.5", "--completed-interval", "0.5")
    tenure_proc("reaper", "--interval", "0.5", "--grace", "1", "--heartbeat", "1", "--backoff-base", "0.1",
                "--backoff-max", "0.2", "--metrics-port", str(ports["reaper"]))
    tenure_proc("sqs", "--no-auth", "--bind", f"127.0.0.1:{ports['sqs']}")
    worker = tenure_proc("worker", "--app", "livestack:app", "--queue", "live", "--concurrency", "4", "--lease", "6",
                "--heartbeat", "1", "--poll-interval", "0.2", "--drain-timeout", "1",
                "--metrics-port", str(ports["worker_a"]))
    victim_worker = tenure_proc(
        "worker", "--app", "livestack:app", "--queue", "victim", "--concurrency", "1", "--lease", "2",
        "--heartbeat", "0.5", "--grace", "0.5", "--poll-interval", "0.2", "--drain-timeout", "1",
        "--metrics-port", str(ports["worker_b"]))
    for name, port in ports.items():
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: http_get(url)[0] == 200, 60, f"{name} {url}")

    prom = Prometheus(prometheus_bin, tmp_path / "prometheus", rules=render_rules(FAST), targets={
        "tenure-exporter": [ports["exporter"]], "tenure-worker": [ports["worker_a"], ports["worker_b"]],
        "tenure-reaper": [ports["reaper"]], "tenure-sqs": [ports["sqs"]]})
    stop_feed = threading.Event()
    feeder = threading.Thread(target=_feed, args=(dsn, schema, stop_feed), daemon=True)
    try:
        wait_for(lambda: (t := prom.targets_up()) and len(t) == 5 and set(t.values()) == {"up"}, 30,
                 "all five scrape targets up")
        _sqs_traffic(ports["sqs"])

        # -- the workload ---------------------------------------------------------------------
        first = subprocess.run([sys.executable, "-m", "tenure.cli", "enqueue", "noop", "--queue", "live",
                                "--idempotency-key", "order-1"], env=tenure_env, capture_output=True, text=True,
                               timeout=60)
        again = subprocess.run([sys.executable, "-m", "tenure.cli", "enqueue", "noop", "--queue", "live",
                                "--idempotency-key", "order-1"], env=tenure_env, capture_output=True, text=True,
                               timeout=60)
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        assert again.stdout.strip() == f"{first.stdout.strip()} (existing job with this idempotency key)"
        specs = ([JobSpec("noop", {}, queue="live") for _ in range(30)]
                 + [JobSpec("work", {"seconds": s}, queue="live") for s in (0.05, 0.1, 0.2, 0.4) * 4]
                 + [JobSpec("slow", {"seconds": 300}, queue="live") for _ in range(2)])
        assert repo.enqueue_many(specs) == len(specs)
        tracked = {"completed": [repo.enqueue("flaky", {"i": i}, queue="live").id for i in range(8)]
                   + [repo.enqueue("effect", {"key": k}, queue="live").id for k in ("a", "a", "b", "b")],
                   "failed": [repo.enqueue("doomed", {"i": i}, queue="live").id for i in range(3)]}
        victim = repo.enqueue("slow", {"seconds": 3, "wait_for_lost": 5}, queue="victim").id
        limit = subprocess.run([sys.executable, "-m", "tenure.cli", "queues", "limit", "live", "--max-running", "100"],
                               env=tenure_env, capture_output=True, text=True, timeout=60)
        assert limit.returncode == 0, limit.stderr  # a global limit that never binds: its gauge has data
        _flow_queue(repo, schema)
        feeder.start()

        # Freeze the victim worker while it holds its job: the lease expires, the reaper
        # recovers it; on SIGCONT its heartbeat learns the lease is lost and its completion is
        # rejected as stale.
        wait_for(lambda: (j := repo.get_job(victim)) and j["status"] == "running", 30, "victim job running")
        time.sleep(0.5)
        os.kill(victim_worker.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: any(e["event"] == "reaped_due_to_expired_lease" for e in repo.job_events(victim)), 30,
                     "the reaper to recover the frozen worker's job")
        finally:
            os.kill(victim_worker.pid, signal.SIGCONT)
        wait_for(lambda: any(e["event"] == "stale_completion_rejected" for e in repo.job_events(victim)), 30,
                 "the frozen worker's late completion to be rejected")

        def settled() -> bool:
            [live] = repo.queue_stats("live")
            done = all((j := repo.get_job(i)) and j["status"] == status
                       for status, ids in tracked.items() for i in ids)
            return done and live.failed == 3 and live.completed >= 30 + 16 + 8 + 4 + 1 and live.running >= 2
        wait_for(settled, 60, "the workload to settle (retries and effects completed, 3 dead letters, 2 long runners)")
        # Cancel one long runner while it runs (its worker is told at the next heartbeat), and
        # replace it, so the cancel panel has data and two jobs still run.
        listed = subprocess.run([sys.executable, "-m", "tenure.cli", "jobs", "list", "--queue", "live", "--status",
                                 "running", "--task", "slow", "--json"], env=tenure_env, capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        cancelled = json.loads(listed.stdout)[0]["id"]
        cancel = subprocess.run([sys.executable, "-m", "tenure.cli", "jobs", "cancel", str(cancelled), "--by", "live-test"],
                                env=tenure_env, capture_output=True, text=True, timeout=60)
        assert cancel.returncode == 0, cancel.stderr
        repo.enqueue("slow", {"seconds": 300}, queue="live")
        worker_metrics = f"http://127.0.0.1:{ports['worker_a']}/metrics"
        wait_for(lambda: b"tenure_jobs_cancelled_while_running_total{" in http_get(worker_metrics)[1], 30,
                 "the worker to see the cancel")
        wait_for(settled, 60, "two long runners again")
        time.sleep(4)  # a few more scrapes and rule evaluations of the final counters

        # -- every dashboard panel ------------------------------------------------------------
        queries = _panel_queries()
        assert len(queries) >= 30
        results: dict[str, dict[str, Any]] = {}
        for dashboard, title, expr in queries:
            result = prom.query(substitute(expr))
            assert result.get("status") == "success", (dashboard, title, expr, result)
            results[expr] = result
        empty = [(d, t, e) for d, t, e in queries if not results[e]["data"]["result"]]
        unexpected = [(d, t, e) for d, t, e in empty if not any(k in e for k in EXPECTED_EMPTY)]
        assert unexpected == [], f"panels without data: {unexpected}"
        print(f"{len(queries)} panel queries: {len(queries) - len(empty)} with data, empty: {[e for _, _, e in empty]}")
        assert len(queries) - len(empty) >= 0.85 * len(queries)

        for name, expr in KEY_QUERIES.items():
            result = prom.query(expr)
            values = [float(r["value"][1]) for r in result["data"]["result"] if r["metric"].get("queue") == "live"]
            assert len(values) >= 1 and all(math.isfinite(v) for v in values), (name, result)
        live = {r["metric"]["state"]: float(r["value"][1])
                for r in prom.query(KEY_QUERIES["jobs by state"])["data"]["result"] if r["metric"]["queue"] == "live"}
        assert live["failed"] == 3 and live["running"] >= 2 and live["completed"] > 50
        assert max(_values(prom.query(KEY_QUERIES["claims"]))) > 0
        assert max(_values(prom.query(KEY_QUERIES["completions"]))) > 0
        assert 0 < max(v for v in _values(prom.query(KEY_QUERIES["runtime p99"])) if math.isfinite(v)) <= 10
        assert max(_values(prom.query(KEY_QUERIES["in flight"]))) >= 2
        # max, not sum: the reaper's metrics port serves the same SQL gauges as the exporter.
        assert _values(prom.query('max(tenure_queue_reaped_jobs_total{queue="victim"})')) == [1.0]
        assert _values(prom.query('sum(tenure_reaper_reaped_total{outcome="requeued"})')) == [1.0]
        assert _values(prom.query('sum(tenure_leases_lost_total{queue="victim"})')) == [1.0]
        assert _values(prom.query('sum(tenure_stale_writes_rejected_total{operation="complete"})')) == [1.0]
        assert _values(prom.query('sum(tenure_dedup_hits_total{source="effect"})')) == [2.0]
        assert _values(prom.query('sum(tenure_jobs_retried_total{error_code="timeout"})')) == [8.0]

        # -- every alert expression -----------------------------------------------------------
        groups = yaml.safe_load(render_rules(FAST))["groups"]
        alerts = [r for g in groups for r in g["rules"]]
        assert [r["alert"] for r in alerts] == list(ALERT_NAMES)
        for rule in alerts:
            result = prom.query(rule["expr"])
            assert result.get("status") == "success", (rule["alert"], result)
        loaded = prom.api("rules", type="alert")["data"]["groups"]
        health = {r["name"]: (r["health"], r.get("lastError", "")) for g in loaded for r in g["rules"]}
        assert set(health) == set(ALERT_NAMES)
        assert {n: h for n, h in health.items() if h[0] != "ok"} == {}
        assert all(g["interval"] == 1 for g in loaded)
        # The exporter is up and fresh, so its alert must not fire.
        assert prom.query('ALERTS{alertname="TenureExporterDown",alertstate="firing"}')["data"]["result"] == []
    finally:
        stop_feed.set()
        if feeder.is_alive():
            feeder.join(timeout=10)
        prom.stop()

    # -- `tenure stats` and the exporter agree (the same query, read at a quiet moment) -----
    for proc in (worker, victim_worker):
        proc.send_signal(signal.SIGTERM)
    wait_for(lambda: worker.poll() is not None and victim_worker.poll() is not None, 30, "workers to drain and exit")
    assert worker.returncode == victim_worker.returncode == 0
    time.sleep(1.0)  # backoffs of released jobs elapse; the exporter's 0.5 s cache expires
    before = _stats_json(tenure_env)
    scraped = _scrape(ports["exporter"])
    after = _stats_json(tenure_env)
    assert set(before) == set(scraped) == set(after) == {"live", "victim", "sqs-live", "flow-live"}
    for queue, figures in before.items():
        for field, value in figures.items():
            if field.endswith("_seconds"):
                assert value - 0.01 <= scraped[queue][field] <= after[queue][field] + 0.01, (queue, field)
            elif field in ("ready", "scheduled", "running", "completed", "failed", "running_expired",
                           "redelivered", "live_workers", "reaped_total"):
                assert scraped[queue][field] == value == after[queue][field], (queue, field)
    assert before["live"]["failed"] == 3 and before["victim"]["reaped_total"] == 1
    assert before["live"]["live_workers"] == 0  # both workers stopped cleanly
    flow = before["flow-live"]  # tenant:1's two jobs wait for a paused bucket; tenant:0's are runnable
    assert (flow["ready"], flow["blocked"], flow["blocked_backpressure"]) == (2, 2, 2)
    assert flow["oldest_unblocked_wait_seconds"] > 0

