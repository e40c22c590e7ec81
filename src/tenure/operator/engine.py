"""One level-based, idempotent pass over one JobQueue, as named steps.

:func:`reconcile_jobqueue` talks to the world only through a
:class:`~tenure.operator.kube.Kube`, the database edge of :mod:`tenure.operator.figures` and
the exporter index, so unit tests drive it with fakes. The kopf handlers
(:mod:`tenure.operator.handlers`) call it:

* change passes (``create`` / ``update`` / ``resume``, ``scale=False``): bring the children in
  line with the spec, keeping the Deployment's current replicas (the first size is
  ``max(minReplicas, 1)``);
* full passes (the timer, ``scale=True``): the same, plus read the Secret and the queue
  figures, store ``spec.paused``/``maxRunning`` and ``spec.flow`` in the database, let
  :mod:`tenure.operator.scaler` set the replicas, and write the conditions.

The steps, in order (each returns its result; none mutates another's state):

1. parse the spec once (:class:`Desired`: the parsed spec and its pod-shaping hash, handed to
   every builder); an invalid spec applies nothing (the children keep their last good shape);
2. the migration Job (:mod:`tenure.operator.migration`): workers must not start on a schema
   their code refuses, so until the Job for the current image has succeeded the worker
   Deployment and reaper CronJob are *held*: left exactly as they are, or created with 0
   replicas / suspended;
3. the worker Deployment as it is (its replicas are kept without fresh figures);
4. the figures (full passes, schema ready): Secret -> DSN -> figures, controls, then the
   flow limits when ``spec.flow`` is set (:func:`apply_flow_spec`: the JobQueue owns every
   flow limit of its queue; without ``spec.flow`` they are left alone);
5. sizing: the scaler's decision from the figures, else the current replicas;
6. apply the children (server-side apply of the complete objects under one field manager,
   so a restart or two racing passes converge on the same objects), then the shared exporter
   (:mod:`tenure.operator.exporter`);
7. conclude: the status patch, the conditions (:mod:`tenure.operator.status`, full passes
   only) and the Events.

On a missing Secret/key or an unreachable database the JobQueue gets ``Degraded=True`` with
the reason, the replicas stay as they are (never zero on missing data), and the handler
raises ``kopf.TemporaryError``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from tenure.operator import manifests as mf
from tenure.operator import scaler as sc
from tenure.operator import spec as s
from tenure.operator.exporter import ExporterMember, MembersOf, no_members, reconcile_exporters
from tenure.operator.figures import (
    ControlApplier,
    FlowApplier,
    QueueFigures,
    StatsFetcher,
    StatsUnavailable,
    dsn_in_namespace,
)
from tenure.operator.kube import Kube, KubeError, secret_value
from tenure.operator.migration import UNMANAGED, Adopter, MigrationState, reconcile_migration
from tenure.operator.settings import MANAGE_MIGRATIONS_DEFAULT, MIGRATION_RETRY_SECONDS_DEFAULT
from tenure.operator.status import (
    CONDITION_FLOW_APPLIED,
    ConditionValue,
    Event,
    Failure,
    PassReport,
    condition_of,
    conditions_for,
    warning_for,
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of one pass: the status patch, the Events to post, and the failure (if any)."""

    status: dict[str, Any]
    events: tuple[Event, ...] = ()
    #: None when the pass completed; the handler raises TemporaryError/PermanentError on it.
    failure: Failure | None = None

    @property
    def error_reason(self) -> str | None:
        return self.failure.reason if self.failure is not None else None

    @property
    def error_message(self) -> str:
        return self.failure.message if self.failure is not None else ""

    @property
    def permanent(self) -> bool:
        return self.failure is not None and self.failure.permanent


@dataclasses.dataclass(frozen=True)
class Reach:
    """What a pass may touch: the cluster, the database edge and the exporter index."""

    kube: Kube
    fetch: StatsFetcher
    adopt: Adopter
    controls: ControlApplier | None = None
    members_of: MembersOf = no_members
    manage_migrations: bool = MANAGE_MIGRATIONS_DEFAULT
    migration_retry_seconds: float = MIGRATION_RETRY_SECONDS_DEFAULT
    flow: FlowApplier | None = None


@dataclasses.dataclass(frozen=True)
class JobQueueRef:
    """Identity of the JobQueue a pass works on, and the status it read."""

    name: str
    namespace: str
    uid: str
    created: str
    generation: int | None
    old_status: Mapping[str, Any]

    @property
    def requester(self) -> str:
        """Who the flow_changes rows name: ``operator:NAMESPACE/NAME``."""
        return f"operator:{self.namespace}/{self.name}"

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> JobQueueRef:
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        return cls(
            name=str(meta["name"]),
            namespace=str(meta["namespace"]),
            uid=str(meta.get("uid", "")),
            created=str(meta.get("creationTimestamp") or ""),
            generation=generation if isinstance(generation, int) else None,
            old_status=body.get("status") or {},
        )


@dataclasses.dataclass(frozen=True)
class Desired:
    """The spec, parsed once per pass, and its pod-shaping hash (``manifests.spec_hash``)."""

    spec: s.JobQueueSpec
    hash: str


@dataclasses.dataclass(frozen=True)
class LiveWorkers:
    """The worker Deployment as it is (None: not created yet) and its replicas."""

    deployment: dict[str, Any] | None
    replicas: int | None


@dataclasses.dataclass(frozen=True)
class FlowOutcome:
    """spec.flow applied (or not): the FlowApplied condition and ``status.flow``."""

    condition: ConditionValue
    #: ``status.flow`` to write (None: left as it is, unless ``retire``).
    status: Mapping[str, Any] | None = None
    failure: Failure | None = None
    events: tuple[Event, ...] = ()
    #: Remove ``status.flow`` (spec.flow was removed).
    retire: bool = False


@dataclasses.dataclass(frozen=True)
class FiguresRead:
    """Step 4's result: the figures (None: not read), a failure, Events, and spec.flow's outcome
    (None: not applied, e.g. no database)."""

    figures: QueueFigures | None = None
    failure: Failure | None = None
    events: tuple[Event, ...] = ()
    flow: FlowOutcome | None = None


@dataclasses.dataclass(frozen=True)
class Sizing:
    """Step 5's result: the replicas to apply, the decision, and the figures' status fields."""

    desired: int
    decision: sc.ScaleDecision | None = None
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def reconcile_jobqueue(
    body: Mapping[str, Any],
    kube: Kube,
    fetch: StatsFetcher,
    adopt: Adopter,
    now: dt.datetime,
    *,
    scale: bool,
    controls: ControlApplier | None = None,
    manage_migrations: bool = MANAGE_MIGRATIONS_DEFAULT,
    migration_retry_seconds: float = MIGRATION_RETRY_SECONDS_DEFAULT,
    exporter_members: MembersOf = no_members,
    flow: FlowApplier | None = None,
) -> Outcome:
    """One level-based pass over one JobQueue ``body`` (the object as stored).

    Never lowers replicas without fresh figures; while the schema is not current the worker
    Deployment and reaper CronJob are left as they are (or created at 0 replicas and
    suspended). ``exporter_members``: the exporter index (other JobQueues sharing a database).
    """
    reach = Reach(kube, fetch, adopt, controls, exporter_members, manage_migrations,
                  migration_retry_seconds, flow)
    return run_pass(body, reach, now, full=scale)


def run_pass(body: Mapping[str, Any], reach: Reach, now: dt.datetime, *, full: bool) -> Outcome:
    """The steps of one pass (see the module docstring)."""
    jq = JobQueueRef.of(body)
    raw_spec: Mapping[str, Any] = body.get("spec") or {}
    try:
        desired = Desired(s.parse_spec(raw_spec), mf.spec_hash(raw_spec))
    except s.SpecError as exc:
        return conclude(jq, now, PassReport(full, Failure(exc.reason, str(exc), permanent=True)))
    migration = migrate(reach, jq, desired.spec, now)
    if isinstance(migration, Failure):
        return conclude(jq, now, PassReport(full, migration))
    fields: dict[str, Any] = {"migrationJob": migration.job} if migration.job else {}
    events = migration.events
    live = live_workers(reach.kube, jq)
    read = read_figures(reach, jq, desired.spec, migration) if full else FiguresRead()
    events += read.events
    flow = read.flow if desired.spec.flow is not None else unmanaged_flow(jq)
    if flow is not None and full and (flow.status is not None or flow.retire):
        fields["flow"] = flow.status  # None removes it (a merge patch)
    failure = (Failure(migration.reason, migration.message) if migration.failed else read.failure)
    sizing = size(jq, desired.spec, read.figures, live, not migration.ready, now)
    fields.update(sizing.fields)
    try:
        sm_available = reach.kube.api_available("monitoring.coreos.com/v1", "ServiceMonitor")
        applied = apply_children(reach, jq, desired, sizing.desired, not migration.ready, live,
                                 sm_available)
        fields["exporter"] = apply_exporter(reach, jq, desired.spec, migration, sm_available)
    except KubeError as exc:
        unapplied = Failure("ApplyFailed", f"applying children failed: {exc}")
        return conclude(jq, now, PassReport(full, unapplied, migration.condition()), fields, events)
    ready_replicas = int(((applied or live.deployment or {}).get("status") or {}).get(
        "readyReplicas") or 0)
    scaling, scale_fields, scale_events = scaling_outcome(
        sizing, live.replicas, ready_replicas, now)
    fields.update(scale_fields)
    events += scale_events
    ready = (migration.condition() if not migration.ready else ConditionValue(
        True, "Reconciled", f"children in sync; {ready_replicas}/{sizing.desired} worker pods ready"))
    report = PassReport(full, failure, migration.condition(), scaling, ready,
                        flow.condition if flow is not None else None)
    return conclude(jq, now, report, fields, events)


def migrate(reach: Reach, jq: JobQueueRef, spec: s.JobQueueSpec,
            now: dt.datetime) -> MigrationState | Failure:
    """Step 2: the migration Job's state for the current image (or unmanaged)."""
    if not (reach.manage_migrations and spec.migrations.managed):
        return UNMANAGED
    try:
        return reconcile_migration(reach.kube, reach.adopt, jq.name, jq.namespace, spec, now,
                                   reach.migration_retry_seconds, jq.generation)
    except KubeError as exc:
        return Failure("MigrationJobUnavailable", f"migration Job: {exc}")


def live_workers(kube: Kube, jq: JobQueueRef) -> LiveWorkers:
    """Step 3: the worker Deployment as it is (a Deployment without replicas counts as 1)."""
    live = kube.get("apps/v1", "Deployment", jq.namespace, mf.worker_name(jq.name))
    if live is None:
        return LiveWorkers(None, None)
    replicas = (live.get("spec") or {}).get("replicas")
    return LiveWorkers(live, int(replicas) if isinstance(replicas, int) else 1)


def read_dsn(kube: Kube, jq: JobQueueRef, spec: s.JobQueueSpec) -> str | Failure:
    """The DSN from the JobQueue's Secret, or why it cannot be had."""
    where = f"Secret {jq.namespace}/{spec.secret_name}"
    try:
        secret = kube.get("v1", "Secret", jq.namespace, spec.secret_name)
    except KubeError as exc:
        # e.g. 403 when RBAC does not cover the namespace: degraded, replicas unchanged.
        return Failure("SecretUnreadable", f"{where}: {exc}")
    if secret is None:
        return Failure("SecretMissing", f"{where} not found")
    dsn = secret_value(secret, spec.secret_key)
    if not dsn:
        return Failure("SecretKeyMissing", f"{where} has no key {spec.secret_key!r}")
    return dsn


def read_figures(reach: Reach, jq: JobQueueRef, spec: s.JobQueueSpec,
                 migration: MigrationState) -> FiguresRead:
    """Step 4: the queue's figures, with its controls brought in line with the spec.

    Before the schema is current there are no figures to read (and no failure in that). The
    DSN is resolved as the JobQueue's pods would ("postgres" means its namespace's Service).
    A schema lost after its migration succeeded (a new or restored database) runs the
    migration Job again."""
    dsn = read_dsn(reach.kube, jq, spec)
    if isinstance(dsn, Failure) or not migration.ready:
        return FiguresRead(failure=dsn if isinstance(dsn, Failure) else None)
    dsn = dsn_in_namespace(dsn, jq.namespace)
    events: tuple[Event, ...] = ()
    try:
        figures = reach.fetch(dsn, spec.schema, spec.queue)
        wanted = (spec.paused, spec.max_running)
        if reach.controls is not None and (figures.paused, figures.max_running) != wanted:
            reach.controls(dsn, spec.schema, spec.queue, *wanted)
            events = (Event("Normal", "QueueControlsApplied",
                            f"paused={str(spec.paused).lower()} maxRunning={spec.max_running}"),)
            figures = dataclasses.replace(figures, paused=spec.paused,
                                          max_running=spec.max_running)
    except StatsUnavailable as exc:
        failure = Failure(exc.reason, str(exc))
        if exc.reason == "SchemaMissing" and migration.job is not None:
            failure = rerun_lost_migration(reach.kube, jq, migration.job, failure)
        return FiguresRead(failure=failure)
    flow = apply_flow_spec(reach, jq, spec, dsn)
    if flow is None:
        return FiguresRead(figures, events=events)
    return FiguresRead(figures, flow.failure, events + flow.events, flow)


def apply_flow_spec(reach: Reach, jq: JobQueueRef, spec: s.JobQueueSpec,
                    dsn: str) -> FlowOutcome | None:
    """Step 4, continued: make the queue's flow settings in the database equal ``spec.flow``
    (level-based: read, then change only what differs). None without ``spec.flow`` (the settings
    are left alone) or without a flow applier.

    Ownership: while ``spec.flow`` is set the JobQueue owns every flow setting of its queue, the
    per-key cap and each key's own limit and weight, so a key setting it does not list is
    removed whoever set it (a decision that needs no history). Rate limits are shared across
    queues: the listed ones are set, and one the spec no longer lists is deleted only when this
    JobQueue set it last. Changes are recorded as ``operator:NS/NAME``. A failure makes the pass
    Degraded with its reason, and FlowApplied (written here only) False with the first error."""
    if spec.flow is None or reach.flow is None:
        return None
    try:
        done = reach.flow(dsn, spec.schema, spec.queue, spec.flow, jq.requester)
    except StatsUnavailable as exc:
        message = f"spec.flow not applied: {exc}"
        return FlowOutcome(ConditionValue(False, exc.reason, message),
                           failure=Failure(exc.reason, message))
    limits = done.limits
    rates = len(spec.flow.rate_limits)
    status = {"perKeyRunning": limits.per_key_running, "keyLimits": len(limits.keys),
              "keyWeights": len(limits.weights), "rateLimits": rates}
    held = (f"the database holds perKeyRunning={limits.per_key_running}, "
            f"{len(limits.keys)} key limit(s), {len(limits.weights)} key weight(s) and "
            f"the {rates} rate limit(s) of the spec")
    events = () if done.plan.empty else (
        Event("Normal", "FlowLimitsApplied", done.plan.summary()),)
    return FlowOutcome(ConditionValue(True, "Applied", held), status, events=events)


def unmanaged_flow(jq: JobQueueRef) -> FlowOutcome | None:
    """Without ``spec.flow``: retire FlowApplied and status.flow if a former spec.flow left
    them (None when there is nothing to retire)."""
    shown = jq.old_status.get("flow") is not None
    if condition_of(jq.old_status, CONDITION_FLOW_APPLIED) is None and not shown:
        return None
    return FlowOutcome(ConditionValue(
        False, "NotManaged", "spec.flow is not set: the queue's flow limits are left to "
        "`tenure flow limit`"), retire=shown)


def rerun_lost_migration(kube: Kube, jq: JobQueueRef, job: str, failure: Failure) -> Failure:
    """Delete the succeeded migration Job of a schema that is gone, so the next pass runs it."""
    try:
        kube.delete("batch/v1", "Job", jq.namespace, job)
    except KubeError as exc:
        return dataclasses.replace(failure, message=(
            f"{failure.message}; deleting migration Job {job} to run it again failed: {exc}"))
    return dataclasses.replace(failure, message=f"{failure.message}; migration Job {job} restarted")


def size(jq: JobQueueRef, spec: s.JobQueueSpec, figures: QueueFigures | None,
         live: LiveWorkers, hold: bool, now: dt.datetime) -> Sizing:
    """Step 5: replicas from the scaler when there are figures, else the current ones; a new
    Deployment starts at the floor (at 0 while the schema is not current). A paused queue
    keeps its pods: no scaling on a frozen backlog."""
    floor = 0 if hold else max(spec.scaling.min_replicas, 1)
    keep = live.replicas if live.replicas is not None else floor
    if figures is None:
        return Sizing(keep)
    fields: dict[str, Any] = {
        "paused": figures.paused,
        "maxRunning": figures.max_running,
        "ready": figures.ready,
        "scheduled": figures.scheduled,
        "running": figures.running,
        "runningExpired": figures.running_expired,
        "completed": figures.completed,
        "failed": figures.failed,
        "liveWorkers": figures.live_workers,
        "oldestReadyAgeSeconds": round(figures.oldest_ready_age_seconds, 3),
        "statsTime": sc.format_time(now),
    }
    if figures.paused:
        return Sizing(keep, None, fields)
    history = sc.history_from_status(jq.old_status.get("recommendations"))
    decision = sc.decide(sc.ScalerConfig.from_spec(spec), figures.load(), live.replicas,
                         history, now)
    fields["recommendations"] = sc.history_to_status(decision.history)
    return Sizing(decision.desired, decision, fields)


def apply_children(reach: Reach, jq: JobQueueRef, desired: Desired, replicas: int, hold: bool,
                   live: LiveWorkers, sm_available: bool) -> dict[str, Any] | None:
    """Step 6: apply every child; returns the worker Deployment as applied (None: held).

    While held, an existing worker Deployment is left as it is (its pods run the previous
    image on its schema), and so is an existing reaper CronJob; new ones are created with 0
    replicas and suspended. Raises KubeError."""
    kube = reach.kube
    live_cron = (kube.get("batch/v1", "CronJob", jq.namespace, mf.reaper_name(jq.name))
                 if hold else None)
    applied: dict[str, Any] | None = None
    for child in mf.build_children(jq.name, jq.namespace, desired.spec, desired.hash, replicas,
                                   sm_available):
        if hold and child["kind"] == "Deployment" and live.deployment is not None:
            continue
        if hold and child["kind"] == "CronJob":
            if live_cron is not None:
                continue
            child["spec"]["suspend"] = True
        reach.adopt(child)
        result = kube.apply(child)
        if child["kind"] == "Deployment":
            applied = result
    if sm_available and not desired.spec.service_monitor:
        kube.delete("monitoring.coreos.com/v1", "ServiceMonitor", jq.namespace,
                    mf.service_monitor_name(jq.name))
    return applied


def apply_exporter(reach: Reach, jq: JobQueueRef, spec: s.JobQueueSpec,
                   migration: MigrationState, sm_available: bool) -> str | None:
    """Step 6, continued: the shared exporter of the JobQueue's database (and the one it used
    before, if that changed); returns its name. Raises KubeError."""
    own = (ExporterMember(jq.name, jq.uid, jq.created, spec, schema_ready=migration.ready)
           if spec.exporter else None)
    previous = jq.old_status.get("exporter")
    return reconcile_exporters(reach.kube, jq.namespace, own,
                               str(previous) if previous else None, reach.members_of,
                               sm_available)


def scaling_outcome(sizing: Sizing, current: int | None, ready_replicas: int,
                    now: dt.datetime) -> tuple[ConditionValue, dict[str, Any], tuple[Event, ...]]:
    """The Scaling condition, the replica fields of the status and the scale Event."""
    desired = sizing.desired
    fields: dict[str, Any] = {
        "replicas": desired, "desiredReplicas": desired, "readyReplicas": ready_replicas}
    decision = sizing.decision
    if decision is not None and decision.changed(current):
        reason = "ScaledUp" if current is None or decision.desired > current else "ScaledDown"
        fields.update(lastScaleTime=sc.format_time(now), lastScaleReason=decision.reason)
        event = Event("Normal", reason, decision.reason)
        return ConditionValue(True, reason, decision.reason), fields, (event,)
    if ready_replicas != desired:
        waiting = ConditionValue(True, "WaitingForPods",
                                 f"{ready_replicas}/{desired} worker pods ready")
        return waiting, fields, ()
    return ConditionValue(False, "Stable", f"{desired} replicas"), fields, ()


def conclude(jq: JobQueueRef, now: dt.datetime, report: PassReport,
             fields: Mapping[str, Any] | None = None, events: tuple[Event, ...] = ()) -> Outcome:
    """Step 7: the status patch (with the conditions on full passes) and the Events."""
    status = dict(fields or {})
    conditions = conditions_for(jq.old_status, report, now, jq.generation)
    if conditions is not None:
        status["conditions"] = conditions
    if jq.generation is not None:
        status["observedGeneration"] = jq.generation
    warning = warning_for(jq.old_status, report.failure)
    return Outcome(status, events + ((warning,) if warning else ()), report.failure)
