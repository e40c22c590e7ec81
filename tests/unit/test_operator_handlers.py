"""The reconcile engine behind the kopf handlers, driven with an in-memory cluster."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from tenure.core.errors import ConfigError
from tenure.operator import handlers as h
from tenure.operator import reconcile as rc
from tenure.operator.kube import KubeError

T0 = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.UTC)
NS = "shop"


@pytest.fixture(autouse=True)
def cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names resolve as in a cluster whose namespace NS has the Service the DSNs name."""
    monkeypatch.setattr(h, "_resolves", lambda name: name.endswith(f".{NS}.svc"))


class FakeKube:
    """Objects keyed by (kind, namespace, name); apply replaces what it is given (as SSA does
    for the fields one manager owns). Deployments get a status with readyReplicas."""

    def __init__(self, store: dict[tuple[str, str, str], dict[str, Any]] | None = None) -> None:
        self.store = store if store is not None else {}
        self.monitoring = False
        self.applies = 0
        self.deleted: list[tuple[str, str]] = []
        self.fail_apply: str | None = None
        self.fail_get: str | None = None
        #: Condition a migration Job gets when applied (None: it stays running, as with no
        #: kubelet); "Complete" stands in for a pod that ran `tenure migrate` successfully.
        self.job_outcome: str | None = "Complete"
        self.pods: list[dict[str, Any]] = []
        #: JobQueues the namespace lists (the exporter's owners), kept apart from the children.
        self.jobqueues: dict[str, dict[str, Any]] = {}

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        if self.fail_apply == manifest["kind"]:
            raise KubeError(403, f"{manifest['kind']} is forbidden")
        self.applies += 1
        key = (manifest["kind"], manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        obj = copy.deepcopy(dict(manifest))
        if manifest["kind"] == "Deployment":
            obj["status"] = {"readyReplicas": obj["spec"]["replicas"]}
        if manifest["kind"] == "Job" and self.job_outcome is not None:
            obj["status"] = {"conditions": [{"type": self.job_outcome, "status": "True",
                                             "lastTransitionTime": "2026-03-01T08:00:00Z"}]}
        self.store[key] = obj
        return copy.deepcopy(obj)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.fail_get == kind:
            raise KubeError(403, f"{kind} {name} is forbidden")
        obj = self.store.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self.deleted.append((kind, name))
        return self.store.pop((kind, namespace, name), None) is not None

    def list(self, api_version: str, kind: str, namespace: str,
             label_selector: str = "") -> list[dict[str, Any]]:
        if kind == "Pod":
            return copy.deepcopy(self.pods)
        if kind == "JobQueue":
            return [copy.deepcopy(jq) for _, jq in sorted(self.jobqueues.items())]
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [copy.deepcopy(obj) for (k, ns, _), obj in sorted(self.store.items())
                if k == kind and ns == namespace
                and wanted.items() <= ((obj.get("metadata") or {}).get("labels") or {}).items()]

    def api_available(self, api_version: str, kind: str) -> bool:
        return self.monitoring and kind == "ServiceMonitor"

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.store)


def add_secret(kube: FakeKube, dsn: str = "postgresql://u:p@db/q") -> None:
    kube.store[("Secret", NS, "db")] = {
        "kind": "Secret",
        "data": {"url": base64.b64encode(dsn.encode()).decode()},
    }


def body(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "tenure.dev/v1alpha1",
        "kind": "JobQueue",
        "metadata": {"name": "mail", "namespace": NS, "uid": "u-1", "generation": 4},
        "spec": spec
        or {
            "queue": "emails",
            "image": "tenure:1",
            "app": "shop.tasks:app",
            "database": {"secretRef": {"name": "db"}},
            "scaling": {"minReplicas": 1, "maxReplicas": 8, "scaleDownStabilizationSeconds": 60},
        },
        "status": status or {},
    }


def fetcher(figures: h.QueueFigures | Exception) -> h.StatsFetcher:
    def fetch(dsn: str, schema: str, queue: str) -> h.QueueFigures:
        # The Secret's bare host "db" is read as the Service in the JobQueue's namespace.
        assert dsn == h.dsn_in_namespace("postgresql://u:p@db/q", NS, h._resolves)
        assert "host=db.shop.svc" in dsn
        assert (schema, queue) == ("tenure", "emails")
        if isinstance(figures, Exception):
            raise figures
        return figures

    return fetch


def adopt(child: dict[str, Any]) -> None:
    child["metadata"]["ownerReferences"] = [{"kind": "JobQueue", "name": "mail", "uid": "u-1"}]


def run(
    kube: FakeKube,
    b: dict[str, Any],
    figures: h.QueueFigures | Exception,
    now: dt.datetime = T0,
    scale: bool = True,
) -> h.Outcome:
    # The exporter's owners come from a list of the namespace's JobQueues: store this one.
    kube.jobqueues[b["metadata"]["name"]] = copy.deepcopy(b)
    return h.reconcile_jobqueue(b, kube, fetcher(figures), adopt, now, scale=scale)


def cond(outcome: h.Outcome, type_: str) -> dict[str, Any]:
    (c,) = [c for c in outcome.status["conditions"] if c["type"] == type_]
    return c


def feed_back(b: dict[str, Any], outcome: h.Outcome) -> dict[str, Any]:
    """What the next pass sees after kopf applied the status patch."""
    nb = copy.deepcopy(b)
    nb["status"] = {**nb["status"], **copy.deepcopy(outcome.status)}
    return nb


def test_first_pass_creates_owned_children_and_scales_from_stats() -> None:
    kube = FakeKube()
    add_secret(kube)
    out = run(kube, body(), h.QueueFigures(ready=35, running=0, scheduled=2, running_expired=1))
    assert out.error_reason is None
    assert kube.kinds() == ["CronJob", "Deployment", "Deployment", "Job",
                            "PodDisruptionBudget", "Secret", "Service", "Service"]
    for (kind, _, _), obj in kube.store.items():
        if kind != "Secret":
            assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    st = out.status
    assert (st["ready"], st["running"], st["runningExpired"], st["scheduled"]) == (35, 0, 1, 2)
    assert (st["desiredReplicas"], st["replicas"], st["observedGeneration"]) == (4, 4, 4)
    assert st["lastScaleReason"].startswith("initial size 4")
    assert [e.reason for e in out.events] == ["MigrationStarted", "ScaledUp"]
    assert cond(out, "Ready")["status"] == "True"
    assert cond(out, "Degraded")["status"] == "False"
    assert cond(out, "SchemaReady")["reason"] == "Migrated"


def test_restart_converges_without_duplicates_or_new_events() -> None:
    store: dict[tuple[str, str, str], dict[str, Any]] = {}
    kube = FakeKube(store)
    add_secret(kube)
    figures = h.QueueFigures(ready=35)
    b = feed_back(body(), run(kube, body(), figures))
    before = copy.deepcopy(store)
    # A new operator process: fresh client, same cluster, the status kopf had patched.
    again = run(FakeKube(store), b, figures, now=T0 + dt.timedelta(seconds=10))
    assert store == before
    assert again.events == ()
    assert again.status["replicas"] == 4
    assert cond(again, "Ready")["lastTransitionTime"] == cond(
        h.Outcome(b["status"]), "Ready"
    )["lastTransitionTime"]


def test_missing_secret_degrades_and_keeps_replicas() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), h.QueueFigures(ready=70)))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7
    del kube.store[("Secret", NS, "db")]
    out = run(kube, b, h.QueueFigures(), now=T0 + dt.timedelta(seconds=600))
    assert out.error_reason == "SecretMissing"
    assert not out.permanent
    assert cond(out, "Degraded") | {"status": "True", "reason": "SecretMissing"} == cond(
        out, "Degraded"
    )
    assert cond(out, "Ready")["status"] == "False"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7
    assert out.status["replicas"] == 7
    assert [e.type for e in out.events] == ["Warning"]
    # Same failure again: no second Warning event, still degraded.
    out2 = run(kube, feed_back(b, out), h.QueueFigures(), now=T0 + dt.timedelta(seconds=610))
    assert out2.events == ()
    assert cond(out2, "Degraded")["status"] == "True"


def test_missing_key_in_secret() -> None:
    kube = FakeKube()
    kube.store[("Secret", NS, "db")] = {"data": {"other": "eA=="}}
    out = run(kube, body(), h.QueueFigures())
    assert out.error_reason == "SecretKeyMissing"
    assert "'url'" in out.error_message


def test_unreadable_secret_degrades_instead_of_escaping() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), h.QueueFigures(ready=70)))
    kube.fail_get = "Secret"
    out = run(kube, b, h.QueueFigures(), now=T0 + dt.timedelta(seconds=600))
    assert out.error_reason == "SecretUnreadable" and "forbidden" in out.error_message
    assert cond(out, "Degraded")["status"] == "True"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7


def test_unreachable_database_never_scales_to_zero() -> None:
    spec = body()["spec"]
    spec["scaling"] = {"minReplicas": 0, "allowScaleToZero": True, "scaleDownStabilizationSeconds": 0}
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(spec), run(kube, body(spec), h.QueueFigures(ready=20)))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 2
    down = h.StatsUnavailable("DatabaseUnreachable", "connection refused")
    out = run(kube, b, down, now=T0 + dt.timedelta(hours=1))
    assert out.error_reason == "DatabaseUnreachable"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 2
    assert "ready" not in out.status or out.status["ready"] == 20
    # Back up and empty: now it may go to zero.
    out = run(kube, feed_back(b, out), h.QueueFigures(), now=T0 + dt.timedelta(hours=1, seconds=10))
    assert out.error_reason is None
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0
    assert cond(out, "Degraded")["status"] == "False"


def test_new_queue_without_stats_starts_at_the_floor() -> None:
    kube = FakeKube()  # no secret at all
    spec = body()["spec"]
    spec["scaling"] = {"minReplicas": 0, "allowScaleToZero": True}
    out = run(kube, body(spec), h.QueueFigures())
    assert out.error_reason == "SecretMissing"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 1


def test_change_pass_keeps_replicas_and_does_not_clear_degraded() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), h.QueueFigures(ready=50)))
    del kube.store[("Secret", NS, "db")]
    b = feed_back(b, run(kube, b, h.QueueFigures(), now=T0 + dt.timedelta(seconds=10)))
    b["spec"]["image"] = "tenure:2"
    out = run(kube, b, h.QueueFigures(), now=T0 + dt.timedelta(seconds=20), scale=False)
    assert out.error_reason is None
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["replicas"] == 5
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:2"
    # A successful change pass writes no conditions, so Degraded stays as the timer left it
    # (and a change pass racing a timer pass cannot replace newer conditions).
    assert "conditions" not in out.status
    after = feed_back(b, out)
    (degraded,) = [c for c in after["status"]["conditions"] if c["type"] == "Degraded"]
    assert degraded["status"] == "True"


def test_invalid_spec_is_permanent_and_touches_nothing() -> None:
    kube = FakeKube()
    spec = body()["spec"]
    spec["heartbeatSeconds"] = 30
    spec["leaseSeconds"] = 60
    out = run(kube, body(spec), h.QueueFigures())
    assert (out.error_reason, out.permanent) == ("InvalidSpec", True)
    assert "at most a third" in out.error_message
    assert kube.store == {}


def test_service_monitor_follows_the_spec_when_the_api_exists() -> None:
    kube = FakeKube()
    kube.monitoring = True
    add_secret(kube)
    run(kube, body(), h.QueueFigures())
    assert ("ServiceMonitor", NS, "mail") in kube.store
    spec = body()["spec"]
    spec["metrics"] = {"serviceMonitor": False}
    run(kube, body(spec), h.QueueFigures())
    assert ("ServiceMonitor", NS, "mail") not in kube.store
    exporter = rc.exporter_name(NS, h.s.parse_spec(spec))
    # The queue's own and its database's exporter ServiceMonitor (no other JobQueue wants it).
    assert kube.deleted == [("ServiceMonitor", "mail"), ("ServiceMonitor", exporter)]


def test_no_service_monitor_without_its_api() -> None:
    kube = FakeKube()
    add_secret(kube)
    run(kube, body(), h.QueueFigures())
    assert "ServiceMonitor" not in kube.kinds()
    assert kube.deleted == []


def test_apply_failure_degrades_with_the_server_message() -> None:
    kube = FakeKube()
    add_secret(kube)
    kube.fail_apply = "CronJob"
    out = run(kube, body(), h.QueueFigures())
    assert out.error_reason == "ApplyFailed"
    assert "forbidden" in out.error_message
    assert not out.permanent


def test_scale_down_event_and_scaling_condition() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), h.QueueFigures(ready=80)))
    out = run(kube, b, h.QueueFigures(), now=T0 + dt.timedelta(seconds=61))
    assert [e.reason for e in out.events] == ["ScaledDown"]
    assert cond(out, "Scaling")["reason"] == "ScaledDown"
    assert out.status["replicas"] == 1
    # Next pass: nothing changes, pods ready -> Scaling False.
    out = run(kube, feed_back(b, out), h.QueueFigures(), now=T0 + dt.timedelta(seconds=71))
    assert out.events == ()
    assert cond(out, "Scaling")["status"] == "False"


def test_upsert_condition_moves_transition_time_only_on_flip() -> None:
    c1 = h.upsert_condition([], "Ready", True, "Ok", "", T0, 1)
    later = T0 + dt.timedelta(minutes=5)
    c2 = h.upsert_condition(c1, "Ready", True, "Ok", "still", later, 2)
    assert c2[0]["lastTransitionTime"] == c1[0]["lastTransitionTime"]
    assert (c2[0]["message"], c2[0]["observedGeneration"]) == ("still", 2)
    c3 = h.upsert_condition(c2, "Ready", False, "Broken", "x", later, 2)
    assert c3[0]["lastTransitionTime"] == "2026-03-01T08:05:00Z"
    c4 = h.upsert_condition(c3, "Degraded", True, "Broken", "x", later, 2)
    assert [c["type"] for c in c4] == ["Ready", "Degraded"]


def test_operator_config() -> None:
    cfg = h.OperatorConfig.from_env({"TENURE_OPERATOR_INTERVAL_SECONDS": "5"})
    assert cfg.interval_seconds == 5
    assert [cfg.backoff(r) for r in (0, 1, 2)] == [5, 10, 20]
    assert cfg.backoff(50) == cfg.backoff_max_seconds
    with pytest.raises(ConfigError):
        h.OperatorConfig.from_env({"TENURE_OPERATOR_INTERVAL_SECONDS": "soon"})
    with pytest.raises(ConfigError):
        h.OperatorConfig(interval_seconds=0).validate()


def test_children_names_match_the_builders() -> None:
    kube = FakeKube()
    add_secret(kube)
    run(kube, body(), h.QueueFigures())
    names = {(k, n) for k, _, n in kube.store}
    assert ("Deployment", rc.worker_name("mail")) in names
    assert ("CronJob", rc.reaper_name("mail")) in names
    assert ("Service", rc.service_name("mail")) in names
    assert ("PodDisruptionBudget", rc.pdb_name("mail")) in names


def test_register_wires_login_timer_and_change_handlers() -> None:
    """A private kopf registry gets no default login handler: ours must be there, or the
    operator cannot authenticate at all. (Reads kopf's registry internals.)"""
    import kopf

    registry = kopf.OperatorRegistry()
    h.register(registry, h.OperatorConfig(interval_seconds=7), lambda: FakeKube())
    activities = {a.activity.value for a in registry._activities.get_all_handlers()}
    assert {"authentication", "startup", "probe"} <= activities
    (timer,) = registry._spawning.get_all_handlers()
    assert timer.interval == 7
    assert timer.selector.group == "tenure.dev"
    reasons = {c.reason for c in registry._changing.get_all_handlers()}
    assert {kopf.Reason.CREATE, kopf.Reason.UPDATE} <= reasons
    assert any(c.initial for c in registry._changing.get_all_handlers())  # resume


def test_spec_paused_and_max_running_are_applied_and_a_paused_queue_keeps_its_pods() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), h.QueueFigures(ready=35))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    spec = {**body()["spec"], "paused": True, "maxRunning": 5}
    applied: list[tuple[str, str, str, bool, int]] = []

    def controls(dsn: str, schema: str, queue: str, paused: bool, limit: int) -> None:
        applied.append((dsn, schema, queue, paused, limit))

    b = feed_back(body(spec), first)
    out = h.reconcile_jobqueue(b, kube, fetcher(h.QueueFigures(ready=500)), adopt, T0 + dt.timedelta(minutes=5),
                               scale=True, controls=controls)
    assert applied == [(h.dsn_in_namespace("postgresql://u:p@db/q", NS, h._resolves), "tenure", "emails", True, 5)]
    assert (out.status["paused"], out.status["maxRunning"]) == (True, 5)
    assert "QueueControlsApplied" in [e.reason for e in out.events]
    # A backlog of 500 on a paused queue does not scale the workers up: the pods are kept as they are.
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    # Level-based: once the database agrees, nothing is applied again.
    again = h.reconcile_jobqueue(feed_back(b, out), kube, fetcher(h.QueueFigures(ready=500, paused=True,
                                                                                max_running=5)),
                                 adopt, T0 + dt.timedelta(minutes=6), scale=True, controls=controls)
    assert len(applied) == 1 and again.error_reason is None


def test_spec_max_running_must_be_a_non_negative_integer() -> None:
    from tenure.operator.spec import SpecError, parse_spec

    base = body()["spec"]
    assert parse_spec({**base, "maxRunning": 3}).max_running == 3
    for bad in (-1, "5", True):
        with pytest.raises(SpecError, match="maxRunning"):
            parse_spec({**base, "maxRunning": bad})
    with pytest.raises(SpecError, match="paused"):
        parse_spec({**base, "paused": "yes"})


# --------------------------------------------------------------------------- managed migrations


def _job(kube: FakeKube) -> dict[str, Any]:
    (job,) = [obj for (kind, _, _), obj in kube.store.items() if kind == "Job"]
    return job


def test_unmigrated_database_gets_a_job_and_workers_wait_at_zero() -> None:
    kube = FakeKube()
    kube.job_outcome = None  # the Job runs (no pod has finished yet)
    add_secret(kube)
    # No stats before the schema exists: a fetch here would fail the test.
    out = run(kube, body(), AssertionError("stats read before the schema is current"))
    assert out.error_reason is None
    job = _job(kube)
    spec = h.s.parse_spec(body()["spec"])
    assert job["metadata"]["name"] == rc.migration_job_name("mail", spec)
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["args"]) == ("tenure:1", ["migrate"])
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e for e in container["env"]}
    assert env["TENURE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "url"}
    assert env["TENURE_SCHEMA"]["value"] == "tenure"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0
    assert kube.store[("CronJob", NS, "mail-reaper")]["spec"]["suspend"] is True
    assert cond(out, "SchemaReady")["status"] == "False"
    assert cond(out, "SchemaReady")["reason"] == "Migrating"
    assert cond(out, "Ready")["reason"] == "Migrating"
    assert cond(out, "Degraded")["status"] == "False"
    assert out.status["migrationJob"] == job["metadata"]["name"]
    assert [e.reason for e in out.events] == ["MigrationStarted"]

    # The Job succeeds: the next pass scales from stats and unsuspends the reaper.
    kube.store[("Job", NS, job["metadata"]["name"])]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    out = run(kube, feed_back(body(), out), h.QueueFigures(ready=35), now=T0 + dt.timedelta(seconds=10))
    assert cond(out, "SchemaReady")["reason"] == "Migrated"
    assert cond(out, "Ready")["status"] == "True"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    assert kube.store[("CronJob", NS, "mail-reaper")]["spec"]["suspend"] is False


def test_image_change_holds_the_running_workers_until_the_new_migration_succeeded() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), h.QueueFigures(ready=20))
    old_job = _job(kube)["metadata"]["name"]
    kube.job_outcome = None
    new_spec = body()["spec"]
    new_spec["image"] = "tenure:2"
    out = run(kube, feed_back(body(new_spec), first), h.QueueFigures(ready=20),
              now=T0 + dt.timedelta(seconds=10))
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:1"
    assert dep["spec"]["replicas"] == 2
    cron = kube.store[("CronJob", NS, "mail-reaper")]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "tenure:1")
    assert cond(out, "SchemaReady")["reason"] == "Migrating"
    new_job = rc.migration_job_name("mail", h.s.parse_spec(new_spec))
    assert new_job != old_job and ("Job", NS, old_job) in kube.store
    # Succeeded: workers roll to the new image and the older Job is retired.
    kube.store[("Job", NS, new_job)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    run(kube, feed_back(body(new_spec), out), h.QueueFigures(ready=20),
        now=T0 + dt.timedelta(seconds=20))
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:2"
    assert ("Job", NS, old_job) not in kube.store and ("Job", old_job) in kube.deleted


def _failed_pod(message: str) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"state": {"terminated": {
        "exitCode": 2, "message": message}}}]}}


def test_schema_newer_than_the_code_is_degraded_and_never_retried() -> None:
    kube = FakeKube()
    kube.job_outcome = "Failed"
    kube.pods = [_failed_pod("tenure: error: schema 'tenure' is at version 9 but this tenure "
                             "knows 2: upgrade tenure\n")]
    add_secret(kube)
    out = run(kube, body(), AssertionError("no stats"), now=T0 + dt.timedelta(hours=2))
    assert out.error_reason == "SchemaNewerThanCode"
    assert "tenure:1" in out.error_message and "version 9" in out.error_message
    assert cond(out, "Degraded")["reason"] == "SchemaNewerThanCode"
    assert cond(out, "SchemaReady")["status"] == "False"
    assert ("Job", NS, _job(kube)["metadata"]["name"]) in kube.store  # not deleted: no retry
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0


def test_failed_migration_is_reported_then_run_again_after_the_retry_delay() -> None:
    kube = FakeKube()
    kube.job_outcome = "Failed"
    kube.pods = [_failed_pod("tenure: error: cannot connect to the database: refused")]
    add_secret(kube)
    out = run(kube, body(), AssertionError("no stats"), now=T0 + dt.timedelta(seconds=30))
    assert out.error_reason == "MigrationFailed"
    assert "cannot connect to the database" in out.error_message
    assert [k for k, _ in kube.deleted] == []
    out = h.reconcile_jobqueue(body(), kube, fetcher(AssertionError("no stats")), adopt,
                               T0 + dt.timedelta(seconds=301), scale=True,
                               migration_retry_seconds=300)
    assert out.error_reason == "MigrationFailed"
    assert [k for k, _ in kube.deleted] == ["Job"]


def test_unmanaged_migrations_create_no_job() -> None:
    kube = FakeKube()
    add_secret(kube)
    spec = body()["spec"]
    spec["migrations"] = {"managed": False}
    out = run(kube, body(spec), h.QueueFigures(ready=5))
    assert "Job" not in kube.kinds()
    assert cond(out, "SchemaReady")["reason"] == "Unmanaged"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 1
    # The operator-wide switch does the same for a JobQueue that asks for management.
    kube2 = FakeKube()
    add_secret(kube2)
    h.reconcile_jobqueue(body(), kube2, fetcher(h.QueueFigures()), adopt, T0, scale=True,
                         manage_migrations=False)
    assert "Job" not in kube2.kinds()


def test_schema_lost_after_migration_runs_the_job_again() -> None:
    kube = FakeKube()
    add_secret(kube)
    out = run(kube, body(), h.StatsUnavailable("SchemaMissing", "relation jobs does not exist"))
    assert out.error_reason == "SchemaMissing"
    assert [k for k, _ in kube.deleted] == ["Job"]


# --------------------------------------------------------------------------- cron schedule


@pytest.mark.parametrize("schedule", [
    "* * * * *", "*/5 * * * *", "0 3 * * 1-5", "0,30 8-18/2 1,15 JAN-MAR sun", "59 23 31 12 7",
    "@hourly", "@daily", "0 0 ? * *",
])
def test_valid_cron_schedules_pass(schedule: str) -> None:
    h.s.validate_cron(schedule)


@pytest.mark.parametrize("schedule, message", [
    ("99 99 99 99 99", "minute: 99 is outside 0-59"),
    ("0 24 * * *", "hour: 24 is outside 0-23"),
    ("0 0 0 * *", "day of month: 0 is outside 1-31"),
    ("0 0 1 13 *", "month: 13 is outside 1-12"),
    ("0 0 * * 8", "day of week: 8 is outside 0-7"),
    ("*/0 * * * *", "step '0' must be a positive integer"),
    ("30-10 * * * *", "runs backwards"),
    ("0 0 * FOO *", "'FOO' is not a number"),
    ("1,,2 * * * *", "empty list element"),
    ("? * * * *", "only allowed in the day fields"),
    ("@every", "unknown macro"),
    ("* * * *", "expected 5 fields"),
])
def test_invalid_cron_schedules_are_refused_with_the_field(schedule: str, message: str) -> None:
    with pytest.raises(h.s.ScheduleError) as err:
        h.s.validate_cron(schedule)
    assert message in str(err.value)


def test_invalid_schedule_degrades_and_leaves_the_cronjob_alone() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), h.QueueFigures())
    before = copy.deepcopy(kube.store[("CronJob", NS, "mail-reaper")])
    spec = body()["spec"]
    spec["reaper"] = {"schedule": "99 99 99 99 99"}
    out = run(kube, feed_back(body(spec), first), h.QueueFigures())
    assert out.error_reason == "InvalidSchedule" and out.permanent
    assert "minute: 99 is outside 0-59" in out.error_message
    assert cond(out, "Degraded")["reason"] == "InvalidSchedule"
    assert kube.store[("CronJob", NS, "mail-reaper")] == before


# --------------------------------------------------------------------------- the exporter


def _queue(name: str, uid: str, created: str, **db: str) -> dict[str, Any]:
    b = body()
    b["metadata"].update(name=name, uid=uid, creationTimestamp=created)
    b["spec"]["database"] = {"secretRef": {"name": db.get("secret", "db")},
                             "schema": db.get("schema", "tenure")}
    b["spec"]["image"] = f"tenure:{name}"
    return b


def test_one_exporter_per_database_shared_by_its_jobqueues() -> None:
    kube = FakeKube()
    add_secret(kube)
    a = _queue("a", "u-a", "2026-01-01T00:00:00Z")
    b = _queue("b", "u-b", "2026-01-02T00:00:00Z")
    c = _queue("c", "u-c", "2026-01-03T00:00:00Z", schema="other")
    kube.jobqueues = {"a": a, "b": b, "c": c}
    users = h.reconcile_exporter(kube, NS, service_monitor_available=False)
    shared = rc.exporter_name(NS, h.s.parse_spec(a["spec"]))
    other = rc.exporter_name(NS, h.s.parse_spec(c["spec"]))
    assert users == {"a": shared, "b": shared, "c": other} and shared != other
    deployments = sorted(n for (k, _, n) in kube.store if k == "Deployment")
    assert deployments == sorted([shared, other])
    dep = kube.store[("Deployment", NS, shared)]
    assert [(o["name"], o["controller"]) for o in dep["metadata"]["ownerReferences"]] == [
        ("a", False), ("b", False)]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "tenure:a"  # the oldest member's
    assert container["args"][0] == "exporter"
    svc = kube.store[("Service", NS, shared)]
    assert svc["spec"]["ports"][0]["port"] == rc.EXPORTER_PORT
    assert svc["spec"]["selector"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items())

    # c turns its exporter off: the exporter nobody uses any more goes; a being deleted
    # leaves b as the only owner.
    c["spec"]["metrics"] = {"exporter": False}
    a["metadata"]["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    users = h.reconcile_exporter(kube, NS, service_monitor_available=False)
    assert users == {"b": shared}
    assert ("Deployment", NS, other) not in kube.store and ("Service", NS, other) not in kube.store
    owners = kube.store[("Deployment", NS, shared)]["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["b"]
    assert kube.store[("Deployment", NS, shared)]["spec"]["template"]["spec"]["containers"][0][
        "image"] == "tenure:b"


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

    out = h.dsn_in_namespace(dsn, "tenure-demo", resolves)
    assert conninfo_to_dict(out)["host"] == host
    assert {k: v for k, v in conninfo_to_dict(out).items() if k != "host"} == {
        k: v for k, v in conninfo_to_dict(dsn).items() if k != "host"}
    assert not [a for a in asked if a.startswith(("10.", "::1", "localhost", "/", "pg-rw."))]
    assert h.dsn_in_namespace("not a dsn", "ns", resolves) == "not a dsn"
    assert h.dsn_in_namespace("dbname=x", "ns", resolves) == "dbname=x"


def test_a_host_that_does_not_resolve_in_the_namespace_is_kept() -> None:
    dsn = "postgresql://u:p@db.internal/q"
    assert h.dsn_in_namespace(dsn, "shop", lambda name: False) == dsn
