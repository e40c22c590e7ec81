"""kopf handlers for JobQueue: level-based, idempotent reconciliation and scaling.

One engine, :func:`reconcile_jobqueue`, does everything and talks to the world only through a
:class:`~tenure.operator.kube.Kube` and a stats fetcher, so unit tests drive it with fakes.
The kopf handlers are thin wrappers:

* ``create`` / ``update`` / ``resume``: bring children in line with the spec, keeping the
  Deployment's current replicas (the first size is ``max(minReplicas, 1)``);
* a timer every ``OperatorConfig.interval_seconds``: the same, plus read queue stats and let
  :mod:`tenure.operator.scaler` set the replicas.

Every pass applies the complete children with server-side apply under one field manager, so
a restart (or two passes racing) converges on the same objects: fixed names, no duplicates.
On a missing Secret/key or an unreachable database the JobQueue gets ``Degraded=True`` with
the reason, replicas stay as they are (never zero on missing data), and the handler raises
``kopf.TemporaryError`` with an exponential delay.

Limits: kopf keeps a finalizer on every JobQueue while its timer runs, so a JobQueue deleted
while no operator runs stays until one starts (or the finalizer is removed by hand). Events
are only ours (one per scale decision, one per failure reason), not kopf's per-pass logs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tenure.operator import reconcile as rc
from tenure.operator import scaler as sc
from tenure.operator import spec as s
from tenure.operator.kube import Kube, KubeError, secret_value

from tenure.core.errors import ConfigError

log = logging.getLogger(__name__)

INTERVAL_SECONDS_DEFAULT = 10.0
BACKOFF_MAX_SECONDS_DEFAULT = 300.0
STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT = 5
FIELD_MANAGER_DEFAULT = "tenure-operator"
ENV_INTERVAL = "TENURE_OPERATOR_INTERVAL_SECONDS"
ENV_BACKOFF_MAX = "TENURE_OPERATOR_BACKOFF_MAX_SECONDS"

CONDITION_READY = "Ready"
CONDITION_DEGRADED = "Degraded"
CONDITION_SCALING = "Scaling"


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings (per-queue settings live in each JobQueue spec)."""

    #: Seconds between timer passes (stats read + scaling decision) for each JobQueue.
    interval_seconds: float = INTERVAL_SECONDS_DEFAULT
    #: Ceiling of the retry delay after failures (the delay doubles from interval_seconds).
    backoff_max_seconds: float = BACKOFF_MAX_SECONDS_DEFAULT
    #: connect_timeout added to the DSN when reading stats, so a dead DB cannot hang a pass.
    stats_connect_timeout_seconds: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT
    #: Server-side-apply field manager owning the children's fields.
    field_manager: str = FIELD_MANAGER_DEFAULT

    def validate(self) -> None:
        if not self.interval_seconds > 0:
            raise ConfigError(f"interval_seconds must be > 0, got {self.interval_seconds}")
        if self.backoff_max_seconds < self.interval_seconds:
            raise ConfigError("backoff_max_seconds must be >= interval_seconds")
        if self.stats_connect_timeout_seconds < 1:
            raise ConfigError("stats_connect_timeout_seconds must be >= 1")
        if not self.field_manager:
            raise ConfigError("field_manager must not be empty")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        """Read ``TENURE_OPERATOR_INTERVAL_SECONDS`` / ``..._BACKOFF_MAX_SECONDS``."""
        env = os.environ if env is None else env
        try:
            interval = float(env.get(ENV_INTERVAL, INTERVAL_SECONDS_DEFAULT))
            backoff = float(env.get(ENV_BACKOFF_MAX, BACKOFF_MAX_SECONDS_DEFAULT))
        except ValueError as exc:
            raise ConfigError(f"{ENV_INTERVAL}/{ENV_BACKOFF_MAX}: {exc}") from exc
        config = cls(interval_seconds=interval, backoff_max_seconds=max(backoff, interval))
        config.validate()
        return config

    def backoff(self, retry: int) -> float:
        """Delay before retry number ``retry`` (0-based): interval * 2**retry, capped."""
        return float(min(self.interval_seconds * (2 ** min(retry, 16)), self.backoff_max_seconds))


@dataclasses.dataclass(frozen=True)
class QueueFigures:
    """The queue figures the operator shows in status and feeds to the scaler."""

    ready: int = 0
    scheduled: int = 0
    running: int = 0
    running_expired: int = 0
    completed: int = 0
    failed: int = 0
    live_workers: int = 0
    oldest_ready_age_seconds: float = 0.0
    paused: bool = False
    max_running: int = 0
    """The queue's controls as stored in the database (0: no limit)."""

    def load(self) -> sc.QueueLoad:
        return sc.QueueLoad(ready=self.ready, running=self.running, scheduled=self.scheduled)


class StatsUnavailable(Exception):
    """Stats could not be read; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: (dsn, schema, queue) -> figures; raises StatsUnavailable.
StatsFetcher = Callable[[str, str, str], QueueFigures]
#: (dsn, schema, queue, paused, max_running) -> None: store spec.paused/maxRunning; raises StatsUnavailable.
ControlApplier = Callable[[str, str, str, bool, int], None]
#: Adds owner references to a child manifest in place (kopf.adopt in production).
Adopter = Callable[[dict[str, Any]], None]


def fetch_figures(
    dsn: str, schema: str, queue: str, connect_timeout: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT
) -> QueueFigures:
    """Read one queue's figures with ``tenure.core.stats.fetch_queue_stats``."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from tenure.core.stats import fetch_queue_stats

    try:
        if "connect_timeout" not in conninfo_to_dict(dsn):
            dsn = make_conninfo(dsn, connect_timeout=connect_timeout)
    except psycopg.ProgrammingError as exc:
        raise StatsUnavailable("InvalidDSN", f"the DSN in the Secret is invalid: {exc}") from exc
    try:
        rows = fetch_queue_stats(dsn, schema, queue)
    except psycopg.OperationalError as exc:
        raise StatsUnavailable("DatabaseUnreachable", _one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StatsUnavailable("DatabaseError", _one_line(exc)) from exc
    for row in rows:
        if row.queue == queue:
            return QueueFigures(
                ready=row.ready,
                scheduled=row.scheduled,
                running=row.running,
                running_expired=row.running_expired,
                completed=row.completed,
                failed=row.failed,
                live_workers=row.live_workers,
                oldest_ready_age_seconds=float(row.oldest_ready_age_seconds),
                paused=bool(row.paused),
                max_running=int(row.max_running or 0),
            )
    return QueueFigures()  # a queue nobody enqueued to yet is an empty queue


def apply_controls(dsn: str, schema: str, queue: str, paused: bool, max_running: int,
                   connect_timeout: int = STATS_CONNECT_TIMEOUT_SECONDS_DEFAULT) -> None:
    """Store the JobQueue's ``paused``/``maxRunning`` in the queue's control row (audited as
    ``operator``), through the same API as `tenure queues pause|limit`."""
    import psycopg

    from tenure import control
    from tenure.core.db import connect

    try:
        with connect(psycopg.conninfo.make_conninfo(dsn, connect_timeout=connect_timeout),
                     application_name="tenure-operator") as conn:
            control.set_paused(conn, queue, paused, schema=schema, requested_by="operator")
            control.set_max_running(conn, queue, max_running, schema=schema, requested_by="operator")
    except psycopg.OperationalError as exc:
        raise StatsUnavailable("DatabaseUnreachable", _one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StatsUnavailable("DatabaseError", _one_line(exc)) from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


# --------------------------------------------------------------------------- conditions


def upsert_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: dt.datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Replace the condition of ``type_`` (others kept, order stable).

    ``lastTransitionTime`` moves only when the status flips.
    """
    value = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(dict(cond))
            continue
        found = True
        transition = cond.get("lastTransitionTime")
        if cond.get("status") != value or not transition:
            transition = sc.format_time(now)
        out.append(_condition(type_, value, reason, message, str(transition), generation))
    if not found:
        out.append(_condition(type_, value, reason, message, sc.format_time(now), generation))
    return out


def _condition(
    type_: str, value: str, reason: str, message: str, transition: str, generation: int | None
) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def condition_of(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return cond
    return None


# --------------------------------------------------------------------------- the engine


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the JobQueue."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of one pass: the status patch, events to post, and whether to retry."""

    status: dict[str, Any]
    events: tuple[Event, ...] = ()
    #: None when healthy; else the condition reason (the wrapper raises TemporaryError).
    error_reason: str | None = None
    error_message: str = ""
    #: True for errors only a spec change can fix (no point retrying fast).
    permanent: bool = False


def reconcile_jobqueue(
    body: Mapping[str, Any],
    kube: Kube,
    fetch: StatsFetcher,
    adopt: Adopter,
    now: dt.datetime,
    *,
    scale: bool,
    controls: ControlApplier | None = None,
) -> Outcome:
    """One level-based pass over one JobQueue ``body`` (the object as stored).

    Applies every child, decides replicas when ``scale`` and stats are readable, and returns
    the status to patch. Never lowers replicas without fresh stats.
    """
    meta = body.get("metadata") or {}
    name = str(meta["name"])
    namespace = str(meta["namespace"])
    generation = meta.get("generation")
    raw_spec: Mapping[str, Any] = body.get("spec") or {}
    old_status: Mapping[str, Any] = body.get("status") or {}
    status: dict[str, Any] = {}
    events: list[Event] = []
    conditions: list[dict[str, Any]] = [dict(c) for c in old_status.get("conditions") or []]

    def finish(
        error_reason: str | None, error_message: str = "", permanent: bool = False
    ) -> Outcome:
        nonlocal conditions
        if error_reason is not None:
            conditions = upsert_condition(
                conditions, CONDITION_DEGRADED, True, error_reason, error_message, now, generation
            )
            conditions = upsert_condition(
                conditions, CONDITION_READY, False, error_reason, error_message, now, generation
            )
            previous = condition_of(old_status, CONDITION_DEGRADED)
            if (
                previous is None
                or previous.get("status") != "True"
                or previous.get("reason") != error_reason
            ):
                events.append(Event("Warning", error_reason, error_message))
        elif scale:
            # Only a full pass (secret + stats + children) may declare the queue healthy.
            conditions = upsert_condition(
                conditions, CONDITION_DEGRADED, False, "Healthy", "", now, generation
            )
        if error_reason is not None or scale:
            # A successful change pass leaves conditions to the timer's full passes: kopf runs
            # the two concurrently, and a list built from an older body would replace newer
            # conditions wholesale (the e2e suite caught Ready=True with Degraded missing).
            status["conditions"] = conditions
        if generation is not None:
            status["observedGeneration"] = generation
        return Outcome(status, tuple(events), error_reason, error_message, permanent)

    try:
        spec = s.parse_spec(raw_spec)
    except s.SpecError as exc:
        return finish("InvalidSpec", str(exc), permanent=True)

    live = kube.get("apps/v1", "Deployment", namespace, rc.worker_name(name))
    current: int | None = None
    if live is not None:
        replicas = (live.get("spec") or {}).get("replicas")
        current = int(replicas) if isinstance(replicas, int) else 1
    # Without stats the replicas stay as they are; a new Deployment starts at the floor.
    keep = current if current is not None else max(spec.scaling.min_replicas, 1)

    error: tuple[str, str] | None = None
    figures: QueueFigures | None = None
    if scale:
        try:
            secret = kube.get("v1", "Secret", namespace, spec.secret_name)
        except KubeError as exc:
            # e.g. 403 when RBAC does not cover the namespace: degraded, replicas unchanged.
            secret, error = None, ("SecretUnreadable", f"Secret {namespace}/{spec.secret_name}: {exc}")
        if secret is None and error is None:
            error = ("SecretMissing", f"Secret {namespace}/{spec.secret_name} not found")
        elif secret is not None:
            dsn = secret_value(secret, spec.secret_key)
            if not dsn:
                error = (
                    "SecretKeyMissing",
                    f"Secret {namespace}/{spec.secret_name} has no key {spec.secret_key!r}",
                )
            else:
                try:
                    figures = fetch(dsn, spec.schema, spec.queue)
                    wanted = (spec.paused, spec.max_running)
                    if controls is not None and (figures.paused, figures.max_running) != wanted:
                        controls(dsn, spec.schema, spec.queue, *wanted)
                        events.append(Event("Normal", "QueueControlsApplied",
                                            f"paused={str(spec.paused).lower()} maxRunning={spec.max_running}"))
                        figures = dataclasses.replace(figures, paused=spec.paused, max_running=spec.max_running)
                except StatsUnavailable as exc:
                    error = (exc.reason, str(exc))

    desired = keep
    decision: sc.ScaleDecision | None = None
    if figures is not None:
        config = sc.ScalerConfig.from_spec(spec)
        history = sc.history_from_status(old_status.get("recommendations"))
        if not figures.paused:  # a paused queue keeps its pods: no scaling on a frozen backlog
            decision = sc.decide(config, figures.load(), current, history, now)
            desired = decision.desired
        status.update(
            paused=figures.paused,
            maxRunning=figures.max_running,
            ready=figures.ready,
            scheduled=figures.scheduled,
            running=figures.running,
            runningExpired=figures.running_expired,
            completed=figures.completed,
            failed=figures.failed,
            liveWorkers=figures.live_workers,
            oldestReadyAgeSeconds=round(figures.oldest_ready_age_seconds, 3),
            statsTime=sc.format_time(now),
        )
        if decision is not None:
            status["recommendations"] = sc.history_to_status(decision.history)

    # Children: the complete desired state, applied on every pass.
    applied: dict[str, dict[str, Any]] = {}
    try:
        sm_available = kube.api_available("monitoring.coreos.com/v1", "ServiceMonitor")
        for child in rc.build_children(name, namespace, raw_spec, desired, sm_available):
            adopt(child)
            applied[child["kind"]] = kube.apply(child)
        if sm_available and not spec.service_monitor:
            kube.delete(
                "monitoring.coreos.com/v1", "ServiceMonitor", namespace, rc.service_monitor_name(name)
            )
    except KubeError as exc:
        return finish("ApplyFailed", f"applying children failed: {exc}")

    deployment_status = (applied.get("Deployment") or {}).get("status") or {}
    ready_replicas = int(deployment_status.get("readyReplicas") or 0)
    status["replicas"] = desired
    status["desiredReplicas"] = desired
    status["readyReplicas"] = ready_replicas

    if decision is not None and decision.changed(current):
        status["lastScaleTime"] = sc.format_time(now)
        status["lastScaleReason"] = decision.reason
        up = current is None or decision.desired > current
        reason = "ScaledUp" if up else "ScaledDown"
        events.append(Event("Normal", reason, decision.reason))
        conditions = upsert_condition(
            conditions, CONDITION_SCALING, True, reason, decision.reason, now, generation
        )
    elif ready_replicas != desired:
        conditions = upsert_condition(
            conditions,
            CONDITION_SCALING,
            True,
            "WaitingForPods",
            f"{ready_replicas}/{desired} worker pods ready",
            now,
            generation,
        )
    else:
        conditions = upsert_condition(
            conditions, CONDITION_SCALING, False, "Stable", f"{desired} replicas", now, generation
        )

    if error is not None:
        return finish(error[0], error[1])
    if scale:
        conditions = upsert_condition(
            conditions,
            CONDITION_READY,
            True,
            "Reconciled",
            f"children in sync; {ready_replicas}/{desired} worker pods ready",
            now,
            generation,
        )
    return finish(None)


# --------------------------------------------------------------------------- kopf wiring


def register(
    registry: Any,
    config: OperatorConfig,
    kube_factory: Callable[[], Kube],
    *,
    cluster_scanning: bool = True,
) -> None:
    """Register the JobQueue handlers on a ``kopf.OperatorRegistry``.

    ``cluster_scanning``: let kopf watch CRDs and namespaces appear/disappear. Only for a
    cluster-wide operator: a namespace-scoped one has no RBAC for those cluster-scoped lists,
    and kopf would log (and the API server audit) refused requests.
    """
    import kopf

    config.validate()
    kube_holder: list[Kube] = []

    def kube() -> Kube:
        if not kube_holder:
            kube_holder.append(kube_factory())
        return kube_holder[0]

    def fetch(dsn: str, schema: str, queue: str) -> QueueFigures:
        return fetch_figures(dsn, schema, queue, config.stats_connect_timeout_seconds)

    announced: dict[str, str] = {}

    def run_pass(body: Any, patch: Any, retry: int, scale: bool) -> None:
        def adopt(child: dict[str, Any]) -> None:
            kopf.adopt(child, owner=body)

        outcome = reconcile_jobqueue(
            body, kube(), fetch, adopt, dt.datetime.now(dt.UTC), scale=scale,
            controls=lambda dsn, schema, queue, paused, limit: apply_controls(
                dsn, schema, queue, paused, limit, config.stats_connect_timeout_seconds),
        )
        for key, value in outcome.status.items():
            patch.status[key] = value
        # The body a timer sees may predate its own last status patch: remember the failure
        # reason already announced per object, so one outage gives one Warning Event.
        uid = str(body.get("metadata", {}).get("uid", ""))
        for event in outcome.events:
            if event.type == "Warning" and announced.get(uid) == event.reason:
                continue
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        if outcome.error_reason is not None:
            announced[uid] = outcome.error_reason
        elif scale:
            announced.pop(uid, None)
        if outcome.error_reason is not None:
            message = f"{outcome.error_reason}: {outcome.error_message}"
            if outcome.permanent:
                raise kopf.PermanentError(message)
            raise kopf.TemporaryError(message, delay=config.backoff(retry))

    # A private registry does not get kopf's default login handlers: log in the same two ways
    # the kubernetes client does (in-cluster ServiceAccount first, then $KUBECONFIG).
    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> Any:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    def _configure(settings: Any, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=s.GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=s.GROUP, key="last-handled-configuration"
        )
        # Only our own Events (one per scale decision or failure transition): kopf would
        # otherwise turn its per-pass log lines ("Timer succeeded", each retry) into Events.
        settings.posting.level = logging.CRITICAL
        settings.watching.server_timeout = 300
        settings.execution.max_workers = 8
        settings.scanning.disabled = not cluster_scanning

    @kopf.on.probe(id="jobqueue-operator", registry=registry)
    def _probe(**_: Any) -> str:
        return "ok"

    @kopf.on.resume(s.GROUP, s.VERSION, s.PLURAL, registry=registry)
    @kopf.on.create(s.GROUP, s.VERSION, s.PLURAL, registry=registry)
    @kopf.on.update(s.GROUP, s.VERSION, s.PLURAL, field="spec", registry=registry)
    def _children(body: Any, patch: Any, **kwargs: Any) -> None:
        run_pass(body, patch, int(kwargs.get("retry") or 0), scale=False)

    @kopf.timer(
        s.GROUP, s.VERSION, s.PLURAL, interval=config.interval_seconds, registry=registry
    )
    def _scale(body: Any, patch: Any, **kwargs: Any) -> None:
        run_pass(body, patch, int(kwargs.get("retry") or 0), scale=True)
