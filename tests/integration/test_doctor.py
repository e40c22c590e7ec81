"""`tenure doctor` (R20) against a real PostgreSQL: each diagnosis from real rows and events."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tenure.chaos.proxy import TcpProxy
from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.repository import Repository
from tenure.observability.doctor import Doctor, DoctorConfig, Report
from tenure.reaper.reaper import Reaper, ReaperConfig

pytestmark = pytest.mark.integration


def _register(repo: Repository, worker_id: str, heartbeat: float, queues: tuple[str, ...] = ("default",)) -> None:
    repo.worker_register(worker_id, host="test-host", pid=4242, queues=queues, concurrency=1,
                         heartbeat_seconds=heartbeat, version="9.9.9-test")


def _run(repo: Repository, **kw: object) -> Report:
    return Doctor(DoctorConfig(**kw)).run_once(repo)  # type: ignore[arg-type]


def _codes(report: Report) -> list[str]:
    return [f.code for f in report.findings]


def _complete_runs(repo: Repository, worker: str, task: str, seconds: float, n: int) -> None:
    for _ in range(n):
        repo.enqueue(task)
        [job] = repo.claim(worker, ["default"], 1, 30)
        time.sleep(seconds)
        assert repo.complete_many(worker, [(job.id, job.lock_token)]) == {job.id: True}


def test_healthy_queue_has_no_findings(repo: Repository) -> None:
    _register(repo, "w-ok", 1.0)
    _complete_runs(repo, "w-ok", "quick", 0.0, 2)
    report = _run(repo)
    assert report.findings == [] and report.healthy and report.exit_code == 0
    assert report.workers == {"alive": 1, "silent": 0, "stopped": 0}
    assert len(report.storage["rtt_seconds"]) == 5


def test_dead_worker_holding_jobs_is_reported_with_evidence(repo: Repository) -> None:
    _register(repo, "w-dead", 0.1)
    ids = {repo.enqueue("crashy").id for _ in range(2)}
    claimed = repo.claim("w-dead", ["default"], 2, 0.3)
    assert {j.id for j in claimed} == ids
    time.sleep(0.6)  # registry silent (3 x 0.1 s) and leases expired; nobody heartbeats
    report = _run(repo, reaper_grace=0.0, reaper_interval=0.1)
    dead = [f for f in report.findings if f.code == "dead_worker"]
    assert len(dead) == 1 and dead[0].severity == "warning"
    ev = dead[0].evidence
    assert ev["worker_id"] == "w-dead" and ev["registry"] == "silent"
    assert ev["jobs_held"] == 2 and ev["leases_expired"] == 2 and set(ev["job_ids"]) == ids
    assert ev["host"] == "test-host" and ev["pid"] == 4242 and ev["silent_seconds"] > 0.3
    assert "hung_job" not in _codes(report)
    slow = [f for f in report.findings if f.code == "reaper_too_slow"]
    assert slow and set(slow[0].evidence["job_ids"]) == ids and slow[0].evidence["max_expired_for_seconds"] > 0.1
    [scope] = report.scope
    assert (scope.queue, scope.task, scope.expired_now) == ("default", "crashy", 2)
    assert scope.since is not None and scope.workers == ["w-dead"] and scope.worker_versions == ["9.9.9-test"]
    assert report.exit_code == 1


def test_hung_job_is_told_apart_from_a_dead_worker(repo: Repository) -> None:
    _register(repo, "w-hung", 1.0)
    _complete_runs(repo, "w-hung", "stuck", 0.0, 3)  # runtime p99 of a few milliseconds
    hung_id = repo.enqueue("stuck").id
    [job] = repo.claim("w-hung", ["default"], 1, 30)
    time.sleep(1.0)
    [beat] = repo.heartbeat("w-hung", [(job.id, job.lock_token)], 30, 3600)
    assert beat.outcome == "renewed"
    report = _run(repo, hung_min_seconds=0.5)
    assert "dead_worker" not in _codes(report) and "expired_leases" not in _codes(report)
    [hung] = [f for f in report.findings if f.code == "hung_job"]
    assert hung.severity == "warning"
    assert hung.evidence["job_ids"] == [hung_id] and hung.evidence["owners"] == ["w-hung"]
    assert hung.evidence["oldest_age_seconds"] > hung.evidence["limit_seconds"] == 0.5
    assert hung.evidence["runtime_p99_seconds"] is not None and hung.evidence["runtime_p99_seconds"] < 0.5
    # The default threshold (60 s) does not call a 1-second job hung.
    assert "hung_job" not in _codes(_run(repo))


def test_eager_reaper_is_flagged_when_the_reaped_token_completes_later(dsn: str, schema: str,
                                                                       repo: Repository) -> None:
    _register(repo, "w-slow", 1.0)
    job_id = repo.enqueue("slowpoke").id
    [job] = repo.claim("w-slow", ["default"], 1, 0.2)
    # Expired for longer than the owner's registered 1 s heartbeat (the reaper's floor), by the database clock.
    repo.conn.execute(f'UPDATE "{schema}".jobs SET lease_expires_at = now() - interval \'1.5 seconds\' WHERE id = %s',
                      (job_id,))
    reaper = Reaper(ReaperConfig(grace=0.0, retry=RetryPolicy(60, 60, 5)), dsn=dsn, schema=schema,
                    rng=random.Random(1))
    assert [r.id for r in reaper.run_once()] == [job_id]
    # The owner was alive all along and finishes: its completion is rejected as stale.
    assert repo.complete_many("w-slow", [(job.id, job.lock_token)]) == {job_id: False}
    report = _run(repo)
    [eager] = [f for f in report.findings if f.code == "reaper_too_eager"]
    ev = eager.evidence
    assert eager.severity == "warning" and ev["job_ids"] == [job_id]
    assert (ev["queue"], ev["task"], ev["reaped"]) == ("default", "slowpoke", 1)
    assert ev["followed_by_stale_completion"] == 1 and ev["owner_alive_when_reaped"] == 1
    assert ev["max_stale_after_seconds"] >= 0
    [scope] = report.scope
    assert scope.reaped_in_window == 1 and scope.since is not None


def test_a_reap_without_a_late_write_is_not_eager(dsn: str, schema: str, repo: Repository) -> None:
    repo.enqueue("gone")
    repo.claim("w-gone", ["default"], 1, 0.1)
    time.sleep(0.2)
    Reaper(ReaperConfig(grace=0.0, retry=RetryPolicy(60, 60, 5)), dsn=dsn, schema=schema).run_once()
    report = _run(repo)
    assert "reaper_too_eager" not in _codes(report)
    assert [s.reaped_in_window for s in report.scope] == [1]


def test_suggestions_follow_the_observed_runtime(repo: Repository) -> None:
    _register(repo, "w-s", 1.0)
    _complete_runs(repo, "w-s", "measured", 0.3, 3)
    report = _run(repo, lease_margin=4.0, lease_floor_seconds=0.0)
    [s] = report.suggestions
    [q] = repo.runtime_quantiles(3600)
    assert (s.queue, s.task, s.runs) == ("default", "measured", 3)
    assert s.runtime_p99_seconds == pytest.approx(q["p99"]) and s.runtime_p99_seconds >= 0.3
    assert s.lease_seconds == float(int(q["p99"] * 4.0) + 1)  # p99 x margin, rounded up to 1 s
    assert s.heartbeat_seconds <= s.lease_seconds / 3 and s.heartbeat_seconds > 0
    assert s.grace_seconds >= s.heartbeat_seconds
    assert s.current_heartbeat_seconds == 1.0 and s.current_lease_seconds is None
    # Nothing is running, so the current lease comes from what live workers registered.
    repo.worker_register("w-l", host="h", pid=1, queues=["default"], concurrency=1, heartbeat_seconds=1.0,
                         version="t", lease_seconds=12.0)
    assert _run(repo, lease_margin=4.0, lease_floor_seconds=0.0).suggestions[0].current_lease_seconds == 12.0
    # The floor applies when the runtime is short.
    [floored] = _run(repo, lease_margin=2.0, lease_floor_seconds=10.0).suggestions
    assert floored.lease_seconds == 10.0 and floored.heartbeat_seconds == pytest.approx(3.3)


def test_lease_shorter_than_the_runtime_p99_is_a_finding(repo: Repository) -> None:
    _register(repo, "w-l", 0.1)
    _complete_runs(repo, "w-l", "long", 0.5, 2)
    repo.enqueue("long")
    [job] = repo.claim("w-l", ["default"], 1, 0.3)
    repo.heartbeat("w-l", [(job.id, job.lock_token)], 0.3, 3600)
    [finding] = [f for f in _run(repo).findings if f.code == "lease_below_runtime_p99"]
    assert finding.evidence["current_lease_seconds"] == pytest.approx(0.3, abs=0.05)
    assert finding.evidence["runtime_p99_seconds"] >= 0.5


def test_queue_filter_limits_the_findings(repo: Repository) -> None:
    _register(repo, "w-other", 0.1, queues=("other",))
    repo.enqueue("t", queue="other")
    repo.claim("w-other", ["other"], 1, 0.1)
    time.sleep(0.4)
    assert "dead_worker" in _codes(_run(repo, queue="other"))
    assert _run(repo, queue="default").findings == []


def test_cli_json_shape_and_exit_codes(dsn: str, schema: str, repo: Repository) -> None:
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    cmd = [sys.executable, "-m", "tenure.cli", "doctor", "--json"]
    healthy = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert healthy.returncode == 0, healthy.stderr
    body = json.loads(healthy.stdout)
    assert set(body) == {"healthy", "exit_code", "checked_at", "queue", "findings", "scope", "suggestions",
                         "storage", "workers", "settings"}
    assert body["healthy"] is True and body["findings"] == [] and body["exit_code"] == 0

    _register(repo, "w-cli", 0.1)
    repo.enqueue("t")
    repo.claim("w-cli", ["default"], 1, 0.1)
    time.sleep(0.4)
    sick = subprocess.run([*cmd, "--grace", "0", "--reaper-interval", "100ms"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert sick.returncode == 1, sick.stderr
    body = json.loads(sick.stdout)
    assert body["healthy"] is False
    for finding in body["findings"]:
        assert set(finding) == {"code", "severity", "summary", "evidence"}
        assert finding["severity"] in ("info", "warning", "critical") and finding["evidence"]
    assert {"dead_worker", "reaper_too_slow"} <= {f["code"] for f in body["findings"]}
    assert body["settings"]["reaper_grace"] == 0.0 and body["settings"]["reaper_interval"] == 0.1

    text = subprocess.run([sys.executable, "-m", "tenure.cli", "doctor"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 1 and "[WARNING] dead_worker: worker w-cli is dead" in text.stdout

    bad = subprocess.run([*cmd, "--lease-margin", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("tenure: error:") and bad.stdout == ""


@pytest.fixture
def slow_link(dsn: str) -> Iterator[str]:
    """A DSN through a proxy that delays every chunk: storage that is really slow."""
    link = TcpProxy.to(dsn, delay=0.08)  # ~160 ms per round trip
    yield link.dsn_for(dsn)
    link.stop()


def _late_heartbeat(repo: Repository) -> int:
    """A job whose owner is alive in the registry but whose lease renewals are late."""
    _register(repo, "w-late", 1.0)
    job_id = repo.enqueue("t").id
    repo.claim("w-late", ["default"], 1, 30)
    time.sleep(2.2)  # over two intervals without renewing the job
    repo.worker_touch("w-late")  # ...while the process still shows up in the registry
    return job_id


def test_late_heartbeats_on_fast_storage_point_at_a_starved_loop(repo: Repository) -> None:
    job_id = _late_heartbeat(repo)
    report = _run(repo)
    assert "slow_storage" not in _codes(report) and "dead_worker" not in _codes(report)
    [late] = [f for f in report.findings if f.code == "heartbeats_late"]
    assert late.evidence["cause"] == "starved_heartbeat_loop" and late.evidence["job_ids"] == [job_id]
    assert late.evidence["max_heartbeat_lag_seconds"] > 2 * 1.0


def test_slow_storage_is_measured_and_named_as_the_cause(schema: str, repo: Repository,
                                                         slow_link: str) -> None:
    job_id = _late_heartbeat(repo)
    with connect(slow_link) as slow_conn:
        report = _run(Repository(slow_conn, schema), rtt_samples=3)
    [slow] = [f for f in report.findings if f.code == "slow_storage"]
    assert slow.evidence["rtt_median_seconds"] > slow.evidence["limit_seconds"] == 0.1
    assert len(slow.evidence["rtt_seconds"]) == 3 and min(slow.evidence["rtt_seconds"]) >= 0.1
    [late] = [f for f in report.findings if f.code == "heartbeats_late"]
    assert late.evidence["cause"] == "slow_storage" and late.evidence["job_ids"] == [job_id]
