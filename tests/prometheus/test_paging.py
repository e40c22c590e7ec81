"""Paging end to end: kill -9 a worker holding jobs, and TenureExpiredLeases travels from a real
Prometheus through a real Alertmanager to a webhook; once a reaper recovers the jobs it resolves.

Short `for` and evaluation interval come from the thresholds settings
(`AlertThresholds.with_for_seconds`), never from editing the rules.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from livestack import Alertmanager, Prometheus, WebhookReceiver, free_port, http_get, wait_for
from tenure.core.repository import Repository
from tenure.observability.alerts import AlertThresholds, render_rules

pytestmark = pytest.mark.prometheus

FAST = AlertThresholds().with_for_seconds(1, evaluation_interval_seconds=1)
ALERT = "TenureExpiredLeases"
JOBS = 3


def test_killed_worker_pages_and_recovery_resolves(
        prometheus_bin: str, alertmanager_bin: str, tenure_proc: Any, repo: Repository, tmp_path: Path) -> None:
    receiver = WebhookReceiver()
    am = Alertmanager(alertmanager_bin, tmp_path / "alertmanager", receiver.url)
    exporter_port, worker_port = free_port(), free_port()
    tenure_proc("exporter", "--port", str(exporter_port), "--interval", "0.5")
    doomed = tenure_proc("worker", "--app", "livestack:app", "--queue", "paging", "--concurrency", str(JOBS),
                         "--lease", "2", "--heartbeat", "0.5", "--grace", "0.5", "--poll-interval", "0.2",
                         "--metrics-port", str(worker_port))
    prom = None
    try:
        for port in (exporter_port, worker_port):
            url = f"http://127.0.0.1:{port}/metrics"
            wait_for(lambda: http_get(url)[0] == 200, 60, url)
        prom = Prometheus(prometheus_bin, tmp_path / "prometheus", rules=render_rules(FAST),
                          alertmanager_port=am.port,
                          targets={"tenure-exporter": [exporter_port], "tenure-worker": [worker_port]})
        ids = {repo.enqueue("slow", {"seconds": 600}, queue="paging").id for _ in range(JOBS)}
        wait_for(lambda: (s := repo.queue_stats("paging")) and s[0].running == JOBS, 30, "the worker to hold the jobs")
        wait_for(lambda: prom is not None and prom.query(
            'max(tenure_queue_jobs{queue="paging",state="running"})')["data"]["result"], 20,
            "Prometheus to see the running jobs")
        # Healthy: heartbeats keep the leases, so the alert stays silent through several evaluations.
        time.sleep(4)
        assert receiver.notifications(ALERT) == []
        assert prom.query(f'ALERTS{{alertname="{ALERT}"}}')["data"]["result"] == []

        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        killed_at = time.monotonic()
        firing = receiver.wait(ALERT, "firing", timeout=40)
        print(f"kill -9 -> firing notification: {time.monotonic() - killed_at:.1f}s")
        [alert] = [a for a in firing["alerts"] if a["labels"]["alertname"] == ALERT]
        assert alert["status"] == "firing"
        assert alert["labels"]["queue"] == "paging" and alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["runbook_url"].endswith("#tenureexpiredleases")
        assert "queue paging" in alert["annotations"]["description"]
        assert firing["receiver"] == "test-webhook"
        assert {j["status"] for j in (repo.get_job(i) for i in ids) if j} == {"running"}  # nobody recovered yet

        # Recovery: a reaper requeues the expired jobs and a new worker takes them.
        tenure_proc("reaper", "--interval", "0.5", "--grace", "1", "--heartbeat", "1", "--backoff-base", "0.1",
                    "--backoff-max", "0.2")
        tenure_proc("worker", "--app", "livestack:app", "--queue", "paging", "--concurrency", str(JOBS),
                    "--lease", "10", "--heartbeat", "1", "--poll-interval", "0.2")
        recovery_at = time.monotonic()
        resolved = receiver.wait(ALERT, "resolved", timeout=40)
        print(f"reaper start -> resolved notification: {time.monotonic() - recovery_at:.1f}s")
        assert resolved["status"] == "resolved"
        assert all(a["status"] == "resolved" and a["endsAt"] > a["startsAt"] for a in resolved["alerts"])
        for job_id in ids:
            events = [e["event"] for e in repo.job_events(job_id)]
            assert "reaped_due_to_expired_lease" in events, events
        [stats] = repo.queue_stats("paging")
        assert stats.running_expired == 0 and stats.reaped_total == JOBS
    finally:
        if prom is not None:
            prom.stop()
        am.stop()
        receiver.stop()
