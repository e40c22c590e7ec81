"""Pure builders: a parsed JobQueue spec -> child manifests (plain dicts, no owner references).

The engine adds owner references (``kopf.adopt``) and applies the manifests with server-side
apply, so every builder returns the *complete* desired object: a field left out here is
removed from the live object on the next apply.

Children of JobQueue ``NAME`` in its namespace:

* ``NAME-worker``  Deployment running ``tenure worker``;
* ``NAME-reaper``  CronJob running ``tenure reaper --once``;
* ``NAME-metrics`` Service exposing the workers' metrics port;
* ``NAME-worker``  PodDisruptionBudget (maxUnavailable 1);
* ``NAME``         ServiceMonitor (monitoring.coreos.com/v1), only when asked for and present;
* ``NAME-migrate-HASH`` Job running ``tenure migrate`` with the queue's image (managed
  migrations), one per (image, schema, Secret reference): HASH changes when any of them does.

The shared ``tenure exporter`` of a database and schema is built in
:mod:`tenure.operator.exporter`, from the pod pieces here.

The pod templates carry ``tenure.dev/spec-hash``: a hash of the spec without ``scaling``
(replica bounds do not change a pod) and ``flow`` (limits the database holds), so any
pod-shaping change rolls the pods and a scaling or flow change does not. The engine computes it once per pass (:func:`spec_hash`) and hands it to
the builders with the parsed spec.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tenure.operator import spec as s

SPEC_HASH_ANNOTATION = f"{s.GROUP}/spec-hash"
MANAGED_BY = "tenure-operator"
#: Seconds added to drainTimeout for terminationGracePeriodSeconds: the drain must finish and
#: the worker release its claims and close its connections before the kubelet's SIGKILL.
TERMINATION_MARGIN_SECONDS = 15
CRONJOB_SUCCESS_HISTORY = 3
CRONJOB_FAILED_HISTORY = 3
#: A reaper run that has not finished within this many seconds is killed (next one follows).
REAPER_ACTIVE_DEADLINE_SECONDS = 300
REAPER_STARTING_DEADLINE_SECONDS = 120
METRICS_PORT_NAME = "metrics"
CONTAINER_USER_ID = 10001
#: Pod failures of the migration Job before it is Failed (a DB restart mid-migration is
#: retried; migrations are transactional and serialised by an advisory lock).
MIGRATION_BACKOFF_LIMIT = 2
#: A migration Job still running after this many seconds is failed by the Job controller.
MIGRATION_ACTIVE_DEADLINE_SECONDS = 600
MIGRATION_HASH_LABEL = f"{s.GROUP}/migration-hash"
#: The JobQueue generation a migration Job was created for (see tenure.operator.migration).
MIGRATION_GENERATION_ANNOTATION = f"{s.GROUP}/generation"


def worker_name(name: str) -> str:
    return f"{name}-worker"


def reaper_name(name: str) -> str:
    return f"{name}-reaper"


def service_name(name: str) -> str:
    return f"{name}-metrics"


def pdb_name(name: str) -> str:
    return f"{name}-worker"


def service_monitor_name(name: str) -> str:
    return name


def migration_hash(spec: s.JobQueueSpec) -> str:
    """What a migration Job depends on: the code (image) and the database (Secret + schema)."""
    blob = json.dumps(
        [spec.image, spec.schema, spec.secret_name, spec.secret_key], separators=(",", ":")
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:8]


def migration_job_name(name: str, spec: s.JobQueueSpec) -> str:
    return f"{name}-migrate-{migration_hash(spec)}"


def selector_labels(name: str, component: str) -> dict[str, str]:
    """Labels that select a child's pods; fixed, never user-overridable."""
    return {
        "app.kubernetes.io/name": "tenure",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
    }


def common_labels(name: str, component: str) -> dict[str, str]:
    return {**selector_labels(name, component), "app.kubernetes.io/managed-by": MANAGED_BY}


#: Top-level spec fields that shape no pod (left out of :func:`spec_hash`).
NOT_POD_SHAPING = frozenset({"scaling", "flow"})


def spec_hash(raw_spec: Mapping[str, Any]) -> str:
    """Stable hash of the pod-shaping part of the spec (everything but ``scaling`` and
    ``flow``, which lives in the database: changing a flow limit restarts no pod)."""
    shaped = {k: v for k, v in raw_spec.items() if k not in NOT_POD_SHAPING}
    blob = json.dumps(shaped, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": CONTAINER_USER_ID,
        "runAsGroup": CONTAINER_USER_ID,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": CONTAINER_USER_ID,
        "runAsGroup": CONTAINER_USER_ID,
        "fsGroup": CONTAINER_USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _env(spec: s.JobQueueSpec) -> list[dict[str, Any]]:
    """Base environment, then the user's additions (a user entry wins by name)."""
    base: list[dict[str, Any]] = [
        {
            "name": "TENURE_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": spec.secret_name, "key": spec.secret_key}},
        },
        {"name": "TENURE_SCHEMA", "value": spec.schema},
        {"name": "TENURE_HOME", "value": "/tmp/tenure"},
        {"name": "TENURE_RETRY_MAX_ATTEMPTS", "value": str(spec.retry.max_attempts)},
        {"name": "TENURE_RETRY_BASE_DELAY", "value": str(spec.retry.base_delay_seconds)},
        {"name": "TENURE_RETRY_MAX_DELAY", "value": str(spec.retry.max_delay_seconds)},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    # The DSN always comes from the referenced Secret; a user entry wins for any other name.
    user = [
        copy.deepcopy(dict(e)) for e in spec.pod.env if e.get("name") != "TENURE_DATABASE_URL"
    ]
    user_names = {e.get("name") for e in user}
    return [e for e in base if e["name"] not in user_names] + user


def pod_spec_common(spec: s.JobQueueSpec) -> dict[str, Any]:
    """The pod settings every child shares (workers, reaper, migration Job, exporter)."""
    pod: dict[str, Any] = {
        "securityContext": pod_security_context(),
        "automountServiceAccountToken": False,
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
    }
    if spec.pod.node_selector:
        pod["nodeSelector"] = dict(spec.pod.node_selector)
    if spec.pod.tolerations:
        pod["tolerations"] = [copy.deepcopy(dict(t)) for t in spec.pod.tolerations]
    if spec.pod.service_account_name:
        pod["serviceAccountName"] = spec.pod.service_account_name
    if spec.pod.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.pod.image_pull_secrets if n]
    return pod


def _container(spec: s.JobQueueSpec, name: str, args: list[str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": args,
        "env": _env(spec),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if spec.pod.resources:
        container["resources"] = copy.deepcopy(dict(spec.pod.resources))
    return container


def _pod_metadata(
    name: str, component: str, spec: s.JobQueueSpec, hash_: str
) -> dict[str, Any]:
    labels = {**{k: str(v) for k, v in spec.pod.labels.items()}, **common_labels(name, component)}
    annotations = {**{k: str(v) for k, v in spec.pod.annotations.items()}}
    annotations[SPEC_HASH_ANNOTATION] = hash_
    return {"labels": labels, "annotations": annotations}


def worker_args(spec: s.JobQueueSpec) -> list[str]:
    """``tenure worker`` arguments (the DSN comes from the environment, never argv)."""
    return [
        "worker",
        "--app",
        spec.app,
        "--queue",
        spec.queue,
        "--concurrency",
        str(spec.concurrency),
        "--lease",
        str(spec.lease_seconds),
        "--heartbeat",
        str(spec.heartbeat_seconds),
        "--grace",
        str(spec.grace_seconds),
        "--drain-timeout",
        str(spec.drain_timeout_seconds),
        "--metrics-port",
        str(spec.metrics_port),
        "--vacuum-dead-rows",
        str(spec.vacuum_dead_rows),
        *_backoff_args(spec),
    ]


def _backoff_args(spec: s.JobQueueSpec) -> list[str]:
    """Requeue backoff bounds (spec.retry) for the reaping done by the worker and the CronJob."""
    return [
        "--backoff-base",
        str(spec.retry.base_delay_seconds),
        "--backoff-max",
        str(spec.retry.max_delay_seconds),
    ]


def reaper_args(spec: s.JobQueueSpec) -> list[str]:
    return [
        "reaper",
        "--once",
        "--grace",
        str(spec.reaper.grace_seconds),
        "--heartbeat",
        str(spec.heartbeat_seconds),
        "--batch",
        str(spec.reaper.batch_size),
        *_backoff_args(spec),
    ]


def termination_grace_seconds(spec: s.JobQueueSpec) -> int:
    return spec.drain_timeout_seconds + TERMINATION_MARGIN_SECONDS


def build_deployment(
    name: str, namespace: str, spec: s.JobQueueSpec, hash_: str, replicas: int
) -> dict[str, Any]:
    """Worker Deployment with ``replicas`` (the scaler's figure, or the current one)."""
    container = _container(spec, "worker", worker_args(spec))
    container["ports"] = [
        {"name": METRICS_PORT_NAME, "containerPort": spec.metrics_port, "protocol": "TCP"}
    ]
    # /healthz turns 503 once the heartbeat loop has missed 3 intervals: restart then.
    container["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": METRICS_PORT_NAME},
        "initialDelaySeconds": spec.heartbeat_seconds,
        "periodSeconds": spec.heartbeat_seconds,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }
    container["readinessProbe"] = {
        "httpGet": {"path": "/readyz", "port": METRICS_PORT_NAME},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
        "failureThreshold": 2,
    }
    pod_spec = pod_spec_common(spec)
    pod_spec["terminationGracePeriodSeconds"] = termination_grace_seconds(spec)
    pod_spec["containers"] = [container]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": worker_name(name),
            "namespace": namespace,
            "labels": common_labels(name, "worker"),
        },
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(name, "worker")},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
            },
            "template": {
                "metadata": _pod_metadata(name, "worker", spec, hash_),
                "spec": pod_spec,
            },
        },
    }


def build_cronjob(name: str, namespace: str, spec: s.JobQueueSpec, hash_: str) -> dict[str, Any]:
    """Reaper CronJob: one ``tenure reaper --once`` per tick, never two at a time."""
    pod_spec = pod_spec_common(spec)
    pod_spec["restartPolicy"] = "Never"
    pod_spec["containers"] = [_container(spec, "reaper", reaper_args(spec))]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": reaper_name(name),
            "namespace": namespace,
            "labels": common_labels(name, "reaper"),
        },
        "spec": {
            "schedule": spec.reaper.schedule,
            "suspend": spec.reaper.suspend,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": REAPER_STARTING_DEADLINE_SECONDS,
            "successfulJobsHistoryLimit": CRONJOB_SUCCESS_HISTORY,
            "failedJobsHistoryLimit": CRONJOB_FAILED_HISTORY,
            "jobTemplate": {
                "metadata": {"labels": common_labels(name, "reaper")},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": REAPER_ACTIVE_DEADLINE_SECONDS,
                    "ttlSecondsAfterFinished": 3600,
                    "template": {
                        "metadata": _pod_metadata(name, "reaper", spec, hash_),
                        "spec": pod_spec,
                    },
                },
            },
        },
    }


def build_service(name: str, namespace: str, spec: s.JobQueueSpec) -> dict[str, Any]:
    """ClusterIP Service in front of the workers' metrics port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": namespace,
            "labels": common_labels(name, "worker"),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(name, "worker"),
            "ports": [
                {
                    "name": METRICS_PORT_NAME,
                    "port": spec.metrics_port,
                    "targetPort": METRICS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_pdb(name: str, namespace: str) -> dict[str, Any]:
    """At most one worker evicted at a time (each eviction drains within the grace period)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name(name),
            "namespace": namespace,
            "labels": common_labels(name, "worker"),
        },
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(name, "worker")},
        },
    }


def build_service_monitor(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "name": service_monitor_name(name),
            "namespace": namespace,
            "labels": common_labels(name, "worker"),
        },
        "spec": {
            "selector": {"matchLabels": common_labels(name, "worker")},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
        },
    }


def build_migration_job(
    name: str, namespace: str, spec: s.JobQueueSpec, generation: int | None = None
) -> dict[str, Any]:
    """``tenure migrate`` with the queue's image against the queue's database and schema.

    The container's last log lines become its termination message on failure, so the
    operator can tell "schema newer than this code" from an unreachable database. No TTL:
    the succeeded Job is the record that this image's schema is in place (older ones are
    deleted once a newer one succeeded). ``generation``: the JobQueue's, recorded so that
    only Jobs of older specs are retired.
    """
    pod_spec = pod_spec_common(spec)
    pod_spec["restartPolicy"] = "Never"
    container = _container(spec, "migrate", ["migrate"])
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    pod_spec["containers"] = [container]
    labels = {**common_labels(name, "migrate"), MIGRATION_HASH_LABEL: migration_hash(spec)}
    metadata: dict[str, Any] = {
        "name": migration_job_name(name, spec),
        "namespace": namespace,
        "labels": labels,
    }
    if generation is not None:
        metadata["annotations"] = {MIGRATION_GENERATION_ANNOTATION: str(generation)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": MIGRATION_BACKOFF_LIMIT,
            "activeDeadlineSeconds": MIGRATION_ACTIVE_DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": pod_spec,
            },
        },
    }


def build_children(
    name: str,
    namespace: str,
    spec: s.JobQueueSpec,
    hash_: str,
    replicas: int,
    service_monitor_available: bool,
) -> list[dict[str, Any]]:
    """All children in apply order; the ServiceMonitor only when wanted and its API exists.

    ``spec`` and ``hash_`` (:func:`spec_hash` of the raw spec) come from the engine, which
    parses the spec once per pass."""
    children = [
        build_service(name, namespace, spec),
        build_pdb(name, namespace),
        build_deployment(name, namespace, spec, hash_, replicas),
        build_cronjob(name, namespace, spec, hash_),
    ]
    if spec.service_monitor and service_monitor_available:
        children.append(build_service_monitor(name, namespace))
    return children
