"""The operator against a real API server (issue 6, scenarios 1-6, plus the chart's
namespace-scoped RBAC mode as 7).

Everything runs under the chart's RBAC (scenario 6): the CRD, (Cluster)Role, binding and
ServiceAccount are rendered with ``helm template`` and applied, and ``tenure operator`` runs
as a subprocess with the chart's own args and env, authenticated as that ServiceAccount (a
TokenRequest token). After every test the API server's audit log is searched for requests by
that identity that RBAC refused; any such request fails the test.

The scenarios share one JobQueue (``examples/jobqueue.yaml``) and run in file order.
kube-controller-manager runs garbage collection, so deleting the JobQueue removes its
children. There is no scheduler or kubelet: worker pods never start, so the backlog is
drained by local ``tenure worker --burst`` processes against the same embedded PostgreSQL.

Managed migrations: the database starts unmigrated. The operator's migration Job cannot run
without a kubelet, so the test plays the kubelet's part (:meth:`Stack.run_pending_jobs`): it
runs the Job's container command, ``tenure migrate`` with the Job's own environment (the DSN
resolved from the Secret it references), as a local process, and writes the outcome into the
Job's status as the Job controller would. One Job is failed on purpose to see ``Degraded``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from controlplane.harness import ControlPlane, die_with_parent, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parent.parent
TENURE = str(Path(sys.executable).with_name("tenure"))
GROUP, VERSION, PLURAL = "tenure.dev", "v1alpha1", "jobqueues"
NS = "tenure-e2e"  # where the JobQueue lives
RELEASE_NS = "tenure-system"  # where the chart (and so the operator's ServiceAccount) lives
NAME = "emails"  # metadata.name in examples/jobqueue.yaml
QUEUE = "emails"
INTERVAL = 2  # operator.intervalSeconds for the test release
BACKOFF_MAX = 8  # operator.backoffMaxSeconds for the test release
WINDOW = 20  # scaleDownStabilizationSeconds set in scenario 3
TASK_APP = "tenure.demo.tasks:app"

T = TypeVar("T")


# --------------------------------------------------------------------------- helpers


class OperatorProcess:
    """``tenure operator`` as a subprocess with the chart's args/env and a given kubeconfig."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.health_port = free_port()
        self.args = [a for a in args if not a.startswith("--liveness")]
        self.args.append(f"--liveness=http://127.0.0.1:{self.health_port}/healthz")
        self.env = env
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        assert self.popen is None
        with self.log.open("ab") as out:
            out.write(f"--- start #{self.starts + 1}: tenure {' '.join(self.args)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen([TENURE, *self.args], env=self.env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, preexec_fn=die_with_parent)
        self.starts += 1

        def healthy() -> bool:
            assert self.popen is not None
            if self.popen.poll() is not None:
                pytest.fail(f"operator exited with {self.popen.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_for(healthy, 60, "operator /healthz", self)

    def stop(self) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.popen = None

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_for(probe: Callable[[], T | None], timeout: float, what: str,
             operator: OperatorProcess | None = None) -> T:
    """Poll ``probe`` until it returns a truthy value; fail with context on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\noperator log:\n{operator.tail()}" if operator else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(0.5)


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def flags(args: list[str]) -> dict[str, str]:
    """``["worker", "--a", "1", "--b", "2"]`` -> ``{"--a": "1", "--b": "2"}``."""
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[arg] = args[i + 1]
    return out


class Stack:
    """Handles the scenarios share."""

    def __init__(self, plane: ControlPlane, api: Any, dsn: str, operator: OperatorProcess,
                 sa_user: str, workdir: Path, rbac_rules: list[dict[str, Any]]) -> None:
        from kubernetes import client

        self.plane = plane
        self.rbac_rules = rbac_rules
        self.dsn = dsn
        self.operator = operator
        self.sa_user = sa_user
        self.workdir = workdir
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # JobQueue -------------------------------------------------------------------------

    def jobqueue(self, name: str = NAME) -> dict[str, Any] | None:
        from kubernetes.client.rest import ApiException

        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, NS, PLURAL, name)
            return obj
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_spec(self, patch: dict[str, Any], name: str = NAME) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, name, {"spec": patch})

    def condition(self, type_: str) -> dict[str, Any] | None:
        jq = self.jobqueue() or {}
        for cond in (jq.get("status") or {}).get("conditions") or []:
            if cond.get("type") == type_:
                return dict(cond)
        return None

    # children -------------------------------------------------------------------------

    def deployment(self, name: str = NAME) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return self.apps.read_namespaced_deployment(f"{name}-worker", NS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def scaled_to(self, replicas: int) -> dict[str, Any] | None:
        """The JobQueue once both its Deployment and its status show ``replicas``
        (the status patch lands just after the Deployment's)."""
        jq = self.jobqueue() or {}
        status = jq.get("status") or {}
        if (self.replicas() == replicas and status.get("desiredReplicas") == replicas
                and status.get("replicas") == replicas):
            return jq
        return None

    def replicas(self) -> int | None:
        dep = self.deployment()
        return None if dep is None else int(dep.spec.replicas)

    # the queue ------------------------------------------------------------------------

    def enqueue(self, count: int, start: int, flow_key: str | None = None) -> None:
        jobs = self.workdir / f"jobs-{start}.jsonl"
        keyed = {"flow_key": flow_key} if flow_key else {}
        jobs.write_text("".join(
            json.dumps({"task": "send_invoice_email", "payload": {"invoice_id": start + i}, **keyed})
            + "\n" for i in range(count)))
        out = subprocess.run(
            [TENURE, "--database-url", self.dsn, "enqueue", "--queue", QUEUE,
             "--from-file", str(jobs)],
            capture_output=True, text=True, timeout=120, env=tenure_env(self.workdir))
        assert out.returncode == 0, out.stderr
        assert f"enqueued {count} of {count}" in out.stdout

    def drain(self, workers: int = 2) -> None:
        """Run local ``tenure worker --burst`` processes until the queue is empty."""
        argv = [TENURE, "--database-url", self.dsn, "worker", "--app", TASK_APP,
                "--queue", QUEUE, "--concurrency", "4", "--burst"]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=tenure_env(self.workdir)) for _ in range(workers)]
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out.decode(errors="replace")[-3000:]

    # migration Jobs (the kubelet's and Job controller's part) -------------------------

    def migration_jobs(self, namespace: str = NS) -> list[Any]:
        return list(self.batch.list_namespaced_job(
            namespace, label_selector="app.kubernetes.io/component=migrate").items)

    def _job_status(self, name: str, namespace: str, variants: list[dict[str, Any]],
                    allow_gone: bool = False) -> None:
        """Patch a Job's status; the API server's Job status validation got stricter over
        releases (e.g. SuccessCriteriaMet/FailureTarget before Complete/Failed), so try the
        strict shape first and the plain one after."""
        from kubernetes.client.rest import ApiException

        errors = []
        for status in variants:
            try:
                self.batch.patch_namespaced_job_status(name, namespace, {"status": status})
                return
            except ApiException as exc:
                if exc.status == 404 and allow_gone:
                    return  # retired by the operator meanwhile (a newer image superseded it)
                errors.append(f"{exc.status}: {exc.body}")
        pytest.fail(f"cannot set the status of Job {namespace}/{name}: {errors}")

    def finish_job(self, name: str, namespace: str = NS, *, succeeded: bool,
                   message: str = "", allow_gone: bool = False) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if succeeded:
            done = {"type": "Complete", "status": "True", "reason": "Completed",
                    "lastTransitionTime": now, "message": "Reached expected number of succeeded pods"}
            target = {**done, "type": "SuccessCriteriaMet", "reason": "CompletionsReached"}
            base = {"startTime": now, "completionTime": now, "succeeded": 1, "active": 0}
        else:
            done = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "lastTransitionTime": now, "message": message or "Job has reached the specified backoff limit"}
            target = {**done, "type": "FailureTarget"}
            base = {"startTime": now, "failed": 1, "active": 0}
        self._job_status(name, namespace, [{**base, "conditions": [target, done]},
                                           {**base, "conditions": [done]}], allow_gone)

    def run_pending_jobs(self, namespace: str = NS) -> list[str]:
        """Run every unfinished migration Job's container as a local process (what a kubelet
        would do), then record its exit in the Job's status. Returns the Jobs run."""
        ran = []
        for job in self.migration_jobs(namespace):
            if any(c.status == "True" and c.type in ("Complete", "Failed")
                   for c in job.status.conditions or []):
                continue
            (container,) = job.spec.template.spec.containers
            env = tenure_env(self.workdir)
            for var in container.env:
                if var.value is not None:
                    env[var.name] = var.value
                elif var.value_from and var.value_from.secret_key_ref:
                    ref = var.value_from.secret_key_ref
                    secret = self.core.read_namespaced_secret(ref.name, namespace)
                    env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
            env["TENURE_HOME"] = str(self.workdir / "tenure-home")
            out = subprocess.run([TENURE, *container.args], capture_output=True, text=True,
                                 timeout=120, env=env)
            # The operator may retire a superseded Job while it "runs" here: a 404 then is fine.
            self.finish_job(job.metadata.name, namespace, succeeded=out.returncode == 0,
                            message=out.stderr.strip()[-300:], allow_gone=True)
            ran.append(job.metadata.name)
        return ran

    def schema_version(self) -> int:
        from tenure.core.db import connect
        from tenure.core.repository import Repository

        with connect(self.dsn) as conn:
            return Repository(conn, "tenure").schema_version()

    # the shared exporter --------------------------------------------------------------

    def exporters(self, namespace: str = NS) -> list[Any]:
        return list(self.apps.list_namespaced_deployment(
            namespace, label_selector="app.kubernetes.io/component=exporter").items)

    def stats(self) -> Any:
        from tenure.core.stats import fetch_queue_stats

        rows = [r for r in fetch_queue_stats(self.dsn, "tenure", QUEUE) if r.queue == QUEUE]
        return rows[0] if rows else None


def tenure_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    env["TENURE_HOME"] = str(workdir / "tenure-home")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def render_chart(helm: str, *values: str, release: str = "tenure") -> list[dict[str, Any]]:
    """``helm template`` of charts/tenure (or of ``$TENURE_E2E_CHART``, to try another copy)."""
    chart = os.environ.get("TENURE_E2E_CHART") or str(REPO / "charts" / "tenure")
    out = subprocess.run(
        [helm, "template", release, chart, "--namespace", RELEASE_NS,
         *[arg for v in values for arg in ("--set", v)]],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def apply_objects(api: Any, objects: list[dict[str, Any]]) -> None:
    """Server-side apply (as the admin) of arbitrary objects via the dynamic client."""
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(api)
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") or (RELEASE_NS if resource.namespaced
                                                         else None)
        if resource.namespaced:
            obj["metadata"]["namespace"] = namespace
        try:
            resource.server_side_apply(body=obj, name=obj["metadata"]["name"],
                                       namespace=namespace, field_manager="tenure-e2e",
                                       force_conflicts=True)
        except ApiException as exc:
            message = json.loads(exc.body).get("message") if exc.body else exc.reason
            pytest.fail(f"the API server refused the chart's {obj['kind']} "
                        f"{obj['metadata']['name']}: {exc.status} {message}", pytrace=False)


def chart_operator(plane: ControlPlane, docs: list[dict[str, Any]], workdir: Path,
                   name: str) -> OperatorProcess:
    """An operator with the args and env of the rendered chart's operator Deployment,
    authenticated as the chart's ServiceAccount (not started)."""
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "operator"
    kubeconfig = plane.service_account_kubeconfig(
        RELEASE_NS, sa["metadata"]["name"], workdir / f"{name}.kubeconfig")
    env = tenure_env(workdir)
    env.update({e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e})
    env["TENURE_HOME"] = str(workdir / f"{name}-home")
    env["KUBECONFIG"] = str(kubeconfig)
    return OperatorProcess(container["args"], env, workdir / f"{name}.log")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def stack(controlplane: ControlPlane, kube_api: Any, helm_bin: str, pg_dsn: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from kubernetes import client

    workdir = tmp_path_factory.mktemp("operator")
    core = client.CoreV1Api(kube_api)
    for ns in (NS, RELEASE_NS):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))

    # The database starts empty: the operator's migration Job migrates it (test 1).

    # The chart: CRD, RBAC and ServiceAccount applied; the operator Deployment's container
    # gives the command line and environment of the operator subprocess.
    docs = render_chart(helm_bin, f"operator.intervalSeconds={INTERVAL}",
                        f"operator.backoffMaxSeconds={BACKOFF_MAX}")
    kinds = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role",
             "RoleBinding", "ServiceAccount"}
    apply_objects(kube_api, [d for d in docs if d["kind"] in kinds])
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]

    def crd_established() -> bool:
        crd = client.ApiextensionsV1Api(kube_api).read_custom_resource_definition(
            f"{PLURAL}.{GROUP}")
        return any(c.type == "Established" and c.status == "True"
                   for c in crd.status.conditions or [])

    wait_for(crd_established, 60, "the JobQueue CRD to be established")

    sa_name = sa["metadata"]["name"]
    operator = chart_operator(controlplane, docs, workdir, "operator")
    operator.start()
    rules = [rule for d in docs if d["kind"] in ("ClusterRole", "Role")
             for rule in d.get("rules") or []]
    stack = Stack(controlplane, kube_api, pg_dsn, operator,
                  f"system:serviceaccount:{RELEASE_NS}:{sa_name}", workdir, rules)
    try:
        yield stack
    finally:
        operator.stop()
        print(f"operator log: {operator.log}\n{operator.tail(30)}")


@pytest.fixture(autouse=True)
def no_denied_calls(stack: Stack) -> Iterator[None]:
    """Scenario 6: any request by the operator's ServiceAccount that RBAC refused fails."""
    before = len(stack.plane.denied_requests(stack.sa_user))
    yield
    denied = stack.plane.denied_requests(stack.sa_user)[before:]
    assert not denied, f"RBAC denied the operator: {denied}\n{stack.operator.tail()}"


@pytest.fixture(scope="module")
def example(stack: Stack) -> dict[str, Any]:
    """examples/jobqueue.yaml applied, with the Secret's DSN pointing at the test database."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "jobqueue.yaml").read_text())
            if d]
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (jq,) = [d for d in docs if d["kind"] == "JobQueue"]
    assert jq["metadata"]["name"] == NAME and jq["spec"]["queue"] == QUEUE
    secret["stringData"]["url"] = stack.dsn
    stack.core.create_namespaced_secret(NS, secret)
    stack.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, jq)
    return jq


# --------------------------------------------------------------------------- scenarios


def test_1_example_gets_children_and_status(stack: Stack, example: dict[str, Any]) -> None:
    from tenure.core.queries import migrations

    spec = example["spec"]
    uid = (stack.jobqueue() or {})["metadata"]["uid"]

    # Managed migrations: a Job with the queue's image migrates the (empty) database first,
    # and the workers wait at 0 replicas, the reaper suspended, until it succeeded.
    assert stack.schema_version() == 0
    (job,) = wait_for(lambda: stack.migration_jobs() or None, 60, "the migration Job",
                      stack.operator)
    assert job.metadata.name.startswith(f"{NAME}-migrate-")
    (ref,) = job.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("JobQueue", NAME, uid, True)
    (migrate,) = job.spec.template.spec.containers
    assert migrate.image == spec["image"] and migrate.args == ["migrate"]
    assert migrate.termination_message_policy == "FallbackToLogsOnError"
    dsn_ref = {e.name: e for e in migrate.env}["TENURE_DATABASE_URL"].value_from.secret_key_ref
    assert (dsn_ref.name, dsn_ref.key) == (spec["database"]["secretRef"]["name"],
                                           spec["database"]["secretRef"]["key"])

    def held() -> dict[str, Any] | None:
        cond = stack.condition("SchemaReady")
        return cond if cond and cond["reason"] == "Migrating" else None

    cond = wait_for(held, 60, "SchemaReady=False (Migrating)", stack.operator)
    assert cond["status"] == "False" and job.metadata.name in cond["message"]
    assert stack.replicas() == 0
    assert stack.batch.read_namespaced_cron_job(f"{NAME}-reaper", NS).spec.suspend is True
    assert stack.condition("Ready")["status"] == "False"  # type: ignore[index]

    assert stack.run_pending_jobs() == [job.metadata.name]
    assert stack.schema_version() == len(migrations())

    def reconciled() -> dict[str, Any] | None:
        jq = stack.jobqueue() or {}
        status = jq.get("status") or {}
        ready = stack.condition("Ready")
        if (ready and ready["status"] == "True" and "statsTime" in status
                and status.get("observedGeneration") == jq["metadata"]["generation"]):
            return jq
        return None

    jq = wait_for(reconciled, 90, "JobQueue status Ready=True", stack.operator)
    status = jq["status"]
    assert stack.condition("SchemaReady")["reason"] == "Migrated"  # type: ignore[index]
    assert status["migrationJob"] == job.metadata.name
    assert status["ready"] == 0 and status["running"] == 0 and status["failed"] == 0
    assert status["replicas"] == status["desiredReplicas"]
    assert stack.condition("Degraded")["status"] == "False"  # type: ignore[index]

    def owned_by_jobqueue(obj: Any) -> None:
        (ref,) = obj.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid) == ("JobQueue", NAME, uid)
        assert ref.api_version == f"{GROUP}/{VERSION}"
        assert ref.controller is True and ref.block_owner_deletion is True

    dep = stack.deployment()
    assert dep is not None
    owned_by_jobqueue(dep)
    pod = dep.spec.template.spec
    (worker,) = pod.containers
    assert worker.image == spec["image"]
    assert worker.args[0] == "worker"
    wflags = flags(worker.args)
    assert wflags["--app"] == spec["app"] and wflags["--queue"] == QUEUE
    assert wflags["--concurrency"] == str(spec["concurrency"])
    assert wflags["--lease"] == str(spec["leaseSeconds"])
    assert wflags["--heartbeat"] == str(spec["heartbeatSeconds"])
    assert wflags["--drain-timeout"] == str(spec["drainTimeoutSeconds"])
    assert wflags["--metrics-port"] == str(spec["metrics"]["port"])
    dsn_env = {e.name: e for e in worker.env}["TENURE_DATABASE_URL"]
    assert dsn_env.value is None
    assert dsn_env.value_from.secret_key_ref.name == spec["database"]["secretRef"]["name"]
    assert dsn_env.value_from.secret_key_ref.key == spec["database"]["secretRef"]["key"]
    assert worker.liveness_probe.http_get.path == "/healthz"
    assert worker.readiness_probe.http_get.path == "/readyz"
    assert pod.termination_grace_period_seconds > spec["drainTimeoutSeconds"]
    assert worker.security_context.allow_privilege_escalation is False
    assert worker.security_context.read_only_root_filesystem is True
    assert pod.security_context.run_as_non_root is True
    assert worker.resources.requests == spec["pod"]["resources"]["requests"]
    assert dep.spec.template.metadata.labels["team"] == "platform"

    cron = stack.batch.read_namespaced_cron_job(f"{NAME}-reaper", NS)
    owned_by_jobqueue(cron)
    assert cron.spec.schedule == spec["reaper"]["schedule"]
    assert cron.spec.concurrency_policy == "Forbid"
    assert cron.spec.suspend is False
    assert cron.spec.successful_jobs_history_limit is not None
    (reaper,) = cron.spec.job_template.spec.template.spec.containers
    assert reaper.image == spec["image"] and reaper.args[:2] == ["reaper", "--once"]
    rflags = flags(reaper.args)
    assert rflags["--grace"] == str(spec["reaper"]["graceSeconds"])
    assert rflags["--batch"] == str(spec["reaper"]["batchSize"])

    svc = stack.core.read_namespaced_service(f"{NAME}-metrics", NS)
    owned_by_jobqueue(svc)
    (port,) = svc.spec.ports
    assert port.port == spec["metrics"]["port"] and port.target_port == "metrics"
    selector = svc.spec.selector
    assert selector and selector.items() <= dep.spec.template.metadata.labels.items()
    assert selector == dep.spec.selector.match_labels

    pdb = stack.policy.read_namespaced_pod_disruption_budget(f"{NAME}-worker", NS)
    owned_by_jobqueue(pdb)

    # One exporter for the database and schema, owned (not controlled) by the JobQueue.
    (exporter,) = wait_for(lambda: stack.exporters() or None, 60, "the exporter Deployment",
                           stack.operator)
    assert exporter.metadata.name == status["exporter"]
    assert exporter.metadata.name.startswith("tenure-exporter-")
    (ref,) = exporter.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("JobQueue", NAME, uid, False)
    assert exporter.spec.replicas == 1
    (exp,) = exporter.spec.template.spec.containers
    assert exp.image == spec["image"] and exp.args[0] == "exporter"
    assert {e.name: e for e in exp.env}["TENURE_SCHEMA"].value == spec["database"]["schema"]
    assert exp.readiness_probe.http_get.path == "/readyz"
    assert exp.security_context.read_only_root_filesystem is True
    exp_svc = stack.core.read_namespaced_service(exporter.metadata.name, NS)
    (exp_port,) = exp_svc.spec.ports
    assert exp_port.port == 9464 and exp_port.target_port == "metrics"
    assert exp_svc.spec.selector.items() <= exporter.spec.template.metadata.labels.items()

    # No ServiceMonitor CRD in this cluster: the operator must not have tried to create one.
    sm_calls = [e for e in stack.plane.audit_events(stack.sa_user)
                if "/servicemonitors" in e.get("requestURI", "")]
    assert sm_calls == []


@pytest.mark.parametrize("patch, message", [
    ({"leaseSeconds": 30, "heartbeatSeconds": 11},
     "heartbeatSeconds must be at most a third of leaseSeconds"),
    ({"scaling": {"minReplicas": 5, "maxReplicas": 2}},
     "scaling.minReplicas must be less than or equal to scaling.maxReplicas"),
    ({"reaper": {"schedule": "every minute"}},
     "reaper.schedule must be 5 space-separated cron fields"),
    ({"flow": {"keys": [{"key": "tenant:a", "running": -1}]}},
     "should be greater than or equal to 0"),
    ({"flow": {"perKeyRunning": -2}}, "should be greater than or equal to 0"),
    ({"flow": {"keys": [{"key": "", "running": 1}]}}, "should be at least 1 chars long"),
    ({"flow": {"keys": [{"key": "   ", "running": 1}]}}, "flow.keys[].key must not be blank"),
    ({"flow": {"keys": [{"key": "\u00e9" * 150, "running": 1}]}},
     "flow.keys[].key must be at most 200 bytes (UTF-8)"),
    ({"flow": {"keys": [{"key": "a\u0000b", "running": 1}]}},
     "flow.keys[].key must not contain a NUL character"),
    ({"flow": {"keys": [{"key": "tenant:a", "running": 1}, {"key": "tenant:a", "running": 2}]}},
     "Duplicate value"),
    ({"flow": {"keys": [{"key": "tenant:a"}]}}, "flow.keys[] needs running or weight"),
    ({"flow": {"keys": [{"key": "tenant:a", "weight": 0}]}}, "flow.keys[].weight must be above 0"),
    ({"flow": {"rateLimits": [{"name": "-smtp", "perSecond": 1}]}}, "should match"),
    ({"flow": {"rateLimits": [{"name": "smtp", "perSecond": 0}]}},
     "flow.rateLimits[].perSecond must be above 0"),
    ({"flow": {"rateLimits": [{"name": "smtp", "perSecond": 1, "burst": 0}]}},
     "should be greater than or equal to 1"),
    ({"flow": {"rateLimits": [{"name": "smtp", "perSecond": 1}, {"name": "smtp", "perSecond": 2}]}},
     "Duplicate value"),
], ids=["heartbeat-above-lease-third", "min-above-max", "bad-schedule", "flow-negative-running",
        "flow-negative-per-key", "flow-empty-key", "flow-blank-key", "flow-key-over-200-bytes",
        "flow-key-with-nul", "flow-duplicate-keys", "flow-key-without-running-or-weight",
        "flow-zero-weight", "flow-bad-rate-name", "flow-zero-rate", "flow-zero-burst",
        "flow-duplicate-rate-names"])
def test_2_invalid_jobqueue_is_rejected_with_readable_message(
        stack: Stack, patch: dict[str, Any], message: str) -> None:
    from kubernetes.client.rest import ApiException

    doc = yaml.safe_load_all((REPO / "examples" / "jobqueue.yaml").read_text())
    (jq,) = [d for d in doc if d and d["kind"] == "JobQueue"]
    jq["metadata"]["name"] = "broken"
    jq["spec"].update(patch)
    with pytest.raises(ApiException) as refused:
        stack.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, jq)
    assert refused.value.status == 422
    body = json.loads(refused.value.body)
    assert message in body["message"], body["message"]
    assert stack.jobqueue("broken") is None


def test_2b_out_of_range_schedule_is_degraded_by_the_operator(stack: Stack) -> None:
    """CEL checks the schedule's shape only: ``99 99 99 99 99`` is stored, and the operator
    reports it (Degraded/InvalidSchedule) without creating a CronJob."""
    doc = yaml.safe_load_all((REPO / "examples" / "jobqueue.yaml").read_text())
    (jq,) = [d for d in doc if d and d["kind"] == "JobQueue"]
    jq["metadata"]["name"] = "badcron"
    jq["spec"]["reaper"]["schedule"] = "99 99 99 99 99"
    stack.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, jq)
    try:
        def degraded() -> dict[str, Any] | None:
            obj = stack.jobqueue("badcron") or {}
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Degraded" and cond["status"] == "True":
                    return dict(cond)
            return None

        cond = wait_for(degraded, 60, "Degraded=True for the bad schedule", stack.operator)
        assert cond["reason"] == "InvalidSchedule", cond
        assert "minute: 99 is outside 0-59" in cond["message"], cond
        assert not [c for c in stack.batch.list_namespaced_cron_job(NS).items
                    if c.metadata.name == "badcron-reaper"]
    finally:
        stack.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "badcron")
        wait_for(lambda: stack.jobqueue("badcron") is None, 60, "badcron to be deleted",
                 stack.operator)


def _flow_limits(stack: Stack) -> tuple[int | None, dict[str, int]]:
    """The queue's per-key cap and its keys' own limits, as the database holds them."""
    from tenure import flow
    from tenure.core.db import connect

    with connect(stack.dsn) as conn:
        queues = {q.queue: q for q in flow.flow_status(conn, schema="tenure", keys=1000)}
    if QUEUE not in queues:
        return None, {}
    q = queues[QUEUE]
    return q.per_key_running, {k["flow_key"]: k["running_limit"] for k in q.keys if k["own_limit"]}


def test_2c_spec_flow_reaches_the_database_and_owns_the_queue_limits(
        stack: Stack, example: dict[str, Any]) -> None:
    """spec.flow is applied level-based by the periodic pass; while it is set the JobQueue owns
    every flow limit of its queue (a key limit set by the CLI is removed); without it the
    operator leaves them alone. A flow change restarts no pod."""
    from tenure import flow
    from tenure.core.db import connect

    with connect(stack.dsn) as conn:
        flow.set_key_running(conn, QUEUE, "tenant:cli", 7, requested_by="e2e-cli")
    hash_key = "tenure.dev/spec-hash"
    before = stack.deployment().spec.template.metadata.annotations[hash_key]
    time.sleep(3 * INTERVAL)  # a few passes without spec.flow: nothing touched
    assert _flow_limits(stack) == (None, {"tenant:cli": 7})
    assert stack.condition("FlowApplied") is None

    stack.patch_spec({"flow": {"perKeyRunning": 3, "keys": [
        {"key": "tenant:a", "running": 1}, {"key": "tenant:b", "running": 5},
        {"key": "tenant:c", "running": 0}, {"key": "tenant:w", "weight": 4}],
        "rateLimits": [{"name": "e2e-smtp", "perSecond": 5}]}})

    def applied(per_key: int | None, keys: dict[str, int]) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            jq = stack.jobqueue() or {}
            cond = stack.condition("FlowApplied")
            if (cond and cond["status"] == "True"
                    and cond.get("observedGeneration") == jq["metadata"]["generation"]
                    and _flow_limits(stack) == (per_key, keys)):
                return jq
            return None
        return probe

    jq = wait_for(applied(3, {"tenant:a": 1, "tenant:b": 5}), 60, "spec.flow in the database",
                  stack.operator)
    assert jq["status"]["flow"] == {"perKeyRunning": 3, "keyLimits": 2, "keyWeights": 1, "rateLimits": 1}
    with connect(stack.dsn) as conn:
        changes = flow.flow_changes(conn, queue=QUEUE, limit=20)
        rates = {r["name"]: r for r in flow.rate_status(conn)}
    by_operator = [c for c in changes if c["changed_by"] == f"operator:{NS}/{NAME}"]
    assert {(c["flow_key"], c["new_value"]) for c in by_operator} == {
        ("tenant:cli", None), ("tenant:a", "1"), ("tenant:b", "5"), ("tenant:w", "4"), (None, "3")}
    assert (rates["e2e-smtp"]["per_second"], rates["e2e-smtp"]["burst"]) == (5.0, 5)
    assert rates["e2e-smtp"]["updated_by"] == f"operator:{NS}/{NAME}"
    events = stack.core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={NAME},involvedObject.kind=JobQueue").items
    assert any(e.reason == "FlowLimitsApplied" for e in events), [e.reason for e in events]
    # Level-based: a key limit changed behind the operator's back is put back.
    with connect(stack.dsn) as conn:
        flow.set_key_running(conn, QUEUE, "tenant:b", 50, requested_by="e2e-cli")
    wait_for(applied(3, {"tenant:a": 1, "tenant:b": 5}), 60, "tenant:b put back to 5",
             stack.operator)

    # Keys dropped from the spec, perKeyRunning 0 and the rate limit this JobQueue set are removed.
    stack.patch_spec({"flow": {"perKeyRunning": 0, "keys": [{"key": "tenant:b", "running": 5}],
                               "rateLimits": None}})
    jq = wait_for(applied(None, {"tenant:b": 5}), 60, "the smaller spec.flow in the database",
                  stack.operator)
    assert jq["status"]["flow"] == {"perKeyRunning": 0, "keyLimits": 1, "keyWeights": 0, "rateLimits": 0}
    with connect(stack.dsn) as conn:  # the rate limit this JobQueue set is deleted with its entry
        assert "e2e-smtp" not in {r["name"] for r in flow.rate_status(conn)}
    assert stack.deployment().spec.template.metadata.annotations[hash_key] == before

    # Without spec.flow the limits stay as they are, for the CLI to manage.
    stack.patch_spec({"flow": None})

    def let_go() -> dict[str, Any] | None:
        cond = stack.condition("FlowApplied")
        jq = stack.jobqueue() or {}
        ok = cond and cond["reason"] == "NotManaged" and "flow" not in jq.get("status", {})
        return cond if ok else None

    wait_for(let_go, 60, "FlowApplied=False (NotManaged)", stack.operator)
    with connect(stack.dsn) as conn:
        flow.set_key_running(conn, QUEUE, "tenant:cli", 2, requested_by="e2e-cli")
    time.sleep(3 * INTERVAL)
    assert _flow_limits(stack) == (None, {"tenant:b": 5, "tenant:cli": 2})
    with connect(stack.dsn) as conn:  # leave the queue without limits for the next scenarios
        for key in ("tenant:b", "tenant:cli"):
            flow.set_key_running(conn, QUEUE, key, 0, requested_by="e2e-cli")


def test_3_backlog_scales_up_then_down_after_window(
        stack: Stack, example: dict[str, Any]) -> None:
    # minReplicas 1, maxReplicas 5, 10 ready jobs per replica, scale to zero allowed.
    # First the jobs of one tenant under a per-key limit of 1: one runnable, 34 blocked, and
    # blocked jobs are not ready, so no worker is added for them (solid_queue PR #794).
    stack.patch_spec({"scaling": {"scaleDownStabilizationSeconds": WINDOW}, "flow": {"perKeyRunning": 1}})
    wait_for(lambda: _flow_limits(stack) == (1, {}), 60, "the per-key limit to reach the database", stack.operator)
    before = stack.replicas() or 0
    assert before < 4, before  # so that 4 (35 ready jobs) would show
    stack.enqueue(35, start=1000, flow_key="tenant:one")
    jq = wait_for(lambda: (lambda j: j if (j.get("status") or {}).get("ready") == 1 else None)(stack.jobqueue() or {}),
                  60, "the operator to count 1 ready job of 35", stack.operator)
    time.sleep(2 * INTERVAL + 1)  # two more passes: no scale-up for the 34 blocked jobs
    jq = stack.jobqueue() or {}
    assert (stack.replicas() or 0) <= max(before, 1) and jq["status"]["desiredReplicas"] <= max(before, 1), (
        before, jq["status"])
    # The limit lifted: 35 ready jobs, nothing running: ceil(35 / 10) = 4 replicas.
    stack.patch_spec({"flow": {"perKeyRunning": 0}})
    jq = wait_for(lambda: stack.scaled_to(4), 60, "replicas to rise to 4", stack.operator)
    assert jq["status"]["ready"] == 35
    assert "scale up" in jq["status"]["lastScaleReason"]
    events = stack.core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={NAME},involvedObject.kind=JobQueue").items
    assert any(e.reason == "ScaledUp" for e in events), [e.reason for e in events]

    drain_start = dt.datetime.now(dt.UTC)
    stack.drain()
    stats = stack.stats()  # None: the queue has nothing pending, running or failed
    assert stats is None or (stats.ready, stats.running, stats.failed) == (0, 0, 0), stats

    def scaled_down() -> dict[str, Any] | None:
        jq = stack.jobqueue() or {}
        return jq if (jq.get("status") or {}).get("replicas", 4) < 4 else None

    first_down = wait_for(scaled_down, WINDOW + 90, "the first scale-down", stack.operator)
    # Not before the window: the last recommendation of 4 was made at most one timer
    # interval before the drain began (times in status have second precision).
    down_at = parse_time(first_down["status"]["lastScaleTime"])
    earliest = drain_start + dt.timedelta(seconds=WINDOW - INTERVAL - 2)
    assert down_at >= earliest, (down_at, drain_start, first_down["status"])
    # Queue empty and scale to zero allowed: it ends at 0.
    wait_for(lambda: stack.scaled_to(0), WINDOW + 90, "replicas to fall to 0", stack.operator)


def test_4_database_down_degrades_and_keeps_replicas(
        stack: Stack, example: dict[str, Any]) -> None:
    stack.enqueue(15, start=2000)
    wait_for(lambda: stack.scaled_to(2), 60, "replicas to rise to 2", stack.operator)

    secret_name = example["spec"]["database"]["secretRef"]["name"]
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    stack.core.patch_namespaced_secret(secret_name, NS, {"stringData": {"url": dead}})

    def degraded() -> dict[str, Any] | None:
        cond = stack.condition("Degraded")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(degraded, 90, "Degraded=True", stack.operator)
    assert cond["reason"] == "DatabaseUnreachable", cond
    assert cond["message"], cond
    assert stack.condition("Ready")["status"] == "False"  # type: ignore[index]

    # More work arrives while the operator is blind: it must neither scale up nor drop to
    # a default; give it several passes to misbehave.
    stack.enqueue(30, start=3000)
    time.sleep(4 * INTERVAL + BACKOFF_MAX)
    assert stack.replicas() == 2
    assert stack.condition("Degraded")["status"] == "True"  # type: ignore[index]

    stack.core.patch_namespaced_secret(secret_name, NS, {"stringData": {"url": stack.dsn}})

    def healthy() -> bool:
        cond = stack.condition("Degraded")
        return bool(cond and cond["status"] == "False")

    wait_for(healthy, 90, "Degraded=False after the database returns", stack.operator)
    # 45 ready jobs -> ceil(45 / 10) = 5 = maxReplicas.
    wait_for(lambda: stack.scaled_to(5), 60, "replicas to follow the backlog again",
             stack.operator)
    stack.drain()


def _children(stack: Stack) -> dict[str, list[str]]:
    selector = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/managed-by=tenure-operator"
    return {
        "Deployment": [d.metadata.name for d in stack.apps.list_namespaced_deployment(
            NS, label_selector=selector).items],
        "CronJob": [c.metadata.name for c in stack.batch.list_namespaced_cron_job(
            NS, label_selector=selector).items],
        "Service": [s.metadata.name for s in stack.core.list_namespaced_service(
            NS, label_selector=selector).items],
        "PodDisruptionBudget": [p.metadata.name for p in
                                stack.policy.list_namespaced_pod_disruption_budget(
                                    NS, label_selector=selector).items],
    }


def _images(stack: Stack) -> tuple[str, str]:
    dep = stack.deployment()
    cron = stack.batch.read_namespaced_cron_job(f"{NAME}-reaper", NS)
    return (dep.spec.template.spec.containers[0].image,
            cron.spec.job_template.spec.template.spec.containers[0].image)


def test_5_image_change_restart_and_delete(stack: Stack, example: dict[str, Any]) -> None:
    expected_children = {
        "Deployment": [f"{NAME}-worker"], "CronJob": [f"{NAME}-reaper"],
        "Service": [f"{NAME}-metrics"], "PodDisruptionBudget": [f"{NAME}-worker"],
    }
    assert _children(stack) == expected_children

    # A new image needs its migration first; a failed one degrades the JobQueue and the
    # workers keep the old image.
    old_images = _images(stack)
    stack.patch_spec({"image": "tenure:e2e-2"})

    def new_job() -> Any:
        return [j for j in stack.migration_jobs()
                if j.spec.template.spec.containers[0].image == "tenure:e2e-2"] or None

    (job2,) = wait_for(new_job, 60, "the migration Job of the new image", stack.operator)
    # No allow_gone here: the Job of the current image must never be retired under us. It
    # was, now and then (issue 22, item 9): a timer pass still holding the body from before
    # the patch saw its own Job succeeded and deleted every other migration Job, this new one
    # included (a 404 here, or a Job recreated as running and so no MigrationFailed). Jobs now
    # record the generation they were created for and only older ones are retired.
    stack.finish_job(job2.metadata.name, succeeded=False,
                     message="tenure: error: cannot connect to the database")

    def degraded() -> dict[str, Any] | None:
        cond = stack.condition("Degraded")
        return cond if cond and cond["reason"] == "MigrationFailed" else None

    cond = wait_for(degraded, 60, "Degraded=True (MigrationFailed)", stack.operator)
    assert cond["status"] == "True" and job2.metadata.name in cond["message"], cond
    assert stack.condition("SchemaReady")["status"] == "False"  # type: ignore[index]
    time.sleep(2 * INTERVAL)
    assert _images(stack) == old_images

    # The exporter follows the spec: switched off it is retired, back on it returns.
    (exporter,) = stack.exporters()
    stack.patch_spec({"metrics": {"exporter": False}})

    def exporter_service() -> list[Any]:
        return [s for s in stack.core.list_namespaced_service(NS).items
                if s.metadata.name == exporter.metadata.name]

    # Both, in one wait: the pass deletes them one after the other (a check of the Service
    # right after the Deployment was seen gone once ran between the two deletes).
    wait_for(lambda: not stack.exporters() and not exporter_service(), 60,
             "the unused exporter (Deployment and Service) to be retired", stack.operator)
    stack.patch_spec({"metrics": {"exporter": True}})
    wait_for(lambda: [e.metadata.name for e in stack.exporters()] == [exporter.metadata.name],
             60, "the exporter to come back", stack.operator)

    # Restart mid-way: change the spec, stop the operator at once, change it again while it
    # is down, start it: it converges on the last spec without duplicating anything.
    stack.patch_spec({"image": "tenure:e2e-3"})
    stack.operator.stop()
    stack.patch_spec({"image": "tenure:e2e-4"})
    stack.operator.start()
    wait_for(lambda: stack.run_pending_jobs() is not None
             and _images(stack) == ("tenure:e2e-4", "tenure:e2e-4"), 90,
             "children to follow the image change made while the operator was down",
             stack.operator)
    time.sleep(2 * INTERVAL)  # a few more passes: still exactly one of each
    assert _children(stack) == expected_children
    # Once the current image's migration succeeded, the older Jobs (incl. the failed one) go.
    wait_for(lambda: [j.spec.template.spec.containers[0].image
                      for j in stack.migration_jobs()] == ["tenure:e2e-4"], 60,
             "older migration Jobs to be retired", stack.operator)
    assert stack.condition("Degraded")["status"] == "False"  # type: ignore[index]
    jq = stack.jobqueue() or {}
    assert jq["status"]["observedGeneration"] == jq["metadata"]["generation"]

    # Delete: kube-controller-manager's garbage collector removes the children.
    stack.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)
    wait_for(lambda: stack.jobqueue() is None, 60, "the JobQueue to be deleted", stack.operator)
    empty = {kind: [] for kind in expected_children}
    wait_for(lambda: _children(stack) == empty, 120, "the children to be garbage-collected")
    wait_for(lambda: not stack.exporters() and not stack.migration_jobs(), 120,
             "the exporter and the migration Job to be garbage-collected")
    replica_sets = stack.apps.list_namespaced_replica_set(
        NS, label_selector=f"app.kubernetes.io/instance={NAME}").items
    wait_for(lambda: not stack.apps.list_namespaced_replica_set(
        NS, label_selector=f"app.kubernetes.io/instance={NAME}").items, 120,
        f"the worker ReplicaSets {[r.metadata.name for r in replica_sets]} to go")


def test_6_chart_rbac_is_sufficient_and_every_grant_is_used(stack: Stack) -> None:
    """The operator's calls all came from the chart's ServiceAccount, none was refused (the
    autouse fixture checks refusals after each test), and every verb the chart grants was
    used by scenarios 1-5 (so none is superfluous).

    Server-side apply of a missing object is a ``patch`` answered 201 that RBAC also checks
    as ``create``. ServiceMonitors are the one exception: their CRD is absent here, so the
    operator rightly never touches them.
    """
    calls = stack.plane.audit_events(stack.sa_user)
    assert calls, "no request by the operator's ServiceAccount was audited"
    used: set[tuple[str, str, str]] = set()
    for event in calls:
        ref = event.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        group = ref.get("apiGroup") or ""
        used.add((group, resource, event["verb"]))
        if event["verb"] == "patch" and (event.get("responseStatus") or {}).get("code") == 201:
            used.add((group, resource, "create"))
    granted = {(group, resource, verb) for rule in stack.rbac_rules
               for group in rule["apiGroups"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert granted, "the rendered chart has no RBAC rules"
    unused = {g for g in granted if g[0] != "monitoring.coreos.com"} - used
    assert not unused, f"granted but never used by the operator: {sorted(unused)}"
    assert ("tenure.dev", "jobqueues", "watch") in used
    assert ("apps", "deployments", "patch") in used


def test_7_namespace_scoped_chart_rbac_is_sufficient(stack: Stack, helm_bin: str) -> None:
    """The chart's other RBAC mode: a Role per watched namespace, operator run with
    ``--namespace``. A JobQueue there is reconciled with no refused request."""
    from kubernetes import client

    team = "team-a"
    stack.operator.stop()  # the cluster-wide operator would reconcile this namespace too
    stack.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=team)))
    docs = render_chart(helm_bin, "crds.create=false", "rbac.scope=namespace",
                        f"rbac.namespaces={{{team}}}", f"operator.intervalSeconds={INTERVAL}",
                        release="tenure-ns")
    kinds = {d["kind"] for d in docs}
    assert "ClusterRole" not in kinds and "CustomResourceDefinition" not in kinds
    apply_objects(stack.core.api_client, [d for d in docs if d["kind"] in
                                          {"Role", "RoleBinding", "ServiceAccount"}])
    operator = chart_operator(stack.plane, docs, stack.workdir, "operator-ns")
    assert f"--namespace={team}" in operator.args
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    user = f"system:serviceaccount:{RELEASE_NS}:{sa['metadata']['name']}"

    example = [d for d in yaml.safe_load_all((REPO / "examples" / "jobqueue.yaml").read_text())
               if d]
    (secret,) = [d for d in example if d["kind"] == "Secret"]
    (jq,) = [d for d in example if d["kind"] == "JobQueue"]
    secret["stringData"]["url"] = stack.dsn
    stack.core.create_namespaced_secret(team, secret)
    stack.custom.create_namespaced_custom_object(GROUP, VERSION, team, PLURAL, jq)
    operator.start()
    try:
        def ready() -> bool:
            obj = stack.custom.get_namespaced_custom_object(GROUP, VERSION, team, PLURAL, NAME)
            conds = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        wait_for(lambda: stack.run_pending_jobs(team) is not None and ready(), 90,
                 "the JobQueue in the watched namespace to be Ready", operator)
        dep = stack.apps.read_namespaced_deployment(f"{NAME}-worker", team)
        assert dep.metadata.owner_references[0].name == NAME
        stack.custom.delete_namespaced_custom_object(GROUP, VERSION, team, PLURAL, NAME)
        wait_for(lambda: not stack.apps.list_namespaced_deployment(team).items, 120,
                 "the worker Deployment to be garbage-collected", operator)
    finally:
        operator.stop()
    assert stack.plane.audit_events(user), "the namespaced operator made no request"
    assert stack.plane.denied_requests(user) == [], operator.tail()
