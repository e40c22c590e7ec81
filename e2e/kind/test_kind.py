"""The Kubernetes user story on a real kind cluster (issue 11), asserted from the database and the API.

Run by e2e/kind/run.sh after it created the cluster, loaded ``tenure:dev``, installed PostgreSQL
and the chart, and ran ``helm test``; never collected by a plain ``pytest`` (e2e/conftest.py
ignores this folder unless TENURE_KIND_CONTEXT is set). The tests run in file order and share
one JobQueue, ``emails`` (examples/jobqueue.yaml with the image changed):

1. apply and drain 2,000 jobs: children created, pods Ready via /readyz, scale up on the backlog,
   exactly one ``completed`` event per job, scale down, to zero, and up again from zero;
2. a worker process SIGKILLed mid-job (from its node, no grace): the reaper CronJob's pod reaps
   its leases and the jobs complete on another pod;
3. a worker node frozen with ``docker pause`` (reaper grace 300 s, so TenureExpiredLeases pages
   through Alertmanager), thawed with ``docker unpause``: its jobs completed elsewhere, every
   late write rejected and audited, no effect recorded twice, the alert resolves;
4. a rolling update under load: no job lost, no attempt wasted;
5. bad manifests: a CEL-invalid JobQueue refused, a missing Secret -> Degraded, no pods;
6. observability: Prometheus discovers the pods through the Kubernetes API, loads the generated
   rules, every dashboard panel returns data, no alert fires on the healthy install;
7. the chart's optional components (ui.enabled, sqs.enabled) with their Secrets: boto3 sends,
   receives and deletes through the tenure-sqs Service; the tenure-ui Service serves the overview
   and the queues API to the Secret's viewer and refuses a write (read-only by default);
8. the SQS Deployment (2 replicas) rolled twice (``kubectl rollout restart``) while a boto3
   consumer and a Celery worker, in pods of the image built from e2e/kind/sqs-clients, consume
   2,000 messages through the Service's DNS name: every message done exactly once, no client
   error, the Celery worker goes on after the rolls (issue 36).
Figures (scale and recovery times, alert timings) are recorded in $ARTIFACTS/figures.json.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from kind.kube import Cluster, KindError, sql_list, wait_for
from tenure.core.repository import REJECTED_WRITE_EVENTS

pytestmark = pytest.mark.kind

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "emails"
JQ = "emails"


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster()


class ReplicaWatch:
    """Samples the worker Deployment's spec.replicas every second in a thread: (time, replicas)."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                dep = self.c.get("deployment", f"{JQ}-worker")
                self.samples.append((time.time(), int(dep["spec"].get("replicas") or 0)))
            except (KindError, ValueError, KeyError):
                pass
            self._stop.wait(1.0)

    def __enter__(self) -> ReplicaWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def current(self) -> int:
        return self.samples[-1][1] if self.samples else -1

    def first_time(self, pred: Any, after: float) -> float | None:
        for t, r in self.samples:
            if t >= after and pred(r):
                return t
        return None


def replicas(c: Cluster) -> int:
    return int(c.get("deployment", f"{JQ}-worker")["spec"].get("replicas") or 0)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def completed_once(c: Cluster, batch: str, expected: int) -> None:
    """Every job of ``batch`` completed, each with exactly one accepted ``completed`` event."""
    rows = c.sql(
        "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM tenure.all_jobs"
        f" WHERE payload->>'batch' = '{batch}'")
    total, done = (int(x) for x in rows[0])
    assert total == expected, f"batch {batch}: {total} jobs in the database, expected {expected}"
    assert done == expected, f"batch {batch}: only {done}/{expected} completed"
    dupes = c.sql(
        "SELECT e.job_id, count(*) FROM tenure.job_events e JOIN tenure.all_jobs j ON j.id = e.job_id"
        f" WHERE j.payload->>'batch' = '{batch}' AND e.event = 'completed'"
        " GROUP BY e.job_id HAVING count(*) <> 1 LIMIT 5")
    assert not dupes, f"batch {batch}: jobs without exactly one completed event: {dupes}"
    events = c.count(
        "SELECT count(*) FROM tenure.job_events e JOIN tenure.all_jobs j ON j.id = e.job_id"
        f" WHERE j.payload->>'batch' = '{batch}' AND e.event = 'completed'")
    assert events == expected


def batch_done(c: Cluster, batch: str, expected: int) -> bool:
    return c.count(f"SELECT count(*) FROM tenure.all_jobs WHERE payload->>'batch' = '{batch}'"
                   " AND status = 'completed'") == expected


def pods_of_workers(c: Cluster) -> dict[str, str]:
    """Worker pod name -> node name, for the live worker pods of the JobQueue."""
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in c.worker_pods(JQ)}


def running_by_pod(c: Cluster) -> dict[str, list[tuple[int, str, str]]]:
    """Running jobs grouped by the pod (hostname prefix of locked_by): (id, token, worker)."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    pods = pods_of_workers(c)
    for job_id, token, worker in c.sql(
            f"SELECT id, lock_token, locked_by FROM tenure.all_jobs WHERE queue_name = '{QUEUE}'"
            " AND status = 'running'"):
        for pod in pods:
            if worker.startswith(pod + "-"):
                out.setdefault(pod, []).append((int(job_id), token, worker))
    return out


def firing_alerts(c: Cluster) -> list[str]:
    res = c.service_get("prometheus", 9090, "/api/v1/query", query='ALERTS{alertstate="firing"}')
    return sorted(r["metric"].get("alertname", "?") for r in res["data"]["result"])


def webhook_notifications(c: Cluster) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = c.service_get("alert-webhook", 8080, "/")
    return seen


def alert_status_times(c: Cluster, alertname: str, status: str, after: float) -> list[float]:
    times = []
    for note in webhook_notifications(c):
        if note["received"] < after:
            continue
        for alert in note["body"].get("alerts", []):
            if alert.get("labels", {}).get("alertname") == alertname and alert.get("status") == status:
                times.append(float(note["received"]))
    return times


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", autouse=True)
def observability(cluster: Cluster) -> Iterator[None]:
    """Prometheus, Alertmanager and the webhook receiver, before any scenario runs."""
    c = cluster
    c.kubectl("create", "configmap", "tenure-rules", "--dry-run=client", "-o", "yaml",
              f"--from-file=alerts.yaml={ROOT / 'charts/tenure/files/alerts.yaml'}")
    rules = c.kubectl("create", "configmap", "tenure-rules", "--dry-run=client", "-o", "yaml",
                      f"--from-file=alerts.yaml={ROOT / 'charts/tenure/files/alerts.yaml'}").stdout
    c.apply(rules)
    manifest = (ROOT / "e2e/kind/manifests/observability.yaml").read_text()
    for key, value in {
        "${NAMESPACE}": c.namespace,
        "${PROM_IMAGE}": os.environ.get("TENURE_KIND_PROM_IMAGE", "tenure/prometheus:local"),
        "${AM_IMAGE}": os.environ.get("TENURE_KIND_AM_IMAGE", "tenure/alertmanager:bookworm"),
        "${IMAGE}": c.image,
    }.items():
        manifest = manifest.replace(key, value)
    c.apply(manifest)
    for dep in ("prometheus", "alertmanager", "alert-webhook"):
        c.kubectl("rollout", "status", f"deploy/{dep}", "--timeout=300s", timeout=320)
    yield


# ---------------------------------------------------------------------------------- scenarios
@pytest.mark.timeout(1500)
def test_apply_and_drain_scales_up_down_to_zero_and_back(cluster: Cluster) -> None:
    c = cluster
    example = (ROOT / "examples/jobqueue.yaml").read_text()
    example = example.replace("image: tenure:dev", f"image: {c.image}")
    example = example.replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Never")
    c.apply(example)
    t_apply = time.time()

    # The operator creates the children; the pods become Ready through /readyz.
    def children() -> bool:
        for kind, name in (("deployment", f"{JQ}-worker"), ("cronjob", f"{JQ}-reaper"),
                           ("service", f"{JQ}-metrics"), ("pdb", f"{JQ}-worker")):
            if c.kubectl("get", kind, name, check=False).returncode != 0:
                return False
        return True
    # The operator migrates the database first (its migration Job), then creates the children.
    wait_for("the JobQueue's Deployment, CronJob, Service and PDB", children, 300)
    c.kubectl("wait", "--for=condition=Ready", f"jobqueue/{JQ}", "--timeout=300s", timeout=320)
    dep = c.get("deployment", f"{JQ}-worker")
    probe = dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
    assert probe == "/readyz"
    migrated = c.count("SELECT count(*) FROM tenure.schema_migrations")
    assert migrated >= 1, "the schema was not migrated"
    schema_ready = condition(c.get("jobqueue", JQ), "SchemaReady") or {}
    assert schema_ready.get("status") == "True", schema_ready
    c.record("schema_versions_migrated_by_operator", migrated)
    exporters = lambda: [p for p in c.get("pods", "-l", "app.kubernetes.io/component=exporter")["items"]  # noqa: E731
                         if p["status"].get("phase") == "Running"]
    wait_for("the exporter pod the operator runs for this database", exporters, 180)
    c.record("apply_to_ready_seconds", round(time.time() - t_apply, 1))
    spec = c.get("jobqueue", JQ)["spec"]
    max_replicas = int(spec["scaling"]["maxReplicas"])
    # The example allows scale to zero: an empty queue has no worker pods.
    assert spec["scaling"].get("allowScaleToZero") is True
    wait_for("zero workers on the empty queue", lambda: replicas(c) == 0, 300)

    with ReplicaWatch(c) as watch:
        t0 = time.time()
        c.enqueue("enqueue-drain", QUEUE, "drain", 2000)
        t_enq = time.time()
        c.record("enqueue_2000_pod_seconds", round(t_enq - t0, 1))
        # Pods become Ready through /readyz once the backlog scaled the Deployment up.
        wait_for("a Ready worker pod", lambda: c.get("deployment", f"{JQ}-worker")["status"].get(
            "readyReplicas", 0) >= 1, 300)
        c.record("enqueue_to_first_ready_pod_seconds", round(time.time() - t0, 1))
        wait_for("2,000 jobs completed", lambda: batch_done(c, "drain", 2000), 900, interval=5)
        t_done = time.time()
        peak = max(r for _, r in watch.samples if _ >= t0)
        assert peak > 1, f"the operator never scaled past one pod on the backlog (peak {peak})"
        up = watch.first_time(lambda r: r > 0, t0)
        top = watch.first_time(lambda r: r == peak, t0)
        c.record("drain_2000_seconds", round(t_done - t0, 1))
        c.record("scale_up_first_seconds", round((up or t0) - t0, 1))
        c.record("scale_up_peak_replicas", peak)
        c.record("scale_up_to_peak_seconds", round((top or t0) - t0, 1))
        c.record("max_replicas", max_replicas)
        completed_once(c, "drain", 2000)

        # Back down once the queue is empty (stabilisation shortened for the test): to zero,
        # which the example allows, and no worker pod left.
        c.patch_jobqueue(JQ, {"scaling": {"scaleDownStabilizationSeconds": 20}})
        t_idle = time.time()
        wait_for("scale down from the peak", lambda: replicas(c) < peak, 300)
        c.record("scale_down_first_seconds", round(time.time() - t_idle, 1))
        wait_for("scale to zero", lambda: replicas(c) == 0, 300)
        c.record("scale_to_zero_seconds", round(time.time() - t_idle, 1))
        wait_for("no worker pods left", lambda: not c.worker_pods(JQ), 180)

        # Enqueuing again scales up from zero.
        t1 = time.time()
        c.enqueue("enqueue-fromzero", QUEUE, "fromzero", 50, first_id=100000)
        wait_for("scale up from zero", lambda: replicas(c) >= 1, 300)
        c.record("scale_from_zero_seconds", round(time.time() - t1, 1))
        wait_for("the jobs enqueued at zero completed", lambda: batch_done(c, "fromzero", 50), 600)
        c.record("scale_from_zero_to_drained_seconds", round(time.time() - t1, 1))
        completed_once(c, "fromzero", 50)
    (c.artifacts / "replicas-drain.json").write_text(json.dumps(watch.samples))
    # A healthy install pages no one: nothing fires after the drain (Prometheus has been
    # evaluating the generated rules since before the JobQueue was applied).
    firing = firing_alerts(c)
    c.record("alerts_firing_on_healthy_install", firing)
    assert not firing, f"alerts fire on a healthy install: {firing}"


@pytest.mark.timeout(900)
def test_pod_sigkill_mid_job_is_reaped_by_the_cronjob(cluster: Cluster) -> None:
    c = cluster
    # Shorter lease/heartbeat/grace so a recovery fits the test; two pods stay up.
    c.patch_jobqueue(JQ, {"leaseSeconds": 20, "heartbeatSeconds": 5, "graceSeconds": 10,
                          "reaper": {"graceSeconds": 10},
                          "scaling": {"minReplicas": 2, "maxReplicas": 4, "allowScaleToZero": False,
                                      "scaleDownStabilizationSeconds": 60}})
    wait_for("2 Ready workers on the new spec", lambda: (
        (d := c.get("deployment", f"{JQ}-worker"))["status"].get("updatedReplicas", 0) >= 2
        and d["status"].get("readyReplicas", 0) >= 2
        and d["status"].get("replicas", 0) == d["status"].get("updatedReplicas", 0)), 420)
    c.enqueue("enqueue-kill", QUEUE, "kill", 600, first_id=200000, extra={"provider_seconds": 0.5})
    victim = wait_for("a worker pod holding running jobs",
                      lambda: max(running_by_pod(c).items(), key=lambda kv: len(kv[1]), default=None), 180,
                      interval=1)
    pod = victim[0]
    killed_workers = {w for _, _, w in victim[1]}
    pod_obj = c.get("pod", pod)
    node = pod_obj["spec"]["nodeName"]
    cid = pod_obj["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    pid = json.loads(c.docker("exec", node, "crictl", "inspect", cid))["info"]["pid"]
    c.docker("exec", node, "kill", "-KILL", str(pid))
    t_kill = c.db_now()
    # Rows still locked by the killed process's worker id are its orphaned leases (the restarted
    # container is a new process with a new worker id).
    stuck = c.sql("SELECT id, lock_token FROM tenure.all_jobs WHERE status = 'running'"
                  f" AND locked_by IN {sql_list(sorted(killed_workers))}")
    orphans = [(int(i), t) for i, t in stuck]
    assert orphans, f"no job was running on {pod} when its process was killed"
    ids = [i for i, _ in orphans]
    def orphans_completed() -> bool:
        rows = c.sql(f"SELECT id, status, coalesce(last_error_code, '') FROM tenure.all_jobs WHERE id IN {sql_list(ids)}")
        failed = [r for r in rows if r[1] == "failed"]
        assert not failed, f"orphaned jobs dead-lettered instead of re-run: {failed}"
        return all(r[1] == "completed" for r in rows)
    wait_for("the orphaned jobs reaped and completed", orphans_completed, 420, interval=3)
    t_recovered = float(c.scalar(
        f"SELECT extract(epoch FROM max(completed_at)) FROM tenure.all_jobs WHERE id IN {sql_list(ids)}"))
    reaped = c.sql(
        "SELECT job_id, worker_id, extract(epoch FROM created_at) FROM tenure.job_events"
        f" WHERE event = 'reaped_due_to_expired_lease' AND job_id IN {sql_list(ids)}"
        f" AND created_at > to_timestamp({t_kill})")
    assert {int(r[0]) for r in reaped} == set(ids), f"not every orphan was reaped: {reaped}"
    # Workers run without an in-process reaper (--reaper-interval 0): only `tenure reaper --once`
    # in the CronJob's pods reaps, and a Job of the CronJob ran after the kill.
    assert all(r[1].startswith("reaper-") for r in reaped)
    worker_args = c.get("deployment", f"{JQ}-worker")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--reaper-interval" not in worker_args
    reaper_pods = c.get("pods", "-l", f"app.kubernetes.io/instance={JQ},app.kubernetes.io/component=reaper")
    finished = [p["metadata"]["name"] for p in reaper_pods["items"] if p["status"].get("phase") == "Succeeded"]
    assert finished, "no pod of the reaper CronJob succeeded"
    c.record("sigkill_reaper_pods_succeeded", len(finished))
    by_other = c.sql(
        "SELECT job_id, worker_id FROM tenure.job_events WHERE event = 'completed'"
        f" AND job_id IN {sql_list(ids)}")
    assert len(by_other) == len(ids)
    assert not [w for _, w in by_other if w in killed_workers], "a killed worker completed a job"
    completed = wait_for("the kill batch drained", lambda: batch_done(c, "kill", 600), 600, interval=5)
    assert completed
    completed_once(c, "kill", 600)
    first_reap = min(float(r[2]) for r in reaped)
    c.record("sigkill_orphaned_jobs", len(ids))
    c.record("sigkill_first_reap_after_kill_seconds", round(first_reap - t_kill, 1))
    c.record("sigkill_recovery_seconds", round(t_recovered - t_kill, 1))
    c.record("sigkill_recovery_bound_seconds", "lease 20 + reaper grace 10 + CronJob schedule <= 60 "
             "+ reaper pod start")


def _template_spec_hash(deployment: dict[str, Any]) -> str | None:
    """The operator's hash of the JobQueue spec on a Deployment's pod template."""
    metadata = deployment["spec"]["template"].get("metadata") or {}
    return (metadata.get("annotations") or {}).get("tenure.dev/spec-hash")


@pytest.mark.timeout(1500)
def test_node_freeze_and_thaw_rejects_every_late_write(cluster: Cluster) -> None:
    c = cluster
    # The reaper waits 300 s past a lease's expiry, so the expired leases outlive
    # TenureExpiredLeases' `for: 2m` and page before they are reaped. (Any spec change rolls the
    # workers, so this happens before the freeze, not during it.)
    # The roll is waited for by the pod template's spec hash: a Deployment still settled on the
    # old template also has every replica updated and ready, and a roll that came only later (the
    # operator applies a spec change at its next pass) took the frozen node's pods away mid-scenario.
    old_hash = _template_spec_hash(c.get("deployment", f"{JQ}-worker"))
    c.patch_jobqueue(JQ, {"reaper": {"graceSeconds": 300}})
    wait_for("the workers rolled onto the new spec", lambda: (
        _template_spec_hash(d := c.get("deployment", f"{JQ}-worker")) != old_hash
        and d["status"].get("observedGeneration", 0) >= d["metadata"].get("generation", 0)
        and d["status"].get("updatedReplicas", 0) >= 2
        and d["status"].get("readyReplicas", 0) >= 2
        and d["status"].get("replicas", 0) == d["status"].get("updatedReplicas", 0)), 420)
    # Scenario 2's orphans may still hold TenureExpiredLeases pending: start the clock clean.
    wait_for("TenureExpiredLeases inactive before the freeze", lambda: not c.service_get(
        "prometheus", 9090, "/api/v1/query", query='ALERTS{alertname="TenureExpiredLeases"}')["data"]["result"],
        300, interval=5)
    c.enqueue("enqueue-freeze", QUEUE, "freeze", 1500, first_id=300000,
              extra={"provider_seconds": 0.5})

    def spread() -> dict[str, list[str]] | None:
        nodes: dict[str, list[str]] = {}
        for pod, node in pods_of_workers(c).items():
            if node:
                nodes.setdefault(node, []).append(pod)
        return nodes if len(nodes) >= 2 else None
    try:
        nodes = wait_for("worker pods on both worker nodes", spread, 120)
    except KindError:
        # All pods landed on one node: move one by cordoning that node and deleting a pod.
        pod, only = next(iter(pods_of_workers(c).items()))
        c.kubectl("cordon", only, namespaced=False)
        c.kubectl("delete", "pod", pod, "--wait=false")
        nodes = wait_for("worker pods on both worker nodes", spread, 180)
        c.kubectl("uncordon", only, namespaced=False)
    busy = wait_for("a node whose pods hold running jobs", lambda: next(
        (n for n, pods in sorted(nodes.items())
         if any(running_by_pod(c).get(p) for p in pods)), None), 120, interval=1)
    frozen_pods = nodes[busy]
    # Only the workers are partitioned: every other pod on that node (the operator, the
    # exporter, CoreDNS, ...) moves to another node first (PostgreSQL and the monitoring stack
    # are pinned to the control-plane node). The node stays cordoned until it has thawed.
    c.kubectl("drain", busy, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
              "--pod-selector=app.kubernetes.io/component!=worker", "--timeout=240s",
              namespaced=False, timeout=260)
    for ns, dep in ((c.operator_namespace, "tenure"), ("kube-system", "coredns")):
        c.kubectl("-n", ns, "rollout", "status", f"deploy/{dep}", "--timeout=240s", namespaced=False,
                  timeout=260)
    wait_for("the exporter running off the node to be frozen", lambda: [
        p for p in c.get("pods", "-l", "app.kubernetes.io/component=exporter")["items"]
        if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") != busy
        and all(cs.get("ready") for cs in p["status"].get("containerStatuses") or [])], 240)
    assert [p for p in frozen_pods if p in pods_of_workers(c)], f"the workers on {busy} went away"

    c.docker("pause", busy)
    t_freeze_wall = time.time()
    try:
        t_freeze = c.db_now()
        victims = {}
        for pod in frozen_pods:
            for job_id, token, worker in c.sql(
                    "SELECT id, lock_token, locked_by FROM tenure.all_jobs WHERE status = 'running'"
                    f" AND locked_by LIKE '{pod}-%'"):
                victims[int(job_id)] = (token, worker)
        assert victims, f"no running job on frozen node {busy}"
        frozen_workers = {w for _, w in victims.values()}
        ids = sorted(victims)

        fired = wait_for("TenureExpiredLeases firing through Alertmanager to the webhook", lambda:
                         alert_status_times(c, "TenureExpiredLeases", "firing", t_freeze_wall), 480,
                         interval=5)
        c.record("alert_expired_leases_fired_after_freeze_seconds", round(fired[0] - t_freeze_wall, 1))
        wait_for("the frozen node's jobs reaped and completed elsewhere", lambda: c.count(
            f"SELECT count(*) FROM tenure.all_jobs WHERE id IN {sql_list(ids)} AND status = 'completed'")
            == len(ids), 600, interval=3)
        t_recovered = float(c.scalar(
            f"SELECT extract(epoch FROM max(completed_at)) FROM tenure.all_jobs WHERE id IN {sql_list(ids)}"))
        c.record("freeze_recovery_seconds", round(t_recovered - t_freeze, 1))
        c.record("freeze_recovery_bound_seconds", "lease 20 + reaper grace 300 + CronJob schedule <= 60 "
                 "+ reaper pod start")
        resolved = wait_for("TenureExpiredLeases resolved at the webhook", lambda:
                            alert_status_times(c, "TenureExpiredLeases", "resolved", fired[0]), 300,
                            interval=5)
        c.record("alert_expired_leases_resolved_after_recovery_seconds",
                 round(resolved[0] - t_recovered, 1))
    finally:
        # The database's clock just before the thaw: the thawed processes write within
        # milliseconds of it, before any later statement of this test could read the clock.
        try:
            t_before_thaw = c.db_now()
        finally:
            c.docker("unpause", busy)
            c.kubectl("uncordon", busy, namespaced=False, check=False)
    t_thaw = c.db_now()
    c.record("freeze_seconds", round(t_thaw - t_freeze, 1))
    c.record("freeze_victim_jobs", len(ids))

    # The thawed workers' late writes (heartbeat, effect, completion) are rejected and audited.
    def late_rejections() -> list[list[str]]:
        return c.sql(
            "SELECT job_id, event, worker_id, coalesce(detail->>'operation', '') FROM tenure.job_events"
            f" WHERE event IN {sql_list(REJECTED_WRITE_EVENTS)}"
            f" AND worker_id IN {sql_list(sorted(frozen_workers))}"
            f" AND created_at >= to_timestamp({t_before_thaw})")
    rejected = wait_for("late writes from the thawed node rejected and audited", late_rejections, 180,
                        interval=3)
    c.record("freeze_late_writes_rejected", len(rejected))
    c.record("freeze_late_write_operations", sorted({f"{r[1]}:{r[3]}" for r in rejected}))
    # No late write was accepted: each victim completed exactly once, by a worker elsewhere,
    # and after the freeze no frozen worker wrote an accepted event for a victim.
    accepted_late = c.sql(
        "SELECT job_id, event FROM tenure.job_events"
        f" WHERE job_id IN {sql_list(ids)} AND worker_id IN {sql_list(sorted(frozen_workers))}"
        f" AND created_at > to_timestamp({t_freeze})"
        f" AND event NOT IN {sql_list(REJECTED_WRITE_EVENTS)}")
    assert not accepted_late, f"late writes from the frozen node were accepted: {accepted_late}"
    done = c.sql(f"SELECT job_id, worker_id FROM tenure.job_events WHERE event = 'completed'"
                 f" AND job_id IN {sql_list(ids)}")
    assert sorted(int(j) for j, _ in done) == ids, "a victim completed other than exactly once"
    assert not [w for _, w in done if w in frozen_workers]
    # No guarded effect ran twice: each victim's effect key is recorded succeeded once, by the
    # attempt that completed the job (the zombie's late effect_succeed was rejected).
    effects = c.sql(
        "SELECT j.id, e.status, e.lock_token = ev.lock_token FROM tenure.all_jobs j"
        " JOIN tenure.job_executions e ON e.idempotency_key = 'invoice:' || (j.payload->>'invoice_id')"
        " || ':email:v1'"
        " JOIN tenure.job_events ev ON ev.job_id = j.id AND ev.event = 'completed'"
        f" WHERE j.id IN {sql_list(ids)}")
    assert len(effects) == len(ids), f"effect records missing: {effects}"
    assert all(s == "succeeded" for _, s, _ in effects)
    wait_for("the freeze batch drained", lambda: batch_done(c, "freeze", 1500), 600, interval=5)
    completed_once(c, "freeze", 1500)
    wait_for("the thawed node Ready again", lambda: (condition(
        c.get("node", busy, namespaced=False), "Ready") or {}).get("status") == "True", 300)


@pytest.mark.timeout(900)
def test_rolling_update_under_load_loses_nothing(cluster: Cluster) -> None:
    c = cluster
    c.enqueue("enqueue-roll", QUEUE, "roll", 1500, first_id=400000, extra={"provider_seconds": 0.2})
    wait_for("the roll batch started", lambda: c.count(
        "SELECT count(*) FROM tenure.all_jobs WHERE payload->>'batch' = 'roll' AND status = 'completed'")
        > 50, 300, interval=2)
    before = c.get("deployment", f"{JQ}-worker")["metadata"].get("generation")
    t0 = time.time()
    c.patch_jobqueue(JQ, {"concurrency": 2, "reaper": {"graceSeconds": 10}})
    wait_for("a new Deployment generation", lambda: c.get(
        "deployment", f"{JQ}-worker")["metadata"].get("generation") != before, 120)
    c.kubectl("rollout", "status", f"deploy/{JQ}-worker", "--timeout=600s", timeout=620)
    c.record("rolling_update_seconds", round(time.time() - t0, 1))
    wait_for("the roll batch drained", lambda: batch_done(c, "roll", 1500), 600, interval=5)
    completed_once(c, "roll", 1500)
    wasted = c.sql(
        "SELECT e.event, count(*) FROM tenure.job_events e JOIN tenure.all_jobs j ON j.id = e.job_id"
        " WHERE j.payload->>'batch' = 'roll' AND e.event NOT IN ('completed', 'released',"
        " 'released_on_shutdown', 'enqueued', 'claimed') GROUP BY e.event")
    assert not [r for r in wasted if r[0].startswith(("reaped", "retry", "failed", "dead"))], wasted
    attempts = c.sql("SELECT attempt_count, count(*) FROM tenure.all_jobs WHERE payload->>'batch' = 'roll'"
                     " GROUP BY attempt_count ORDER BY 1")
    assert attempts == [["1", "1500"]], f"attempts used by the roll batch: {attempts}"
    released = c.count(
        "SELECT count(*) FROM tenure.job_events e JOIN tenure.all_jobs j ON j.id = e.job_id"
        " WHERE j.payload->>'batch' = 'roll' AND e.event LIKE 'released%'")
    c.record("rolling_update_jobs_released_on_sigterm", released)
    pods = c.worker_pods(JQ)
    assert all(p["spec"]["containers"][0]["args"][p["spec"]["containers"][0]["args"].index(
        "--concurrency") + 1] == "2" for p in pods)


@pytest.mark.timeout(600)
def test_bad_manifests_are_refused_or_degraded_without_pods(cluster: Cluster) -> None:
    c = cluster
    bad = """
apiVersion: tenure.dev/v1alpha1
kind: JobQueue
metadata: {name: bad-heartbeat}
spec:
  queue: bad
  image: IMAGE
  app: tenure.demo.tasks:app
  database: {secretRef: {name: tenure-db, key: url}}
  leaseSeconds: 30
  heartbeatSeconds: 20
""".replace("IMAGE", c.image)
    proc = c.kubectl("apply", "-f", "-", input=bad, check=False)
    assert proc.returncode != 0, "the API server accepted a heartbeat above a third of the lease"
    assert "heartbeat" in proc.stderr.lower(), proc.stderr
    assert c.kubectl("get", "jobqueue", "bad-heartbeat", check=False).returncode != 0
    c.record("cel_refusal_message", proc.stderr.strip().splitlines()[-1][:300])

    missing = """
apiVersion: tenure.dev/v1alpha1
kind: JobQueue
metadata: {name: no-secret}
spec:
  queue: nosecret
  image: IMAGE
  imagePullPolicy: Never
  app: tenure.demo.tasks:app
  database: {secretRef: {name: does-not-exist, key: url}}
""".replace("IMAGE", c.image)
    c.apply(missing)
    try:
        cond = wait_for("Degraded=True on the JobQueue without its Secret", lambda: (
            d if (d := condition(c.get("jobqueue", "no-secret"), "Degraded")) and d.get("status") == "True"
            else None), 180)
        c.record("missing_secret_degraded_reason", f"{cond.get('reason')}: {cond.get('message', '')[:200]}")
        time.sleep(20)  # a few operator intervals: nothing may start meanwhile
        pods = c.worker_pods("no-secret")
        restarts = sum(cs.get("restartCount", 0) for p in pods
                       for cs in p["status"].get("containerStatuses") or [])
        assert restarts == 0, f"pods of the Degraded JobQueue crash-loop: {restarts} restarts"
        dep = c.kubectl("get", "deployment", "no-secret-worker", "-o", "json", check=False)
        if dep.returncode == 0:
            assert int(json.loads(dep.stdout)["spec"].get("replicas") or 0) == 0
        else:
            assert not pods
    finally:
        c.kubectl("delete", "jobqueue", "no-secret", "--ignore-not-found", "--wait=true", timeout=180)


@pytest.mark.timeout(900)
def test_observability_in_cluster(cluster: Cluster) -> None:
    c = cluster
    # Retries (with lease extensions: 7 s of work against a 5 s heartbeat) and dead letters, so
    # that the retry and failure panels have series to show.
    c.enqueue("enqueue-flaky", QUEUE, "flaky", 10, task="flaky_once", first_id=500000,
              extra={"seconds": 7})
    c.enqueue("enqueue-poison", QUEUE, "poison", 3, task="always_fails", first_id=600000)
    wait_for("the flaky jobs completed on their second attempt", lambda: c.count(
        "SELECT count(*) FROM tenure.all_jobs WHERE payload->>'batch' = 'flaky' AND status = 'completed'"
        " AND attempt_count = 2") == 10, 300, interval=3)
    wait_for("the poison jobs dead-lettered", lambda: c.count(
        "SELECT count(*) FROM tenure.all_jobs WHERE payload->>'batch' = 'poison' AND status = 'failed'")
        == 3, 120, interval=3)
    restarts = sum(cs.get("restartCount", 0) for p in c.worker_pods(JQ)
                   for cs in p["status"].get("containerStatuses") or [])
    assert restarts == 0, "a worker restarted on a poison job"
    # Flow control's panels: a rate limit (its tokens), and a ready keyed job naming it on a queue
    # of its own, which no worker serves (the oldest job nothing holds back); cancelled after.
    seeded = c.tenure_pod("flow-seed", ["sh", "-c", "tenure flow rate kind-rate --per-second 5 --burst 5 && "
                                        "tenure enqueue noop --queue kind-flow --flow-key tenant:kind "
                                        "--rate-limit kind-rate"])
    flow_job = seeded.split()[-1]
    try:
        _check_observability(c)
    finally:
        c.tenure_pod("flow-unseed", ["tenure", "jobs", "cancel", flow_job])


def _check_observability(c: Cluster) -> None:
    """Prometheus found the workers and the rules, and every dashboard panel has data."""
    time.sleep(15)  # three scrapes
    targets = c.service_get("prometheus", 9090, "/api/v1/targets")["data"]["activeTargets"]
    discovered = [t for t in targets if "__meta_kubernetes_pod_name" in t.get("discoveredLabels", {})]
    workers = [t for t in discovered if t["labels"].get("component") == "worker"]
    assert workers, f"Prometheus discovered no worker pod through the Kubernetes API: {targets}"
    assert all(t["health"] == "up" for t in workers if t["labels"].get("pod") in pods_of_workers(c)), workers
    c.record("prometheus_targets", sorted({f"{t['labels'].get('component')}:{t['health']}"
                                           for t in discovered}))
    rules = c.service_get("prometheus", 9090, "/api/v1/rules")["data"]["groups"]
    names = {r["name"] for g in rules for r in g["rules"]}
    assert "TenureExpiredLeases" in names and len(names) >= 10, names

    # Every dashboard panel returns data from this Prometheus (at least one of its queries),
    # except the SQS API row: the chart's sqs component is not deployed in this scenario (the
    # live Prometheus test in tests/prometheus checks that row against a real tenure sqs).
    empty = []
    checked = 0
    for board in sorted((ROOT / "dashboards").glob("*.json")):
        for panel in json.loads(board.read_text()).get("panels", []):
            exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
            if not exprs or all("tenure_sqs_" in e for e in exprs):
                continue
            checked += 1
            ok = False
            for expr in exprs:
                q = expr.replace('=~"$queue"', '=~".+"').replace("$__rate_interval", "5m")
                res = c.service_get("prometheus", 9090, "/api/v1/query", query=q)
                if res["data"]["result"]:
                    ok = True
                    break
            if not ok:
                empty.append(f"{board.stem}: {panel.get('title')}")
    c.record("dashboard_panels_checked", checked)
    c.record("dashboard_panels_empty", empty)
    assert checked > 0
    assert not empty, f"dashboard panels with no data in the cluster: {empty}"


# ------------------------------------------------------------ chart components: ui and sqs
COMPONENT_DB_SECRET = "tenure-components-db"
UI_USERS_SECRET = "tenure-ui-users"
UI_USER, UI_PASSWORD = "kind-viewer", "kind-viewer-password"
SQS_CREDENTIALS_SECRET = "tenure-sqs-credentials"
SQS_KEY, SQS_SECRET = "AKIDKINDE2E", "kind/e2e/SecretKey"
SQS_QUEUE = "kind-components"


def helm_upgrade(c: Cluster, *sets: str) -> None:
    """``helm upgrade tenure`` keeping run.sh's values (image, pull policy, interval); the chart's own
    defaults come from this checkout (`--reset-then-reuse-values`, not the installed release's)."""
    cmd = ["helm", "upgrade", "tenure", str(ROOT / "charts/tenure"), "--kube-context", c.context,
           "--namespace", c.operator_namespace, "--reset-then-reuse-values", "--wait", "--timeout", "300s"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
    if proc.returncode != 0:
        raise KindError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def ui_missing(c: Cluster) -> str | None:
    """Why ``tenure ui`` cannot run from the image (None when ``tenure ui --help`` works)."""
    try:
        c.docker("run", "--rm", "--network", "none", c.image, "ui", "--help", timeout=120)
    except KindError as exc:
        return f"`tenure ui` is not in {c.image} (the command has not landed on this branch): {exc}"[:400]
    return None


def secret_from_literal(c: Cluster, name: str, **data: str) -> None:
    args = ["-n", c.operator_namespace, "create", "secret", "generic", name, "--dry-run=client", "-o", "yaml"]
    args += [f"--from-literal={k}={v}" for k, v in data.items()]
    manifest = c.kubectl(*args, namespaced=False).stdout
    c.kubectl("-n", c.operator_namespace, "apply", "-f", "-", input=manifest, namespaced=False)


def http(url: str, method: str = "GET", auth: tuple[str, str] | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of one request; 4xx/5xx are returned, not raised."""
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if method == "POST":
        req.add_header("Content-Type", "application/json")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def components(cluster: Cluster) -> Iterator[str | None]:
    """The chart upgraded with sqs.enabled (and ui.enabled when the image has `tenure ui`), with
    their Secrets; yields why the UI is missing (None when it runs). Switched off afterwards."""
    c = cluster
    missing = ui_missing(c)
    # Both components need a migrated schema; a JobQueue's migration Job may not have run yet.
    c.tenure_pod("migrate-components", ["tenure", "migrate"])
    secret_from_literal(c, COMPONENT_DB_SECRET, url="postgresql://tenure:tenure@postgres."
                        f"{c.namespace}.svc:5432/tenure")
    secret_from_literal(c, SQS_CREDENTIALS_SECRET, credentials=f"# the kind suite's key\n"
                        f"{SQS_KEY}:{SQS_SECRET}:kind-*\n")
    sets = ["sqs.enabled=true", f"sqs.databaseUrlSecret.name={COMPONENT_DB_SECRET}",
            f"sqs.credentialsSecret.name={SQS_CREDENTIALS_SECRET}"]
    deployments = ["tenure-sqs"]
    if missing is None:
        script = f"import bcrypt; print(bcrypt.hashpw({UI_PASSWORD.encode()!r}, bcrypt.gensalt()).decode())"
        hashed = c.docker("run", "--rm", "--network", "none", "--entrypoint", "python", c.image, "-c",
                          script).strip()
        assert hashed.startswith("$2"), hashed
        secret_from_literal(c, UI_USERS_SECRET, users=f"{UI_USER}:{hashed}:viewer\n")
        sets += ["ui.enabled=true", f"ui.databaseUrlSecret.name={COMPONENT_DB_SECRET}",
                 f"ui.usersSecret.name={UI_USERS_SECRET}"]
        deployments.append("tenure-ui")
    t0 = time.time()
    try:
        helm_upgrade(c, *sets)
        for dep in deployments:
            # A rebuilt tenure:dev keeps its tag (and the Secrets may be new): restart the pods.
            c.kubectl("-n", c.operator_namespace, "rollout", "restart", f"deploy/{dep}", namespaced=False)
            c.kubectl("-n", c.operator_namespace, "rollout", "status", f"deploy/{dep}", "--timeout=240s",
                      namespaced=False, timeout=260)
        c.record("components_upgrade_to_ready_seconds", round(time.time() - t0, 1))
        # From inside the cluster, through each Service's DNS name and ClusterIP.
        urls = [f"http://{dep}.{c.operator_namespace}.svc:{9324 if dep == 'tenure-sqs' else 8080}/healthz"
                for dep in deployments]
        probe = ("import sys, urllib.request\n"
                 "for url in sys.argv[1:]:\n"
                 "    with urllib.request.urlopen(url, timeout=10) as r:\n"
                 "        print(url, r.status, r.read(100).decode())\n")
        # An old pod still terminating answers /healthz 503 for its shutdown delay while the
        # Service drops it (after `rollout status` returned): ask again until it is gone.
        out = wait_for("every component's /healthz 200 through its Service",
                       lambda: c.tenure_pod("components-healthz", ["python", "-c", probe, *urls]), timeout=90,
                       interval=3)
        for url in urls:
            assert f"{url} 200 ok" in out, out
        yield missing
    finally:
        helm_upgrade(c, "ui.enabled=false", "sqs.enabled=false")


@pytest.mark.timeout(900)
def test_components_sqs_through_its_service(cluster: Cluster, components: str | None) -> None:
    """boto3 -> kubectl port-forward -> Service tenure-sqs: create, send, receive, delete, with
    the keys of the chart's credentials Secret; the database shows the message completed."""
    c = cluster
    with c.port_forward("tenure-sqs", 9324, namespace=c.operator_namespace) as port:
        url = f"http://127.0.0.1:{port}"

        def client(secret: str = SQS_SECRET) -> Any:
            return boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id=SQS_KEY,
                                aws_secret_access_key=secret,
                                config=BotoConfig(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5))
        sqs = client()
        queue_url = sqs.create_queue(QueueName=SQS_QUEUE)["QueueUrl"]
        assert queue_url.endswith(f"/{SQS_QUEUE}"), queue_url
        body = json.dumps({"from": "kind", "at": time.time()})
        sent = sqs.send_message(QueueUrl=queue_url, MessageBody=body)
        t0 = time.time()
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=10,
                                       VisibilityTimeout=60).get("Messages", [])
        c.record("sqs_receive_through_service_seconds", round(time.time() - t0, 2))
        assert [m["MessageId"] for m in messages] == [sent["MessageId"]], messages
        assert messages[0]["Body"] == body
        job_id = int(sent["MessageId"].replace("-", ""), 16)
        assert c.scalar(f"SELECT status FROM tenure.all_jobs WHERE id = {job_id}") == "running"
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=messages[0]["ReceiptHandle"])
        row = c.sql(f"SELECT queue_name, status FROM tenure.all_jobs WHERE id = {job_id}")
        assert row == [[SQS_QUEUE, "completed"]], row
        assert not sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages")
        # The server enforces the Secret's keys: a wrong secret, and a queue outside the globs.
        with pytest.raises(ClientError) as refused:
            client("not-the-secret").list_queues()
        assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        with pytest.raises(ClientError) as refused:
            sqs.create_queue(QueueName="outside-the-globs")
        assert refused.value.response["Error"]["Code"] == "AccessDenied"


@pytest.mark.timeout(600)
def test_components_ui_through_its_service(cluster: Cluster, components: str | None) -> None:
    """HTTP -> kubectl port-forward -> Service tenure-ui: the overview page and the queues API for
    the Secret's viewer; read-only by default, so a pause answers 403 and changes nothing."""
    if components is not None:
        pytest.skip(components)
    c = cluster
    auth = (UI_USER, UI_PASSWORD)
    with c.port_forward("tenure-ui", 8080, namespace=c.operator_namespace) as port:
        base = f"http://127.0.0.1:{port}"
        status, ctype, body = http(f"{base}/", auth=auth)
        assert status == 200 and "text/html" in ctype, (status, ctype, body[:300])
        assert 'data-page="overview"' in body, body[:500]
        assert 'data-can-write="false"' in body, "the read-only UI renders a writable page"
        # The image's non-editable install carries the assets the page loads.
        assets = re.findall(r'(?:href|src)="(/[^"]*static/[^"]+)"', body)
        assert assets, body[:500]
        for asset in assets:
            status, _, text = http(f"{base}{asset}", auth=auth)
            assert status == 200 and text.strip(), (asset, status)
        # --users is enforced: no credentials, or a wrong password, get 401.
        assert http(f"{base}/api/v1/queues")[0] == 401
        assert http(f"{base}/api/v1/queues", auth=(UI_USER, "wrong"))[0] == 401
        status, ctype, body = http(f"{base}/api/v1/queues", auth=auth)
        assert status == 200 and "application/json" in ctype, (status, ctype, body[:300])
        queues = json.loads(body)["queues"]
        assert isinstance(queues, list)
        c.record("ui_queues_listed", sorted(q["name"] for q in queues))
        # The same database as the SQS component: its queue, done within the hour, is listed.
        if c.count(f"SELECT count(*) FROM tenure.all_jobs WHERE queue_name = '{SQS_QUEUE}'"
                   " AND completed_at > now() - interval '50 minutes'"):
            assert SQS_QUEUE in {q["name"] for q in queues}, queues
        # ui.readOnly defaults to true: the server refuses the write, and nothing is paused.
        status, _, body = http(f"{base}/api/v1/queues/{SQS_QUEUE}/pause", method="POST", auth=auth)
        assert status == 403 and "read-only" in body, (status, body[:300])
        c.record("ui_read_only_pause_answer", body[:200])
        assert c.count(f"SELECT count(*) FROM tenure.queues WHERE name = '{SQS_QUEUE}' AND paused") == 0


# ------------------------------------------ sqs: a rolling restart under consumption (issue 36)
ROLL_PER_CONSUMER = 1000
"""Messages for each consumer (boto3, Celery): 2,000 in all."""
ROLL_FIRST = 750
"""Sent before the rolls; the other 250 a consumer after them, so that its progress after the
rolls is seen whatever the pace of the machine."""
ROLL_RESTARTS = 2
BOTO3_PACE = 0.12
"""Seconds of work per message of the boto3 consumer (about 8 a second)."""
CELERY_PACE = 0.25
"""Seconds of each Celery task, 2 threads (about 8 a second): the 750 first messages outlast two
rolls on an idle machine, and a slower machine only slows the consumers down."""
CELERY_BAD_LINES = ("Traceback", "ERROR/", "CRITICAL", "Couldn't ack", "Error in timer", "Unrecoverable error",
                    "Connection to broker lost")
"""What Celery logs when a request fails or a poll loop ends (tests/acceptance/test_sqs_celery.py)."""


def _pod_log(c: Cluster, pod: str) -> str:
    return c.kubectl("logs", pod, timeout=60).stdout


def _pod_phase(c: Cluster, pod: str) -> str:
    return str(c.get("pod", pod)["status"].get("phase"))


def _boto3_events(log: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The consumer's JSON events, and the other lines of its log."""
    events, other = [], []
    for line in log.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            if line.strip():
                other.append(line)
    return events, other


def _celery_done(log: str) -> list[tuple[str, int, float]]:
    """(task id, n, time) per ``done`` line of the worker's log."""
    out = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "done":
            out.append((parts[1], int(parts[2]), float(parts[3])))
    return out


def _longest_pause(times: list[float], until: float) -> float:
    """The longest gap between successive completions up to ``until`` (while work was queued)."""
    ts = sorted(t for t in times if t <= until)
    return round(max((b - a for a, b in zip(ts, ts[1:])), default=0.0), 2)


def _send(c: Cluster, boto3_queue: str, celery_queue: str, ns: range) -> None:
    """``ns`` to both consumers through a port-forward (it pins one SQS pod: only between rolls):
    SendMessageBatch for boto3, Celery's ``send_task`` (Kombu's SQS transport) for the worker."""
    import importlib.util
    from urllib.parse import quote

    from celery import Celery

    spec = importlib.util.spec_from_file_location("roll_tasks", ROOT / "e2e/kind/sqs-clients/roll_tasks.py")
    assert spec and spec.loader
    roll_tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roll_tasks)
    with c.port_forward("tenure-sqs", 9324, namespace=c.operator_namespace) as port:
        sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id=SQS_KEY, aws_secret_access_key=SQS_SECRET,
                           config=BotoConfig(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5))
        queue_url = sqs.create_queue(QueueName=boto3_queue)["QueueUrl"]
        batch = list(ns)
        for i in range(0, len(batch), 10):
            entries = [{"Id": str(n), "MessageBody": json.dumps({"n": n})} for n in batch[i:i + 10]]
            res = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
            assert not res.get("Failed"), res["Failed"]
        sender = Celery("roll-sender", broker=f"sqs://{SQS_KEY}:{quote(SQS_SECRET, safe='')}@127.0.0.1:{port}",
                        set_as_current=False)
        sender.conf.update(broker_transport_options=dict(roll_tasks.app.conf.broker_transport_options),
                           task_default_queue=celery_queue)
        try:
            with sender.producer_or_acquire() as producer:
                for n in batch:
                    sender.send_task("roll.record", args=[n], queue=celery_queue, producer=producer)
        finally:
            sender.close()


@pytest.mark.timeout(900)
def test_components_sqs_rolling_restart_under_consumption(cluster: Cluster, components: str | None) -> None:
    """Issue 36: ``kubectl rollout restart deploy/tenure-sqs`` (2 replicas), twice, while a boto3
    consumer and a Celery worker, in pods, consume 2,000 messages through the Service's DNS name:
    every message done exactly once (the database: every job completed), no client error, and the
    Celery worker goes on after the rolls (it runs the messages sent after them)."""
    c = cluster
    clients_image = os.environ.get("TENURE_KIND_CLIENTS_IMAGE", "tenure-e2e/sqs-clients:dev")
    run = f"{int(time.time()) % 1_000_000:06d}"
    boto3_queue, celery_queue = f"kind-roll-boto3-{run}", f"roll-celery-{run}"
    celery_sqs_queue = f"kind-{celery_queue}"  # roll_tasks.py: queue_name_prefix "kind-"
    pods = ("sqs-boto3-consumer", "sqs-celery-worker")
    dep = c.get("deployment", "tenure-sqs", "-n", c.operator_namespace, namespaced=False)
    selector = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())

    def sqs_pods() -> set[str]:
        items = c.get("pods", "-n", c.operator_namespace, "-l", selector, namespaced=False)["items"]
        return {p["metadata"]["name"] for p in items}

    helm_upgrade(c, "sqs.replicas=2")
    c.kubectl("-n", c.operator_namespace, "rollout", "status", "deploy/tenure-sqs", "--timeout=240s",
              namespaced=False, timeout=260)
    assert c.get("deployment", "tenure-sqs", "-n", c.operator_namespace,
                 namespaced=False)["status"].get("readyReplicas") == 2
    try:
        c.apply(c.kubectl("create", "configmap", "sqs-clients", "--dry-run=client", "-o", "yaml",
                          f"--from-file={ROOT / 'e2e/kind/sqs-clients/boto3_consumer.py'}",
                          f"--from-file={ROOT / 'e2e/kind/sqs-clients/roll_tasks.py'}").stdout)
        t0 = time.time()
        _send(c, boto3_queue, celery_queue, range(ROLL_FIRST))
        c.record("sqs_roll_first_send_seconds", round(time.time() - t0, 1))

        manifest = (ROOT / "e2e/kind/manifests/sqs-clients.yaml").read_text()
        for key, value in {
            "${CLIENTS_IMAGE}": clients_image,
            "${ENDPOINT}": f"http://tenure-sqs.{c.operator_namespace}.svc:9324",
            "${KEY}": SQS_KEY, "${SECRET}": SQS_SECRET,
            "${BOTO3_QUEUE}": boto3_queue, "${BOTO3_EXPECTED}": str(ROLL_PER_CONSUMER),
            "${BOTO3_PACE}": str(BOTO3_PACE), "${CELERY_QUEUE}": celery_queue, "${CELERY_PACE}": str(CELERY_PACE),
        }.items():
            manifest = manifest.replace(key, value)
        for pod in pods:
            c.kubectl("delete", "pod", pod, "--ignore-not-found", "--wait=true", timeout=120)
        c.apply(manifest)

        def done_counts() -> tuple[int, int]:
            for pod in pods:
                if _pod_phase(c, pod) == "Failed":
                    raise AssertionError(f"pod {pod} failed: {_pod_log(c, pod)[-3000:]}")
            boto3_done = sum(1 for e in _boto3_events(_pod_log(c, pods[0]))[0] if e["event"] == "done")
            return boto3_done, len(_celery_done(_pod_log(c, pods[1])))

        def both_started() -> bool:
            try:
                return min(done_counts()) >= 30
            except KindError:  # a pod still being created has no log yet
                return False
        wait_for("both consumers under way (30 messages each)", both_started, timeout=240)

        rolls: list[dict[str, Any]] = []
        for _ in range(ROLL_RESTARTS):
            old = sqs_pods()
            before = done_counts()
            t_roll = time.time()
            c.kubectl("-n", c.operator_namespace, "rollout", "restart", "deploy/tenure-sqs", namespaced=False)
            c.kubectl("-n", c.operator_namespace, "rollout", "status", "deploy/tenure-sqs", "--timeout=300s",
                      namespaced=False, timeout=320)
            t_status = time.time()
            wait_for("the old tenure-sqs pods gone", lambda: not (sqs_pods() & old), timeout=120, interval=1)
            t_gone = time.time()
            after = done_counts()
            rolls.append({"status_seconds": round(t_status - t_roll, 1), "old_pods_gone_seconds": round(t_gone - t_roll, 1),
                          "start": t_roll, "end": t_gone, "boto3_done": [before[0], after[0]],
                          "celery_done": [before[1], after[1]]})
        c.record("sqs_roll_rollouts", [{k: v for k, v in r.items() if k not in ("start", "end")} for r in rolls])

        t_topup = time.time()
        _send(c, boto3_queue, celery_queue, range(ROLL_FIRST, ROLL_PER_CONSUMER))

        def all_done() -> bool:
            b, w = done_counts()
            return b >= ROLL_PER_CONSUMER and w >= ROLL_PER_CONSUMER
        wait_for(f"{2 * ROLL_PER_CONSUMER} messages done by the consumers", all_done, timeout=420, interval=3)
        wait_for("the boto3 consumer exited", lambda: _pod_phase(c, pods[0]) in ("Succeeded", "Failed"), timeout=60)
        t_end = time.time()

        # ---- boto3: every message deleted exactly once, no client error, the pod exited 0.
        boto3_log = _pod_log(c, pods[0])
        events, other = _boto3_events(boto3_log)
        errors = [e for e in events if e["event"] == "error"]
        done = [e for e in events if e["event"] == "done"]
        receives = [e["t"] for e in events if e["event"] == "receive"]
        foreign = [e for e in done if e["n"] is None]
        boto3_ns = sorted(e["n"] for e in done if e["n"] is not None)
        # ---- Celery: every task run exactly once, nothing bad in its log, still running.
        celery_log = _pod_log(c, pods[1])
        celery = _celery_done(celery_log)
        celery_ns = sorted(n for _, n, _ in celery)
        bad = [line for line in celery_log.splitlines() if any(b in line for b in CELERY_BAD_LINES)]
        first_done = {"boto3": max(e["t"] for e in done if e["n"] < ROLL_FIRST),
                      "celery": max(t for _, n, t in celery if n < ROLL_FIRST)}
        roll_window: tuple[float, float] = (rolls[0]["start"], rolls[-1]["end"])
        figures = {
            "messages": {"boto3": len(done), "celery": len(celery)},
            "client_errors": {"boto3": len(errors), "celery": len(bad)},
            "longest_pause_seconds_while_queued": {
                "boto3": _longest_pause([e["t"] for e in done], first_done["boto3"]),
                "celery": _longest_pause([t for _, _, t in celery], first_done["celery"])},
            "boto3_longest_gap_between_receives_seconds": _longest_pause(receives, t_end),
            "done_during_the_rolls": {
                "boto3": sum(1 for e in done if roll_window[0] <= e["t"] <= roll_window[1]),
                "celery": sum(1 for _, _, t in celery if roll_window[0] <= t <= roll_window[1])},
            "done_after_the_rolls": {
                "boto3": sum(1 for e in done if e["t"] > roll_window[1]),
                "celery": sum(1 for _, _, t in celery if t > roll_window[1])},
            "first_batch_done_after_roll_start_seconds": {
                k: round(v - roll_window[0], 1) for k, v in first_done.items()},
            "topup_to_all_done_seconds": round(t_end - t_topup, 1),
            "rollouts": c.figures["sqs_roll_rollouts"],
        }
        c.record("sqs_roll", figures)
        print(json.dumps(figures, indent=2))
        assert errors == [], f"boto3 client errors through the rolls: {errors[:10]}"
        assert not [line for line in other if "Traceback" in line], boto3_log[-3000:]
        assert foreign == [], f"boto3: messages that the test did not send: {foreign[:5]}"
        assert boto3_ns == list(range(ROLL_PER_CONSUMER)), \
            f"boto3: {len(boto3_ns)} deletes, {len(set(boto3_ns))} distinct of {ROLL_PER_CONSUMER}"
        assert _pod_phase(c, pods[0]) == "Succeeded", boto3_log[-3000:]
        assert bad == [], f"the Celery worker logged failures through the rolls: {bad[:10]}"
        assert celery_ns == list(range(ROLL_PER_CONSUMER)), \
            f"celery: {len(celery_ns)} runs, {len(set(celery_ns))} distinct of {ROLL_PER_CONSUMER}"
        assert len({task_id for task_id, _, _ in celery}) == ROLL_PER_CONSUMER
        assert _pod_phase(c, pods[1]) == "Running", celery_log[-3000:]
        # Both consumed while the pods were replaced, and went on after (the top-up).
        assert min(figures["done_during_the_rolls"].values()) > 0, figures
        assert min(figures["done_after_the_rolls"].values()) > 0, figures
        # No stall: a consumer whose poll loop ended would have waited for ever (up to the timeout).
        assert max(figures["longest_pause_seconds_while_queued"].values()) < 60, figures
        # The database: every message of both queues a completed job.
        rows = c.sql("SELECT queue_name, count(*), count(*) FILTER (WHERE status = 'completed')"
                     f" FROM tenure.all_jobs WHERE queue_name IN {sql_list([boto3_queue, celery_sqs_queue])}"
                     " GROUP BY queue_name ORDER BY queue_name")
        assert sorted(rows) == sorted([[boto3_queue, str(ROLL_PER_CONSUMER), str(ROLL_PER_CONSUMER)],
                                       [celery_sqs_queue, str(ROLL_PER_CONSUMER), str(ROLL_PER_CONSUMER)]]), rows
    finally:
        for pod in pods:
            log = c.kubectl("logs", pod, check=False).stdout
            if log:
                c.artifacts.mkdir(parents=True, exist_ok=True)
                (c.artifacts / f"{pod}.log").write_text(log)
        c.kubectl("delete", "pod", *pods, "--ignore-not-found", "--wait=false", check=False)
        c.kubectl("delete", "configmap", "sqs-clients", "--ignore-not-found", check=False)
