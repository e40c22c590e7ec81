"""Typed view of a JobQueue ``spec``, with the defaults the CRD declares.

The API server applies the CRD defaults, but the operator parses defensively with the very
same constants (the CRD generator imports them from here), so an object stored before a
default was added, or a hand-made dict in a unit test, still yields a complete spec.
Parsing never guesses: a wrong type raises ``SpecError`` (a ConfigError) naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tenure.core.errors import ConfigError
from tenure.operator.flowspec import FLOW_KEY_MAX_BYTES as FLOW_KEY_MAX_BYTES
from tenure.operator.flowspec import FLOW_KEY_MAX_LENGTH as FLOW_KEY_MAX_LENGTH
from tenure.operator.flowspec import FLOW_KEYS_MAX as FLOW_KEYS_MAX
from tenure.operator.flowspec import FLOW_PER_KEY_RUNNING_DEFAULT as FLOW_PER_KEY_RUNNING_DEFAULT
from tenure.operator.flowspec import RUNNING_LIMIT_MAX as RUNNING_LIMIT_MAX
from tenure.operator.flowspec import FlowKeySpec as FlowKeySpec
from tenure.operator.flowspec import FlowSpec as FlowSpec
from tenure.operator.flowspec import RateLimitSpec as RateLimitSpec
from tenure.operator.flowspec import parse_flow
from tenure.reaper.vacuum import VACUUM_DEAD_ROWS_DEFAULT as VACUUM_DEAD_ROWS_DEFAULT

GROUP = "tenure.dev"
VERSION = "v1alpha1"
PLURAL = "jobqueues"
SINGULAR = "jobqueue"
KIND = "JobQueue"
SHORT_NAMES = ("jq",)
API_VERSION = f"{GROUP}/{VERSION}"

#: JobQueue names are capped so that every child name (``<name>-reaper`` is the longest,
#: and CronJob names are limited to 52 characters) stays valid.
NAME_MAX_LENGTH = 45

IMAGE_PULL_POLICY_DEFAULT = "IfNotPresent"
CONCURRENCY_DEFAULT = 4
DATABASE_SECRET_KEY_DEFAULT = "url"
DATABASE_SCHEMA_DEFAULT = "tenure"
LEASE_SECONDS_DEFAULT = 60
HEARTBEAT_SECONDS_DEFAULT = 15
GRACE_SECONDS_DEFAULT = 30
DRAIN_TIMEOUT_SECONDS_DEFAULT = 30
RETRY_MAX_ATTEMPTS_DEFAULT = 5
RETRY_BASE_DELAY_SECONDS_DEFAULT = 1
RETRY_MAX_DELAY_SECONDS_DEFAULT = 300
MIN_REPLICAS_DEFAULT = 1
MAX_REPLICAS_DEFAULT = 10
TARGET_READY_PER_REPLICA_DEFAULT = 10
SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT = 300
ALLOW_SCALE_TO_ZERO_DEFAULT = False
REAPER_SCHEDULE_DEFAULT = "* * * * *"
REAPER_GRACE_SECONDS_DEFAULT = 30
REAPER_BATCH_SIZE_DEFAULT = 100
REAPER_SUSPEND_DEFAULT = False
METRICS_PORT_DEFAULT = 9100
SERVICE_MONITOR_DEFAULT = True
PAUSED_DEFAULT = False
MAX_RUNNING_DEFAULT = 0
MAX_RUNNING_MAX = 1_000_000
VACUUM_DEAD_ROWS_MAX = 1_000_000_000
EXPORTER_DEFAULT = True
MIGRATIONS_MANAGED_DEFAULT = True

#: Cron macros the CronJob controller accepts (robfig/cron descriptors).
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
#: (field name, low, high, names) of the five standard cron fields, as the CronJob
#: controller parses them (robfig/cron ParseStandard): day-of-week 7 is Sunday too.
CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


class SpecError(ConfigError):
    """A JobQueue spec that cannot be turned into children (the message names the field)."""

    #: CamelCase condition reason the operator reports (Degraded) for this error.
    reason = "InvalidSpec"


class ScheduleError(SpecError):
    """``spec.reaper.schedule`` is not a schedule the CronJob controller can run."""

    reason = "InvalidSchedule"


def _cron_value(text: str, low: int, names: tuple[str, ...], field: str) -> int:
    upper = text.upper()
    if names and upper in names:
        return names.index(upper) + (low if names is _MONTHS else 0)
    if not text.isdigit():
        raise ScheduleError(f"{field}: {text!r} is not a number" + (
            f" or one of {', '.join(names)}" if names else ""))
    return int(text)


def validate_cron(schedule: str) -> None:
    """Check a 5-field cron schedule (or macro) the way the CronJob controller parses it.

    The CRD's CEL rule only checks the shape (five fields of cron characters), so
    ``99 99 99 99 99`` would reach the API server's CronJob validation, or worse, be accepted
    by it and never fire. Raises ScheduleError naming the field and the value. Limits: the
    ``@every`` descriptor and ``TZ=`` prefixes are refused (CronJob has ``timeZone`` for that);
    ``?`` is accepted as ``*`` in the day fields, as the controller does.
    """
    text = schedule.strip()
    if text.startswith("@"):
        if text.lower() in CRON_MACROS:
            return
        raise ScheduleError(
            f"spec.reaper.schedule {schedule!r}: unknown macro (use one of {', '.join(CRON_MACROS)})"
        )
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"spec.reaper.schedule {schedule!r}: expected 5 fields, got {len(fields)}"
        )
    for value, (field, low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        where = f"spec.reaper.schedule {schedule!r}: {field}"
        for part in value.split(","):
            if not part:
                raise ScheduleError(f"{where}: empty list element")
            base, _, step = part.partition("/")
            if step or part.endswith("/"):
                if not step.isdigit() or int(step) < 1:
                    raise ScheduleError(f"{where}: step {step!r} must be a positive integer")
            if base in ("*", "?"):
                if base == "?" and field not in ("day of month", "day of week"):
                    raise ScheduleError(f"{where}: '?' is only allowed in the day fields")
                continue
            first, dash, last = base.partition("-")
            start = _cron_value(first, low, names, where)
            end = _cron_value(last, low, names, where) if dash else start
            for number in (start, end):
                if not low <= number <= high:
                    raise ScheduleError(f"{where}: {number} is outside {low}-{high}")
            if start > end:
                raise ScheduleError(f"{where}: range {base!r} runs backwards")


@dataclasses.dataclass(frozen=True)
class RetrySpec:
    """Retry policy handed to the workers (attempts, full-jitter backoff bounds)."""

    max_attempts: int = RETRY_MAX_ATTEMPTS_DEFAULT
    base_delay_seconds: int = RETRY_BASE_DELAY_SECONDS_DEFAULT
    max_delay_seconds: int = RETRY_MAX_DELAY_SECONDS_DEFAULT


@dataclasses.dataclass(frozen=True)
class ScalingSpec:
    """Replica bounds and scaler tuning (see :mod:`tenure.operator.scaler`)."""

    min_replicas: int = MIN_REPLICAS_DEFAULT
    max_replicas: int = MAX_REPLICAS_DEFAULT
    target_ready_per_replica: int = TARGET_READY_PER_REPLICA_DEFAULT
    scale_down_stabilization_seconds: int = SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT
    allow_scale_to_zero: bool = ALLOW_SCALE_TO_ZERO_DEFAULT


@dataclasses.dataclass(frozen=True)
class ReaperSpec:
    """The reaper CronJob: schedule, lease grace before recovery, rows per cycle, suspend."""

    schedule: str = REAPER_SCHEDULE_DEFAULT
    grace_seconds: int = REAPER_GRACE_SECONDS_DEFAULT
    batch_size: int = REAPER_BATCH_SIZE_DEFAULT
    suspend: bool = REAPER_SUSPEND_DEFAULT


@dataclasses.dataclass(frozen=True)
class MigrationsSpec:
    """Managed migrations: the operator runs ``tenure migrate`` (a Job with the queue's image)
    and holds the workers until it succeeded. ``managed: false`` leaves migrating to you."""

    managed: bool = MIGRATIONS_MANAGED_DEFAULT


@dataclasses.dataclass(frozen=True)
class PodOverrides:
    """Pass-through pod settings; values are Kubernetes-shaped dicts, copied verbatim."""

    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    service_account_name: str | None = None
    image_pull_secrets: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class JobQueueSpec:
    """Everything the operator needs from one JobQueue, defaults applied."""

    queue: str
    image: str
    app: str
    secret_name: str
    secret_key: str = DATABASE_SECRET_KEY_DEFAULT
    schema: str = DATABASE_SCHEMA_DEFAULT
    image_pull_policy: str = IMAGE_PULL_POLICY_DEFAULT
    concurrency: int = CONCURRENCY_DEFAULT
    lease_seconds: int = LEASE_SECONDS_DEFAULT
    heartbeat_seconds: int = HEARTBEAT_SECONDS_DEFAULT
    grace_seconds: int = GRACE_SECONDS_DEFAULT
    drain_timeout_seconds: int = DRAIN_TIMEOUT_SECONDS_DEFAULT
    retry: RetrySpec = RetrySpec()
    scaling: ScalingSpec = ScalingSpec()
    reaper: ReaperSpec = ReaperSpec()
    metrics_port: int = METRICS_PORT_DEFAULT
    service_monitor: bool = SERVICE_MONITOR_DEFAULT
    exporter: bool = EXPORTER_DEFAULT
    migrations: MigrationsSpec = MigrationsSpec()
    pod: PodOverrides = PodOverrides()
    paused: bool = PAUSED_DEFAULT
    """Workers claim nothing from the queue while true (`tenure queues pause`); pods are kept."""
    max_running: int = MAX_RUNNING_DEFAULT
    """Global cap on the queue's running jobs across all pods (`tenure queues limit`); 0: none."""
    vacuum_dead_rows: int = VACUUM_DEAD_ROWS_DEFAULT
    """Workers vacuum the jobs table at this many dead rows (`tenure worker --vacuum-dead-rows`);
    0 leaves it to autovacuum."""
    flow: FlowSpec | None = None
    """The queue's flow settings (:class:`FlowSpec`); None (no ``spec.flow``): left alone."""

    def validate(self) -> None:
        """Re-check the CRD's cross-field rules (a plain dict may not have met the API server)."""
        if self.heartbeat_seconds * 3 > self.lease_seconds:
            raise SpecError(
                f"spec.heartbeatSeconds ({self.heartbeat_seconds}) must be at most a third of "
                f"spec.leaseSeconds ({self.lease_seconds})"
            )
        if self.scaling.min_replicas > self.scaling.max_replicas:
            raise SpecError(
                f"spec.scaling.minReplicas ({self.scaling.min_replicas}) must be <= "
                f"maxReplicas ({self.scaling.max_replicas})"
            )
        if self.scaling.min_replicas < 1 and not self.scaling.allow_scale_to_zero:
            raise SpecError(
                "spec.scaling.minReplicas may be 0 only with spec.scaling.allowScaleToZero: true"
            )
        if self.retry.base_delay_seconds > self.retry.max_delay_seconds:
            raise SpecError("spec.retry.baseDelaySeconds must be <= spec.retry.maxDelaySeconds")
        for name, value, low in (
            ("concurrency", self.concurrency, 1),
            ("leaseSeconds", self.lease_seconds, 1),
            ("heartbeatSeconds", self.heartbeat_seconds, 1),
            ("scaling.maxReplicas", self.scaling.max_replicas, 1),
            ("scaling.targetReadyPerReplica", self.scaling.target_ready_per_replica, 1),
            ("metrics.port", self.metrics_port, 1),
            ("maxRunning", self.max_running, 0),
            ("vacuumDeadRows", self.vacuum_dead_rows, 0),
        ):
            if value < low:
                raise SpecError(f"spec.{name} must be >= {low}, got {value}")
        validate_cron(self.reaper.schedule)
        if self.flow is not None:
            try:
                self.flow.validate()
            except ConfigError as exc:  # flowspec's checks name the field
                raise SpecError(str(exc)) from None


def _get(obj: Mapping[str, Any], key: str, kind: type, default: Any, path: str) -> Any:
    value = obj.get(key, default)
    if value is None:
        return default
    # bool is an int subclass: refuse True where a count is expected, and 1 for a flag.
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise SpecError(f"{path}{key} must be an integer, got {value!r}")
    if not isinstance(value, kind):
        raise SpecError(f"{path}{key} must be a {kind.__name__}, got {value!r}")
    return value


def _section(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path}{key} must be an object")
    return value


def _flow(spec: Mapping[str, Any], path: str) -> FlowSpec | None:
    """``spec.flow`` (:mod:`tenure.operator.flowspec`): None when absent (the operator leaves
    the queue's flow settings alone)."""
    if spec.get("flow") is None:
        return None
    try:
        return parse_flow(_section(spec, "flow", path), path + "flow.")
    except SpecError:
        raise
    except ConfigError as exc:
        raise SpecError(str(exc)) from None


def parse_spec(spec: Mapping[str, Any]) -> JobQueueSpec:
    """Parse a JobQueue ``spec`` mapping (camelCase, as stored) and validate it."""
    p = "spec."
    db = _section(spec, "database", p)
    secret = _section(db, "secretRef", p + "database.")
    retry = _section(spec, "retry", p)
    scaling = _section(spec, "scaling", p)
    reaper = _section(spec, "reaper", p)
    metrics = _section(spec, "metrics", p)
    migrations = _section(spec, "migrations", p)
    pod = _section(spec, "pod", p)
    for required, where in (("queue", spec), ("image", spec), ("app", spec)):
        if not where.get(required):
            raise SpecError(f"spec.{required} is required")
    if not secret.get("name"):
        raise SpecError("spec.database.secretRef.name is required")
    parsed = JobQueueSpec(
        queue=_get(spec, "queue", str, "", p),
        image=_get(spec, "image", str, "", p),
        app=_get(spec, "app", str, "", p),
        secret_name=_get(secret, "name", str, "", p + "database.secretRef."),
        secret_key=_get(secret, "key", str, DATABASE_SECRET_KEY_DEFAULT, p + "database.secretRef."),
        schema=_get(db, "schema", str, DATABASE_SCHEMA_DEFAULT, p + "database."),
        image_pull_policy=_get(spec, "imagePullPolicy", str, IMAGE_PULL_POLICY_DEFAULT, p),
        concurrency=_get(spec, "concurrency", int, CONCURRENCY_DEFAULT, p),
        lease_seconds=_get(spec, "leaseSeconds", int, LEASE_SECONDS_DEFAULT, p),
        heartbeat_seconds=_get(spec, "heartbeatSeconds", int, HEARTBEAT_SECONDS_DEFAULT, p),
        grace_seconds=_get(spec, "graceSeconds", int, GRACE_SECONDS_DEFAULT, p),
        drain_timeout_seconds=_get(
            spec, "drainTimeoutSeconds", int, DRAIN_TIMEOUT_SECONDS_DEFAULT, p
        ),
        retry=RetrySpec(
            max_attempts=_get(retry, "maxAttempts", int, RETRY_MAX_ATTEMPTS_DEFAULT, p + "retry."),
            base_delay_seconds=_get(
                retry, "baseDelaySeconds", int, RETRY_BASE_DELAY_SECONDS_DEFAULT, p + "retry."
            ),
            max_delay_seconds=_get(
                retry, "maxDelaySeconds", int, RETRY_MAX_DELAY_SECONDS_DEFAULT, p + "retry."
            ),
        ),
        scaling=ScalingSpec(
            min_replicas=_get(scaling, "minReplicas", int, MIN_REPLICAS_DEFAULT, p + "scaling."),
            max_replicas=_get(scaling, "maxReplicas", int, MAX_REPLICAS_DEFAULT, p + "scaling."),
            target_ready_per_replica=_get(
                scaling,
                "targetReadyPerReplica",
                int,
                TARGET_READY_PER_REPLICA_DEFAULT,
                p + "scaling.",
            ),
            scale_down_stabilization_seconds=_get(
                scaling,
                "scaleDownStabilizationSeconds",
                int,
                SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT,
                p + "scaling.",
            ),
            allow_scale_to_zero=_get(
                scaling, "allowScaleToZero", bool, ALLOW_SCALE_TO_ZERO_DEFAULT, p + "scaling."
            ),
        ),
        reaper=ReaperSpec(
            schedule=_get(reaper, "schedule", str, REAPER_SCHEDULE_DEFAULT, p + "reaper."),
            grace_seconds=_get(
                reaper, "graceSeconds", int, REAPER_GRACE_SECONDS_DEFAULT, p + "reaper."
            ),
            batch_size=_get(reaper, "batchSize", int, REAPER_BATCH_SIZE_DEFAULT, p + "reaper."),
            suspend=_get(reaper, "suspend", bool, REAPER_SUSPEND_DEFAULT, p + "reaper."),
        ),
        metrics_port=_get(metrics, "port", int, METRICS_PORT_DEFAULT, p + "metrics."),
        service_monitor=_get(
            metrics, "serviceMonitor", bool, SERVICE_MONITOR_DEFAULT, p + "metrics."
        ),
        paused=_get(spec, "paused", bool, PAUSED_DEFAULT, p),
        max_running=_get(spec, "maxRunning", int, MAX_RUNNING_DEFAULT, p),
        vacuum_dead_rows=_get(spec, "vacuumDeadRows", int, VACUUM_DEAD_ROWS_DEFAULT, p),
        flow=_flow(spec, p),
        exporter=_get(metrics, "exporter", bool, EXPORTER_DEFAULT, p + "metrics."),
        migrations=MigrationsSpec(
            managed=_get(
                migrations, "managed", bool, MIGRATIONS_MANAGED_DEFAULT, p + "migrations."
            ),
        ),
        pod=PodOverrides(
            resources=dict(_section(pod, "resources", p + "pod.")),
            env=tuple(_get(pod, "env", list, [], p + "pod.")),
            node_selector=dict(_section(pod, "nodeSelector", p + "pod.")),
            tolerations=tuple(_get(pod, "tolerations", list, [], p + "pod.")),
            labels=dict(_section(pod, "labels", p + "pod.")),
            annotations=dict(_section(pod, "annotations", p + "pod.")),
            service_account_name=_get(pod, "serviceAccountName", str, None, p + "pod."),
            image_pull_secrets=tuple(
                str(s.get("name", "")) if isinstance(s, Mapping) else str(s)
                for s in _get(pod, "imagePullSecrets", list, [], p + "pod.")
            ),
        ),
    )
    parsed.validate()
    return parsed
