"""spec -> child manifests (pure builders in tenure.operator.manifests)."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from tenure.operator import manifests as rc
from tenure.operator.spec import SpecError, parse_spec

ROOT = pathlib.Path(__file__).resolve().parents[2]

SPEC: dict[str, Any] = {
    "queue": "emails",
    "image": "registry.example/tenure:1.2.3",
    "app": "shop.tasks:app",
    "concurrency": 8,
    "database": {"secretRef": {"name": "db", "key": "dsn"}, "schema": "jobs"},
    "leaseSeconds": 90,
    "heartbeatSeconds": 20,
    "graceSeconds": 12,
    "drainTimeoutSeconds": 45,
    "retry": {"maxAttempts": 7, "baseDelaySeconds": 2, "maxDelaySeconds": 60},
    "scaling": {"minReplicas": 1, "maxReplicas": 6},
    "reaper": {"schedule": "*/5 * * * *", "graceSeconds": 21, "batchSize": 50, "suspend": True},
    "metrics": {"port": 9200, "serviceMonitor": True},
    "pod": {
        "resources": {"requests": {"cpu": "100m"}},
        "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "TENURE_DATABASE_URL", "value": "x"}],
        "nodeSelector": {"pool": "jobs"},
        "tolerations": [{"key": "jobs", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {"team": "shop", "app.kubernetes.io/instance": "hijack"},
    },
}


def children(spec: dict[str, Any] = SPEC, replicas: int = 3, sm: bool = True) -> dict[str, dict[str, Any]]:
    built = rc.build_children("mail", "prod", parse_spec(spec), rc.spec_hash(spec), replicas, sm)
    return {c["kind"]: c for c in built}


def container(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        pod = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    else:
        pod = obj["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return c  # type: ignore[no-any-return]


def test_deployment_runs_the_worker_with_every_setting() -> None:
    dep = children()["Deployment"]
    assert dep["metadata"] == {
        "name": "mail-worker",
        "namespace": "prod",
        "labels": rc.common_labels("mail", "worker"),
    }
    assert dep["spec"]["replicas"] == 3
    c = container(dep)
    assert c["image"] == "registry.example/tenure:1.2.3"
    assert c["args"] == [
        "worker", "--app", "shop.tasks:app", "--queue", "emails", "--concurrency", "8",
        "--lease", "90", "--heartbeat", "20", "--grace", "12", "--drain-timeout", "45",
        "--metrics-port", "9200", "--vacuum-dead-rows", "100000", "--backoff-base", "2", "--backoff-max", "60",
    ]  # fmt: skip


def test_dsn_comes_from_the_secret_and_cannot_be_overridden() -> None:
    env = container(children()["Deployment"])["env"]
    dsn = [e for e in env if e["name"] == "TENURE_DATABASE_URL"]
    assert dsn == [
        {"name": "TENURE_DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "dsn"}}}
    ]
    by_name = {e["name"]: e.get("value") for e in env}
    assert by_name["TENURE_SCHEMA"] == "jobs"
    assert by_name["LOG_LEVEL"] == "debug"
    assert by_name["TENURE_RETRY_MAX_ATTEMPTS"] == "7"


def test_probes_hit_health_endpoints_on_the_metrics_port() -> None:
    c = container(children()["Deployment"])
    assert c["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["periodSeconds"] == 20


def test_termination_grace_outlasts_the_drain() -> None:
    pod = children()["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 45
    assert pod["terminationGracePeriodSeconds"] == 45 + rc.TERMINATION_MARGIN_SECONDS


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_pods_are_hardened(kind: str) -> None:
    obj = children()[kind]
    c = container(obj)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_pod_overrides_apply_but_selector_labels_win() -> None:
    dep = children()["Deployment"]
    tmpl = dep["spec"]["template"]
    assert tmpl["metadata"]["labels"]["team"] == "shop"
    assert tmpl["metadata"]["labels"]["app.kubernetes.io/instance"] == "mail"
    sel = dep["spec"]["selector"]["matchLabels"]
    assert all(tmpl["metadata"]["labels"][k] == v for k, v in sel.items())
    assert tmpl["spec"]["nodeSelector"] == {"pool": "jobs"}
    assert tmpl["spec"]["tolerations"][0]["key"] == "jobs"
    assert container(dep)["resources"] == {"requests": {"cpu": "100m"}}


def test_cronjob_runs_the_reaper_once_without_overlap() -> None:
    cj = children()["CronJob"]
    assert cj["metadata"]["name"] == "mail-reaper"
    assert cj["spec"]["schedule"] == "*/5 * * * *"
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    assert cj["spec"]["suspend"] is True
    assert cj["spec"]["successfulJobsHistoryLimit"] == rc.CRONJOB_SUCCESS_HISTORY
    assert cj["spec"]["failedJobsHistoryLimit"] == rc.CRONJOB_FAILED_HISTORY
    assert container(cj)["args"] == [
        "reaper", "--once", "--grace", "21", "--heartbeat", "20", "--batch", "50", "--backoff-base", "2", "--backoff-max", "60",
    ]  # fmt: skip
    assert cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_reaper_grace_below_the_heartbeat_is_accepted() -> None:
    """The reaper waits each job's registered heartbeat plus the grace (issue 22 item 5), so a
    grace shorter than heartbeatSeconds no longer risks reaping a merely late heartbeat."""
    spec = {**SPEC, "reaper": {**SPEC["reaper"], "graceSeconds": 1}}
    args = container(children(spec)["CronJob"])["args"]
    assert args[args.index("--grace") + 1] == "1"
    assert args[args.index("--heartbeat") + 1] == "20"


def test_service_selects_the_workers_metrics_port() -> None:
    svc = children()["Service"]
    assert svc["metadata"]["name"] == "mail-metrics"
    assert svc["spec"]["selector"] == rc.selector_labels("mail", "worker")
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9200, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_pdb_and_service_monitor() -> None:
    got = children()
    assert got["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert got["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    assert "ServiceMonitor" not in children(sm=False)
    off = copy.deepcopy(SPEC)
    off["metrics"]["serviceMonitor"] = False
    assert "ServiceMonitor" not in children(off, sm=True)


def _hash(spec: dict[str, Any]) -> str:
    dep = children(spec)["Deployment"]
    return str(dep["spec"]["template"]["metadata"]["annotations"][rc.SPEC_HASH_ANNOTATION])


def test_spec_change_rolls_pods_but_scaling_change_does_not() -> None:
    base = _hash(SPEC)
    image = copy.deepcopy(SPEC)
    image["image"] = "registry.example/tenure:1.2.4"
    assert _hash(image) != base
    secret = copy.deepcopy(SPEC)
    secret["database"]["secretRef"]["name"] = "db2"
    assert _hash(secret) != base
    scaling = copy.deepcopy(SPEC)
    scaling["scaling"]["maxReplicas"] = 9
    assert _hash(scaling) == base


def test_defaults_fill_a_minimal_spec() -> None:
    minimal = {"queue": "q", "image": "i", "app": "m:a", "database": {"secretRef": {"name": "s"}}}
    dep = children(minimal)["Deployment"]
    assert "--lease" in container(dep)["args"]
    spec = parse_spec(minimal)
    assert spec.secret_key == "url"
    assert spec.heartbeat_seconds * 3 <= spec.lease_seconds


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"heartbeatSeconds": 40}, "at most a third"),
        ({"scaling": {"minReplicas": 5, "maxReplicas": 2}}, "minReplicas"),
        ({"scaling": {"minReplicas": 0}}, "allowScaleToZero"),
        ({"concurrency": "8"}, "integer"),
        ({"concurrency": True}, "integer"),
        ({"image": ""}, "spec.image is required"),
    ],
)
def test_bad_specs_are_refused_with_the_field_named(patch: dict[str, Any], fragment: str) -> None:
    spec = {**SPEC, **patch}
    with pytest.raises(SpecError, match=fragment):
        parse_spec(spec)


def test_example_manifest_builds() -> None:
    docs = list(yaml.safe_load_all((ROOT / "examples" / "jobqueue.yaml").read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Secret", "JobQueue"]
    secret, jq = docs
    spec = parse_spec(jq["spec"])
    assert spec.secret_name == secret["metadata"]["name"]
    assert spec.secret_key in secret["stringData"]
    built = rc.build_children(jq["metadata"]["name"], "default", spec, rc.spec_hash(jq["spec"]), 1, True)
    assert len(built) == 5
