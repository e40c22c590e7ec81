"""Managed migrations: the migration Job of a JobQueue's current image, and where it stands.

Before workers run, a Job with the queue's own image runs ``tenure migrate`` (advisory-locked,
idempotent). A Job rather than the operator's own process, because the schema must match the
*workers'* code, which is the JobQueue's image and may be newer or older than the operator's.
Until the Job for the current (image, schema, Secret) has succeeded, the engine holds the
worker Deployment, the reaper CronJob and the shared exporter. ``SchemaReady`` tells which; a
failed Job makes the JobQueue ``Degraded`` (``SchemaNewerThanCode`` when migrate refused a newer
schema, read from the pod's termination message, else ``MigrationFailed``) and is run again
after ``OperatorConfig.migration_retry_seconds``.

Each Job carries the JobQueue generation it was created for (``tenure.dev/generation``), so a
pass that read an older body (kopf runs a JobQueue's timer and its change handlers
concurrently) never retires the Job of a newer spec: only Jobs created for the pass's own
generation or an older one go. Limits: a pass whose Job was already retired by a newer one
creates it again (it then fails or succeeds and is retired by the next pass); the window is
the time between a pass reading its body and its first API call.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tenure.operator import manifests as mf
from tenure.operator import spec as s
from tenure.operator.kube import Kube
from tenure.operator.status import ConditionValue, Event

#: What `tenure migrate` prints when the schema is newer than its code (SchemaTooNewError).
SCHEMA_NEWER_MARKERS = ("upgrade tenure", "this tenure knows")
#: Adds owner references to a child manifest in place (kopf.adopt in production).
Adopter = Callable[[dict[str, Any]], None]
UNMANAGED_MESSAGE = (
    "migrations are not managed by the operator (spec.migrations.managed or the chart's "
    "operator.manageMigrations is false): run `tenure migrate` with this image before workers start"
)


@dataclasses.dataclass(frozen=True)
class MigrationState:
    """Where the schema stands for the JobQueue's current image (one pass's view)."""

    #: True when workers may run: the Job for this image succeeded, or migrations are unmanaged.
    ready: bool
    #: SchemaReady reason: Migrated | Migrating | MigrationFailed | SchemaNewerThanCode | Unmanaged
    reason: str
    message: str
    #: The Job failed: the JobQueue is Degraded with ``reason``.
    failed: bool = False
    #: Name of the current migration Job (None when unmanaged).
    job: str | None = None
    events: tuple[Event, ...] = ()

    def condition(self) -> ConditionValue:
        """The SchemaReady condition this state shows."""
        return ConditionValue(self.ready, self.reason, self.message)


UNMANAGED = MigrationState(True, "Unmanaged", UNMANAGED_MESSAGE)


def _job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def job_phase(job: Mapping[str, Any]) -> str:
    """Succeeded | Failed | Running, from the Job's terminal conditions (level-based)."""
    if _job_condition(job, "Complete") is not None:
        return "Succeeded"
    if _job_condition(job, "Failed") is not None:
        return "Failed"
    return "Running"


def termination_messages(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Termination messages of the pods' containers (``FallbackToLogsOnError``: log tail)."""
    out: list[str] = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            for key in ("state", "lastState"):
                terminated = ((cs.get(key) or {}).get("terminated")) or {}
                message = str(terminated.get("message") or "").strip()
                if message:
                    out.append(message)
    return out


def classify_migration_failure(
    job: Mapping[str, Any], messages: Sequence[str]
) -> tuple[str, str]:
    """(reason, one-line message) for a failed migration Job.

    ``SchemaNewerThanCode`` when `tenure migrate` refused a schema migrated by newer code
    (only a newer image fixes that), else ``MigrationFailed`` with the last error line.
    """
    lines = [line.strip() for m in messages for line in m.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    detail = errors[-1] if errors else ""
    if any(marker in line for line in lines for marker in SCHEMA_NEWER_MARKERS):
        newer = [line for line in lines if any(m in line for m in SCHEMA_NEWER_MARKERS)]
        return "SchemaNewerThanCode", _one_line_text(
            f"the database schema is newer than image {_job_image(job)}: {newer[-1]}"
        )
    failed = _job_condition(job, "Failed") or {}
    why = detail or str(failed.get("message") or failed.get("reason") or "no pod output")
    return "MigrationFailed", _one_line_text(
        f"migration Job {(job.get('metadata') or {}).get('name')} failed: {why}"
    )


def _job_image(job: Mapping[str, Any]) -> str:
    containers = ((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers") or [{}])
    return str(containers[0].get("image", "?"))


def _one_line_text(text: str) -> str:
    return " ".join(text.split())[:500]


def _failed_at(job: Mapping[str, Any]) -> dt.datetime | None:
    cond = _job_condition(job, "Failed") or {}
    stamp = cond.get("lastTransitionTime") or (job.get("status") or {}).get("completionTime")
    if not stamp:
        return None
    try:
        at = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def job_generation(job: Mapping[str, Any]) -> int:
    """The JobQueue generation a migration Job was created for (-1 when not recorded: made by
    an operator before generations were recorded)."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    text = str(annotations.get(mf.MIGRATION_GENERATION_ANNOTATION, ""))
    return int(text) if text.isdigit() else -1


def retire_older_jobs(
    kube: Kube, name: str, namespace: str, current: str, generation: int | None
) -> list[str]:
    """Delete this JobQueue's migration Jobs other than ``current`` (which succeeded) that were
    created for this pass's ``generation`` or an older one; returns their names.

    A Job created for a newer generation belongs to a spec newer than the body this pass read
    (a change handler ran while this timer pass was under way): it is kept, running or not.
    """
    selector = (
        f"app.kubernetes.io/instance={name},app.kubernetes.io/component=migrate,"
        f"app.kubernetes.io/managed-by={mf.MANAGED_BY}"
    )
    retired = []
    for old in kube.list("batch/v1", "Job", namespace, selector):
        old_name = str((old.get("metadata") or {}).get("name"))
        if old_name == current:
            continue
        if generation is not None and job_generation(old) > generation:
            continue
        kube.delete("batch/v1", "Job", namespace, old_name)
        retired.append(old_name)
    return retired


def reconcile_migration(
    kube: Kube,
    adopt: Adopter,
    name: str,
    namespace: str,
    spec: s.JobQueueSpec,
    now: dt.datetime,
    retry_seconds: float,
    generation: int | None = None,
) -> MigrationState:
    """Ensure the migration Job for the current image exists and read where it stands.

    The Job is created once (never re-applied: a Job's pod template is immutable); it is
    deleted to be run again when it failed ``retry_seconds`` ago (except for a schema newer
    than the code) and, once it succeeded, every older migration Job of this JobQueue goes.
    """
    job_name = mf.migration_job_name(name, spec)
    job = kube.get("batch/v1", "Job", namespace, job_name)
    events: tuple[Event, ...] = ()
    if job is None:
        manifest = mf.build_migration_job(name, namespace, spec, generation)
        adopt(manifest)
        job = kube.apply(manifest)
        events = (Event(
            "Normal", "MigrationStarted",
            f"Job {job_name} runs `tenure migrate` with {spec.image} on schema {spec.schema}",
        ),)
    phase = job_phase(job)
    if phase == "Succeeded":
        retire_older_jobs(kube, name, namespace, job_name, generation)
        return MigrationState(
            True, "Migrated",
            f"schema {spec.schema!r} is at the version of {spec.image} (Job {job_name})",
            job=job_name, events=events,
        )
    if phase == "Running":
        return MigrationState(
            False, "Migrating",
            f"Job {job_name} is migrating schema {spec.schema!r} for {spec.image}; "
            "workers are held until it succeeds",
            job=job_name, events=events,
        )
    pods = kube.list("v1", "Pod", namespace, f"job-name={job_name}")
    reason, message = classify_migration_failure(job, termination_messages(pods))
    failed_at = _failed_at(job)
    if (
        reason != "SchemaNewerThanCode"
        and failed_at is not None
        and (now - failed_at).total_seconds() >= retry_seconds
    ):
        kube.delete("batch/v1", "Job", namespace, job_name)
        message += " (deleted; the next pass runs it again)"
    return MigrationState(False, reason, message, failed=True, job=job_name, events=events)
