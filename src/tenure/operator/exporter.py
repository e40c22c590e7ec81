"""The shared ``tenure exporter``: one per database and schema of a namespace, owned by the
JobQueues that use it, built from a kopf index instead of listing the namespace.

**The index.** :func:`exporter_member` is a kopf indexing function over JobQueues: every
JobQueue that wants an exporter (``spec.metrics.exporter``, a valid spec, not being deleted)
is one :class:`ExporterMember` under the key ``(namespace, exporter name)``. kopf keeps the
index current from its watch stream (an object is re-indexed on every event and dropped when
it is deleted, before any handler sees the event), so a pass looks up its own group's
members in memory: no list of the namespace's JobQueues per pass.

**A pass** (:func:`reconcile_exporters`) touches at most two exporters: the JobQueue's
current one (applied with every member as an owner, none the controller) and, when the
JobQueue moved to another database or switched its exporter off, the one it used before
(``status.exporter``): re-applied without it, or deleted when nobody uses it any more. A
deleted member needs no pass: the garbage collector drops its owner reference (and the
objects with the last one), and the next pass of another member re-applies the group without
it (the image then comes from the new oldest member). It never re-applies other databases'
exporters. Other members' migration state is read from their status in the index, so the
exporter follows a member's migration one full pass (``intervalSeconds``) after its Job.

Why shared rather than one per JobQueue: every exporter serves every queue of its schema (it
is one SQL query), so one per JobQueue would only multiply the same series and the queries.
JobQueues in other namespaces (or naming another Secret with the same DSN) get their own
exporter; the generated dashboards and alerts take ``max by (queue)`` of queue-level series,
so such duplicates never add up.

**Migrations (issue 22, item 6).** The exporter runs the oldest member's image and reads the
schema through that image's ``tenure.core.repository``. It is held like the workers: until
that member's migration Job for its current image has succeeded (``SchemaReady`` True for
it, or migrations unmanaged), an existing exporter Deployment keeps the image and replicas it
runs (its owners and the rest follow), and a new one is created with 0 replicas. So the
exporter never runs code newer than the schema it reads. For the opposite skew (a schema
migrated further by a newer image of another JobQueue, or by hand), the exporter reports the
schema version it finds against the one its code knows (``tenure_exporter_schema_skew``) and
serves what its queries can still read.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tenure.operator import manifests as mf
from tenure.operator import spec as s
from tenure.operator.kube import Kube
from tenure.operator.status import CONDITION_SCHEMA_READY, condition_of

#: Port of ``tenure exporter`` (its CLI default).
EXPORTER_PORT = 9464
EXPORTER_PREFIX = "tenure-exporter-"
EXPORTER_DATABASE_ANNOTATION = f"{s.GROUP}/database"
EXPORTER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "10m", "memory": "64Mi"},
    "limits": {"memory": "128Mi"},
}
#: The kopf index's id, and so the keyword the handlers receive it under.
INDEX_ID = "jobqueue_exporters"


def exporter_key(namespace: str, spec: s.JobQueueSpec) -> str:
    """One exporter per database and schema, as far as a namespace can tell: JobQueues naming
    the same Secret, key and schema share it."""
    blob = json.dumps(
        [namespace, spec.secret_name, spec.secret_key, spec.schema], separators=(",", ":")
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:10]


def exporter_name(namespace: str, spec: s.JobQueueSpec) -> str:
    """``tenure-exporter-HASH`` of the database and schema ``spec`` names."""
    return EXPORTER_PREFIX + exporter_key(namespace, spec)


def exporter_labels(namespace: str, spec: s.JobQueueSpec) -> dict[str, str]:
    return mf.common_labels(exporter_name(namespace, spec), "exporter")


def build_exporter_deployment(
    namespace: str, spec: s.JobQueueSpec, owners: list[dict[str, Any]], replicas: int = 1
) -> dict[str, Any]:
    """``tenure exporter`` for one database and schema, owned by every JobQueue using it.

    ``spec`` is the oldest owner's (image, pull policy and secrets come from it); the DSN is
    read from the shared Secret reference. One replica with Recreate: a second copy would
    only serve the same figures twice (dashboards and alerts take ``max`` per queue anyway).
    ``replicas`` is 0 only while held for a migration (see :func:`reconcile_exporters`).
    """
    name = exporter_name(namespace, spec)
    pod_spec = mf.pod_spec_common(spec)
    pod_spec.pop("nodeSelector", None)
    pod_spec.pop("tolerations", None)
    pod_spec.pop("serviceAccountName", None)
    env: list[dict[str, Any]] = [
        {
            "name": "TENURE_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": spec.secret_name, "key": spec.secret_key}},
        },
        {"name": "TENURE_SCHEMA", "value": spec.schema},
        {"name": "TENURE_HOME", "value": "/tmp/tenure"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    container: dict[str, Any] = {
        "name": "exporter",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["exporter", "--port", str(EXPORTER_PORT)],
        "env": env,
        "ports": [{"name": mf.METRICS_PORT_NAME, "containerPort": EXPORTER_PORT, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": mf.METRICS_PORT_NAME},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Ready while the database answers: an unreachable database shows as a not-ready
        # pod, while /metrics keeps serving tenure_exporter_errors_total for the alert.
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": mf.METRICS_PORT_NAME},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": copy.deepcopy(EXPORTER_RESOURCES),
        "securityContext": mf.container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec["containers"] = [container]
    labels = exporter_labels(namespace, spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                EXPORTER_DATABASE_ANNOTATION: (
                    f"secret {spec.secret_name}/{spec.secret_key}, schema {spec.schema}"
                )
            },
            "ownerReferences": owners,
        },
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": mf.selector_labels(name, "exporter")},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def build_exporter_service(
    namespace: str, spec: s.JobQueueSpec, owners: list[dict[str, Any]]
) -> dict[str, Any]:
    name = exporter_name(namespace, spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": exporter_labels(namespace, spec),
            "ownerReferences": owners,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": mf.selector_labels(name, "exporter"),
            "ports": [
                {
                    "name": mf.METRICS_PORT_NAME,
                    "port": EXPORTER_PORT,
                    "targetPort": mf.METRICS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_exporter_service_monitor(
    namespace: str, spec: s.JobQueueSpec, owners: list[dict[str, Any]]
) -> dict[str, Any]:
    name = exporter_name(namespace, spec)
    labels = exporter_labels(namespace, spec)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": owners,
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": mf.METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
        },
    }


# --------------------------------------------------------------------------- the index


@dataclasses.dataclass(frozen=True)
class ExporterMember:
    """One JobQueue that wants the exporter of its database and schema (an index value)."""

    name: str
    uid: str
    #: metadata.creationTimestamp: the oldest member's image runs the exporter.
    created: str
    spec: s.JobQueueSpec
    #: The migration Job of this member's current image has succeeded (or is unmanaged).
    schema_ready: bool

    def owner(self) -> dict[str, Any]:
        """An owner reference to this member (not the controller: the exporter is shared)."""
        return {
            "apiVersion": s.API_VERSION,
            "kind": s.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": True,
        }


#: (namespace, exporter name) -> the members the index holds for it.
MembersOf = Callable[[str, str], Sequence[ExporterMember]]


def no_members(namespace: str, exporter: str) -> Sequence[ExporterMember]:
    """An empty index (a JobQueue alone in its namespace)."""
    return ()


def schema_ready_in_status(name: str, spec: s.JobQueueSpec, status: Mapping[str, Any]) -> bool:
    """Whether a JobQueue's status says the schema is ready for its current image: SchemaReady
    True, and either unmanaged or migrated by the Job of this very image (status.migrationJob)."""
    cond = condition_of(status, CONDITION_SCHEMA_READY)
    if cond is None or cond.get("status") != "True":
        return False
    if cond.get("reason") == "Unmanaged":
        return True
    return status.get("migrationJob") == mf.migration_job_name(name, spec)


def exporter_member(body: Mapping[str, Any]) -> dict[tuple[str, str], ExporterMember]:
    """The kopf indexing function: ``{(namespace, exporter name): member}`` for a JobQueue that
    wants an exporter, ``{}`` for one that does not (being deleted, invalid spec, exporter off).

    ``{}`` rather than None: kopf keeps an object's previous entries when its indexing function
    returns None, and drops the keys that are no longer returned when it returns a mapping."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return {}
    try:
        spec = s.parse_spec(body.get("spec") or {})
    except s.SpecError:
        return {}
    if not spec.exporter:
        return {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    member = ExporterMember(
        name=name,
        uid=str(meta.get("uid")),
        created=str(meta.get("creationTimestamp") or ""),
        spec=spec,
        schema_ready=schema_ready_in_status(name, spec, body.get("status") or {}),
    )
    return {(namespace, exporter_name(namespace, spec)): member}


def members_from_index(index: Mapping[tuple[str, str], Any]) -> MembersOf:
    """A :data:`MembersOf` over the kopf index (a copy per lookup: kopf updates the index from
    its event loop while handlers run in threads)."""

    def lookup(namespace: str, exporter: str) -> Sequence[ExporterMember]:
        store = index.get((namespace, exporter))
        return tuple(store) if store is not None else ()

    return lookup


# --------------------------------------------------------------------------- groups


@dataclasses.dataclass(frozen=True)
class ExporterGroup:
    """The JobQueues of one namespace that share a database and schema (see exporter_key)."""

    name: str
    #: Spec of the oldest member (its image runs the exporter).
    spec: s.JobQueueSpec
    #: Owner references to every member, oldest first (none is the controller).
    owners: tuple[dict[str, Any], ...]
    #: Whether any member asks for a ServiceMonitor.
    service_monitor: bool
    #: The oldest member's schema is not ready for its image: the exporter is held.
    held: bool = False


def exporter_group(name: str, members: Sequence[ExporterMember]) -> ExporterGroup:
    """The group of ``members`` (at least one), oldest first."""
    ordered = sorted(members, key=lambda m: (m.created, m.name))
    return ExporterGroup(
        name=name,
        spec=ordered[0].spec,
        owners=tuple(m.owner() for m in ordered),
        service_monitor=any(m.spec.service_monitor for m in ordered),
        held=not ordered[0].schema_ready,
    )


def build_exporter(
    namespace: str, group: ExporterGroup, service_monitor_available: bool,
    live: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The shared exporter's objects in apply order (Service, Deployment, ServiceMonitor).

    A held group keeps the image and replicas of the ``live`` Deployment (0 replicas, and the
    oldest member's image, when there is none)."""
    owners = [dict(o) for o in group.owners]
    spec, replicas = group.spec, 1
    if group.held:
        replicas, image = _live_replicas_and_image(live)
        spec = dataclasses.replace(spec, image=image or spec.image)
    out = [
        build_exporter_service(namespace, spec, owners),
        build_exporter_deployment(namespace, spec, owners, replicas),
    ]
    if group.service_monitor and service_monitor_available:
        out.append(build_exporter_service_monitor(namespace, spec, owners))
    return out


def _live_replicas_and_image(live: Mapping[str, Any] | None) -> tuple[int, str | None]:
    if live is None:
        return 0, None
    dep_spec = live.get("spec") or {}
    replicas = dep_spec.get("replicas")
    containers = ((dep_spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    image = containers[0].get("image")
    return (int(replicas) if isinstance(replicas, int) else 1), (str(image) if image else None)


# --------------------------------------------------------------------------- one pass


def reconcile_exporters(
    kube: Kube,
    namespace: str,
    own: ExporterMember | None,
    previous: str | None,
    members_of: MembersOf,
    service_monitor_available: bool,
) -> str | None:
    """Bring the JobQueue's current exporter and, if it changed, its previous one in line.

    ``own``: this JobQueue as a member, from this pass's spec and migration state (None when
    it wants no exporter); ``previous``: the exporter its status names. The index gives the
    other members (this JobQueue's own entry there is replaced by ``own``, which is fresher).
    Returns the current exporter's name (None: none).
    """
    current = exporter_name(namespace, own.spec) if own is not None else None
    for name in dict.fromkeys(n for n in (current, previous) if n):
        members = [m for m in members_of(namespace, name) if own is None or m.uid != own.uid]
        if own is not None and name == current:
            members.append(own)
        if members:
            _apply_group(kube, namespace, exporter_group(name, members), service_monitor_available)
        else:
            _retire(kube, namespace, name, service_monitor_available)
    return current


def _apply_group(kube: Kube, namespace: str, group: ExporterGroup, sm_available: bool) -> None:
    live = kube.get("apps/v1", "Deployment", namespace, group.name) if group.held else None
    for child in build_exporter(namespace, group, sm_available, live):
        kube.apply(child)
    if sm_available and not group.service_monitor:
        kube.delete("monitoring.coreos.com/v1", "ServiceMonitor", namespace, group.name)


def _retire(kube: Kube, namespace: str, name: str, sm_available: bool) -> None:
    """Delete an exporter no JobQueue uses any more (absent objects are fine). The Deployment
    goes last, so that once it is gone the exporter is gone as a whole."""
    if sm_available:
        kube.delete("monitoring.coreos.com/v1", "ServiceMonitor", namespace, name)
    kube.delete("v1", "Service", namespace, name)
    kube.delete("apps/v1", "Deployment", namespace, name)
