"""Prometheus alert rules for tenure, generated from Python.

The rules are rendered into ``dashboards/alerts.yaml`` (and a copy for the Helm chart) by
``python -m tenure.observability.generate``. Every number an operator may want to tune is a
field of :class:`AlertThresholds`; the rule text is never edited by hand. Tests build a fast
variant (short ``for`` and evaluation interval) with :meth:`AlertThresholds.with_for_seconds`.

Limits: the rules assume the metric names of ``docs/metrics.md``. Queue-level gauges come from
the SQL exporter and may be scraped from several replicas, so they are aggregated with
``max by (queue)``; worker counters are per process and aggregated with ``sum``. The rules do
not know the deployed lease or heartbeat settings; thresholds must be set to match them (see
``docs/observability.md``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tenure.core.errors import ConfigError
from tenure.reaper import reaper


def _healthy_reap_seconds() -> float:
    """Seconds from a lease's expiry to its requeue by a healthy reaper with default settings:
    grace + alive-owner grace + one interval (a first expiry is requeued with no backoff)."""
    return reaper.GRACE_DEFAULT + reaper.ALIVE_OWNER_GRACE_DEFAULT + reaper.INTERVAL_DEFAULT


# --- defaults -------------------------------------------------------------------------------
EVALUATION_INTERVAL_SECONDS_DEFAULT = 60
RUNBOOK_BASE_URL_DEFAULT = "https://github.com/tenure-dev/tenure/blob/main/docs/runbooks.md"

EXPIRED_LEASES_WARNING_COUNT_DEFAULT = 0
EXPIRED_LEASES_FOR_SECONDS_DEFAULT = 120
"""Well above what a healthy reaper takes with its defaults (:func:`_healthy_reap_seconds`)."""
EXPIRED_LEASES_CRITICAL_COUNT_DEFAULT = 10
EXPIRED_LEASES_HIGH_FOR_SECONDS_DEFAULT = 300

HEARTBEAT_LAG_P95_SECONDS_DEFAULT = 20.0
HEARTBEAT_LAG_FOR_SECONDS_DEFAULT = 300

OLDEST_RUNNING_RUNTIME_P99_MULTIPLE_DEFAULT = 3.0
OLDEST_RUNNING_MIN_SECONDS_DEFAULT = 900.0
RUNTIME_P99_WINDOW_SECONDS_DEFAULT = 3600
OLDEST_RUNNING_FOR_SECONDS_DEFAULT = 300

REAPER_WINDOW_SECONDS_DEFAULT = 600
REAPER_MAX_REAPED_PER_WINDOW_DEFAULT = 20
REAPER_FOR_SECONDS_DEFAULT = 300
REAPER_STALLED_SECONDS_DEFAULT = 600
REAPER_STALLED_FOR_SECONDS_DEFAULT = 300

DEDUP_WINDOW_SECONDS_DEFAULT = 300
DEDUP_BASELINE_WINDOW_SECONDS_DEFAULT = 3600
DEDUP_SPIKE_FACTOR_DEFAULT = 3.0
DEDUP_BASELINE_FLOOR_RATIO_DEFAULT = 0.01
DEDUP_MIN_HITS_PER_SECOND_DEFAULT = 0.05
DEDUP_FOR_SECONDS_DEFAULT = 300

RETRY_WINDOW_SECONDS_DEFAULT = 600
RETRY_SHARE_OF_CLAIMS_DEFAULT = 0.25
RETRY_MIN_PER_SECOND_DEFAULT = 0.05
RETRY_FOR_SECONDS_DEFAULT = 900

DEPENDENCY_TIMEOUT_ERROR_CODE_REGEX_DEFAULT = ".*timeout.*"
DEPENDENCY_TIMEOUT_WINDOW_SECONDS_DEFAULT = 600
DEPENDENCY_TIMEOUT_BASELINE_WINDOW_SECONDS_DEFAULT = 3600
DEPENDENCY_TIMEOUT_GROWTH_FACTOR_DEFAULT = 2.0
DEPENDENCY_TIMEOUT_MIN_PER_SECOND_DEFAULT = 0.05
DEPENDENCY_TIMEOUT_FOR_SECONDS_DEFAULT = 600

DEAD_LETTER_MAX_JOBS_DEFAULT = 0
DEAD_LETTER_GROWTH_WINDOW_SECONDS_DEFAULT = 1800
DEAD_LETTER_FOR_SECONDS_DEFAULT = 300

READY_AGE_SLA_SECONDS_DEFAULT = 300.0
READY_AGE_FOR_SECONDS_DEFAULT = 300

PILING_UP_MIN_READY_JOBS_DEFAULT = 10
PILING_UP_WINDOW_SECONDS_DEFAULT = 600
PILING_UP_MAX_COMPLETIONS_PER_SECOND_DEFAULT = 0.001
PILING_UP_FOR_SECONDS_DEFAULT = 600

CLAIMS_STALLED_WINDOW_SECONDS_DEFAULT = 120
CLAIMS_STALLED_FOR_SECONDS_DEFAULT = 120

RECONNECT_BURST_WINDOW_SECONDS_DEFAULT = 300
RECONNECT_BURST_COUNT_DEFAULT = 5
RECONNECT_BURST_FOR_SECONDS_DEFAULT = 60

EXPORTER_JOB_REGEX_DEFAULT = ".*tenure-exporter.*"
EXPORTER_STALE_SECONDS_DEFAULT = 300.0
EXPORTER_DOWN_FOR_SECONDS_DEFAULT = 300

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class AlertThresholds:
    """Every tunable number of the generated alert rules.

    A ``*_for_seconds`` field is the rule's ``for`` (how long the condition must hold before
    the alert fires); a ``*_window_seconds`` field is a PromQL range. Count and rate
    thresholds fire when the observed value is strictly above them.
    """

    evaluation_interval_seconds: int = EVALUATION_INTERVAL_SECONDS_DEFAULT
    """Rule-group evaluation interval (the ``interval`` of every generated group)."""
    runbook_base_url: str = RUNBOOK_BASE_URL_DEFAULT
    """URL of docs/runbooks.md; each alert's ``runbook_url`` is this plus ``#<alertname lower>``."""

    expired_leases_warning_count: int = EXPIRED_LEASES_WARNING_COUNT_DEFAULT
    """TenureExpiredLeases fires when more running jobs than this hold an expired lease."""
    expired_leases_for_seconds: int = EXPIRED_LEASES_FOR_SECONDS_DEFAULT
    """``for`` of TenureExpiredLeases; keep it above reaper interval + grace so a healthy
    reaper clears ordinary crashes before anyone is paged."""
    expired_leases_critical_count: int = EXPIRED_LEASES_CRITICAL_COUNT_DEFAULT
    """TenureExpiredLeasesHigh fires when more running jobs than this hold an expired lease."""
    expired_leases_high_for_seconds: int = EXPIRED_LEASES_HIGH_FOR_SECONDS_DEFAULT
    """``for`` of TenureExpiredLeasesHigh."""

    heartbeat_lag_p95_seconds: float = HEARTBEAT_LAG_P95_SECONDS_DEFAULT
    """TenureHeartbeatLagHigh fires when the p95 heartbeat lag of running jobs exceeds this;
    set it to a few heartbeat intervals and below the lease (R21)."""
    heartbeat_lag_for_seconds: int = HEARTBEAT_LAG_FOR_SECONDS_DEFAULT
    """``for`` of TenureHeartbeatLagHigh."""

    oldest_running_runtime_p99_multiple: float = OLDEST_RUNNING_RUNTIME_P99_MULTIPLE_DEFAULT
    """TenureOldestRunningJobTooOld fires when the oldest running job is older than this
    multiple of the queue's runtime p99 (tenure_job_runtime_seconds)."""
    oldest_running_min_seconds: float = OLDEST_RUNNING_MIN_SECONDS_DEFAULT
    """Floor of that limit, and the limit itself when the queue completed nothing within
    ``runtime_p99_window_seconds`` (no p99 to compare with)."""
    runtime_p99_window_seconds: int = RUNTIME_P99_WINDOW_SECONDS_DEFAULT
    """Range over which the runtime p99 is computed."""
    oldest_running_for_seconds: int = OLDEST_RUNNING_FOR_SECONDS_DEFAULT
    """``for`` of TenureOldestRunningJobTooOld."""

    reaper_window_seconds: int = REAPER_WINDOW_SECONDS_DEFAULT
    """Range over which reaped jobs are counted for TenureReaperTooAggressive."""
    reaper_max_reaped_per_window: int = REAPER_MAX_REAPED_PER_WINDOW_DEFAULT
    """TenureReaperTooAggressive fires when the reaper recovered more jobs than this within
    ``reaper_window_seconds``."""
    reaper_for_seconds: int = REAPER_FOR_SECONDS_DEFAULT
    """``for`` of TenureReaperTooAggressive."""
    reaper_stalled_seconds: int = REAPER_STALLED_SECONDS_DEFAULT
    """TenureReaperNotRunning fires when no reaper finished a cycle for longer than this
    (tenure_reaper_last_cycle_timestamp_seconds); keep it several reaper intervals (the
    CronJob's schedule) long."""
    reaper_stalled_for_seconds: int = REAPER_STALLED_FOR_SECONDS_DEFAULT
    """``for`` of TenureReaperNotRunning."""

    dedup_window_seconds: int = DEDUP_WINDOW_SECONDS_DEFAULT
    """Short range of the current dedup hit rate."""
    dedup_baseline_window_seconds: int = DEDUP_BASELINE_WINDOW_SECONDS_DEFAULT
    """Range of the dedup hit-rate baseline."""
    dedup_spike_factor: float = DEDUP_SPIKE_FACTOR_DEFAULT
    """TenureDedupHitRateSpike fires when the current hit rate (hits/checks) exceeds the
    baseline times this factor."""
    dedup_baseline_floor_ratio: float = DEDUP_BASELINE_FLOOR_RATIO_DEFAULT
    """Lower bound of the baseline hit rate, so a queue with no duplicates at all does not
    alert on its first few hits."""
    dedup_min_hits_per_second: float = DEDUP_MIN_HITS_PER_SECOND_DEFAULT
    """Minimum absolute dedup hit rate (hits/s) for the alert; silences quiet queues."""
    dedup_for_seconds: int = DEDUP_FOR_SECONDS_DEFAULT
    """``for`` of TenureDedupHitRateSpike."""

    retry_window_seconds: int = RETRY_WINDOW_SECONDS_DEFAULT
    """Range of the retry and claim rates for TenureRetryStorm."""
    retry_share_of_claims: float = RETRY_SHARE_OF_CLAIMS_DEFAULT
    """TenureRetryStorm fires when retries exceed this share of claims (0..1)."""
    retry_min_per_second: float = RETRY_MIN_PER_SECOND_DEFAULT
    """Minimum absolute retry rate (retries/s) for TenureRetryStorm."""
    retry_for_seconds: int = RETRY_FOR_SECONDS_DEFAULT
    """``for`` of TenureRetryStorm: how long the storm must be sustained."""

    dependency_timeout_error_code_regex: str = DEPENDENCY_TIMEOUT_ERROR_CODE_REGEX_DEFAULT
    """RE2 regex of the ``error_code`` values that mean a dependency timed out."""
    dependency_timeout_window_seconds: int = DEPENDENCY_TIMEOUT_WINDOW_SECONDS_DEFAULT
    """Short range of the timeout failure rate."""
    dependency_timeout_baseline_window_seconds: int = (
        DEPENDENCY_TIMEOUT_BASELINE_WINDOW_SECONDS_DEFAULT
    )
    """Range of the timeout failure-rate baseline."""
    dependency_timeout_growth_factor: float = DEPENDENCY_TIMEOUT_GROWTH_FACTOR_DEFAULT
    """TenureDependencyTimeoutsRising fires when the current rate exceeds baseline × this."""
    dependency_timeout_min_per_second: float = DEPENDENCY_TIMEOUT_MIN_PER_SECOND_DEFAULT
    """Minimum absolute timeout failure rate (failures/s) for the alert."""
    dependency_timeout_for_seconds: int = DEPENDENCY_TIMEOUT_FOR_SECONDS_DEFAULT
    """``for`` of TenureDependencyTimeoutsRising."""

    dead_letter_max_jobs: int = DEAD_LETTER_MAX_JOBS_DEFAULT
    """TenureDeadLetterQueueGrowing fires when the DLQ holds more jobs than this and grew
    within ``dead_letter_growth_window_seconds``."""
    dead_letter_growth_window_seconds: int = DEAD_LETTER_GROWTH_WINDOW_SECONDS_DEFAULT
    """Range over which DLQ growth is measured."""
    dead_letter_for_seconds: int = DEAD_LETTER_FOR_SECONDS_DEFAULT
    """``for`` of TenureDeadLetterQueueGrowing."""

    ready_age_sla_seconds: float = READY_AGE_SLA_SECONDS_DEFAULT
    """Queueing SLA: TenureOldestReadyJobOverSLA fires when the oldest ready job has waited
    longer than this since ``available_at``."""
    ready_age_for_seconds: int = READY_AGE_FOR_SECONDS_DEFAULT
    """``for`` of TenureOldestReadyJobOverSLA."""

    piling_up_min_ready_jobs: int = PILING_UP_MIN_READY_JOBS_DEFAULT
    """TenureJobsPilingUpWorkersAlive needs more ready jobs than this."""
    piling_up_window_seconds: int = PILING_UP_WINDOW_SECONDS_DEFAULT
    """Range over which backlog growth and completions are measured."""
    piling_up_max_completions_per_second: float = PILING_UP_MAX_COMPLETIONS_PER_SECOND_DEFAULT
    """Completion rate (jobs/s) at or below which the queue counts as making no progress."""
    piling_up_for_seconds: int = PILING_UP_FOR_SECONDS_DEFAULT
    """``for`` of TenureJobsPilingUpWorkersAlive."""

    claims_stalled_window_seconds: int = CLAIMS_STALLED_WINDOW_SECONDS_DEFAULT
    """Range over which TenureClaimsStalled looks for claims (keep it above a failover's length)."""
    claims_stalled_for_seconds: int = CLAIMS_STALLED_FOR_SECONDS_DEFAULT
    """``for`` of TenureClaimsStalled."""

    reconnect_burst_window_seconds: int = RECONNECT_BURST_WINDOW_SECONDS_DEFAULT
    """Range over which worker database reconnects are counted for TenureDatabaseReconnectBurst."""
    reconnect_burst_count: int = RECONNECT_BURST_COUNT_DEFAULT
    """TenureDatabaseReconnectBurst fires when workers reconnected more times than this within the window."""
    reconnect_burst_for_seconds: int = RECONNECT_BURST_FOR_SECONDS_DEFAULT
    """``for`` of TenureDatabaseReconnectBurst."""

    exporter_job_regex: str = EXPORTER_JOB_REGEX_DEFAULT
    """RE2 regex matching the Prometheus ``job`` label of the exporter scrape targets."""
    exporter_stale_seconds: float = EXPORTER_STALE_SECONDS_DEFAULT
    """TenureExporterDown fires when the last successful collection is older than this."""
    exporter_down_for_seconds: int = EXPORTER_DOWN_FOR_SECONDS_DEFAULT
    """``for`` of TenureExporterDown."""

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid setting."""
        if self.evaluation_interval_seconds <= 0:
            raise ConfigError("evaluation_interval_seconds must be > 0")
        if not self.runbook_base_url or "#" in self.runbook_base_url:
            raise ConfigError("runbook_base_url must be a non-empty URL without a '#' fragment")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_for_seconds") and value < 0:
                raise ConfigError(f"{f.name} must be >= 0, got {value}")
            if f.name.endswith("_window_seconds") and value <= 0:
                raise ConfigError(f"{f.name} must be > 0, got {value}")
            if f.name.endswith(("_count", "_max_jobs", "_min_ready_jobs", "_per_window")) and (
                value < 0
            ):
                raise ConfigError(f"{f.name} must be >= 0, got {value}")
            if f.name.endswith(("_per_second", "_floor_ratio")) and value < 0:
                raise ConfigError(f"{f.name} must be >= 0, got {value}")
        if self.expired_leases_critical_count < self.expired_leases_warning_count:
            raise ConfigError(
                "expired_leases_critical_count must be >= expired_leases_warning_count"
            )
        for name in ("heartbeat_lag_p95_seconds", "oldest_running_min_seconds",
                     "ready_age_sla_seconds", "exporter_stale_seconds", "reaper_stalled_seconds",
                     "oldest_running_runtime_p99_multiple"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.retry_share_of_claims <= 1:
            raise ConfigError("retry_share_of_claims must be in (0, 1]")
        if self.dedup_spike_factor <= 1 or self.dependency_timeout_growth_factor <= 1:
            raise ConfigError("dedup_spike_factor and dependency_timeout_growth_factor must be > 1")
        if self.dedup_baseline_window_seconds <= self.dedup_window_seconds:
            raise ConfigError("dedup_baseline_window_seconds must be > dedup_window_seconds")
        if (self.dependency_timeout_baseline_window_seconds
                <= self.dependency_timeout_window_seconds):
            raise ConfigError(
                "dependency_timeout_baseline_window_seconds must be > "
                "dependency_timeout_window_seconds"
            )
        for name in ("dependency_timeout_error_code_regex", "exporter_job_regex"):
            pattern = getattr(self, name)
            if not pattern:
                raise ConfigError(f"{name} must not be empty")
            if '"' in pattern or "\\" in pattern:
                raise ConfigError(f"{name} must not contain quotes or backslashes")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"{name} is not a valid regex: {exc}") from None

    def with_for_seconds(
        self, for_seconds: int, evaluation_interval_seconds: int | None = None
    ) -> AlertThresholds:
        """Return a copy with every ``*_for_seconds`` set to ``for_seconds``.

        For live tests that need alerts to fire (and resolve) within seconds; windows and
        thresholds are kept.
        """
        changes: dict[str, Any] = {
            f.name: for_seconds
            for f in dataclasses.fields(self)
            if f.name.endswith("_for_seconds")
        }
        if evaluation_interval_seconds is not None:
            changes["evaluation_interval_seconds"] = evaluation_interval_seconds
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class AlertRule:
    """One generated alerting rule (rendered in this field order)."""

    name: str
    group: str
    severity: str
    expr: str
    for_seconds: int
    summary: str
    description: str


def prom_duration(seconds: int) -> str:
    """Render whole seconds as a Prometheus duration (``90`` -> ``1m30s``)."""
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    if seconds == 0:
        return "0s"
    out = ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out += f"{count}{unit}"
    return out


def _num(value: float) -> str:
    """Render a number for PromQL or prose without a trailing ``.0``."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def runbook_anchor(alert_name: str) -> str:
    """Anchor of an alert's section in docs/runbooks.md (GitHub heading slug)."""
    return alert_name.lower()


def runbook_url(thresholds: AlertThresholds, alert_name: str) -> str:
    return f"{thresholds.runbook_base_url}#{runbook_anchor(alert_name)}"


def build_rules(t: AlertThresholds) -> list[AlertRule]:
    """All alert rules for the given thresholds, in a stable order."""
    t.validate()
    d = prom_duration
    rules: list[AlertRule] = []

    # --- leases -----------------------------------------------------------------------------
    rules.append(AlertRule(
        name="TenureExpiredLeases",
        group="tenure-leases",
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_running_expired_leases)"
            f" > {t.expired_leases_warning_count}"
        ),
        for_seconds=t.expired_leases_for_seconds,
        summary="Running jobs with an expired lease in queue {{ $labels.queue }}",
        description=(
            "{{ $value }} running job(s) in queue {{ $labels.queue }} hold a lease that expired"
            f" (DB clock) for at least {d(t.expired_leases_for_seconds)}: their workers are"
            " dead, hung or cut off from the database, and the reaper has not recovered them"
            f" (a healthy reaper with the default settings requeues them within {d(int(_healthy_reap_seconds()))}"
            " after their lease expired)."
        ),
    ))
    rules.append(AlertRule(
        name="TenureExpiredLeasesHigh",
        group="tenure-leases",
        severity="critical",
        expr=(
            "max by (queue) (tenure_queue_running_expired_leases)"
            f" > {t.expired_leases_critical_count}"
        ),
        for_seconds=t.expired_leases_high_for_seconds,
        summary="Many running jobs with an expired lease in queue {{ $labels.queue }}",
        description=(
            "{{ $value }} running jobs in queue {{ $labels.queue }} hold an expired lease"
            f" (more than {t.expired_leases_critical_count} for"
            f" {d(t.expired_leases_high_for_seconds)}). Workers are failing at scale or the"
            " reaper is not running."
        ),
    ))
    rules.append(AlertRule(
        name="TenureHeartbeatLagHigh",
        group="tenure-leases",
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_heartbeat_lag_p95_seconds)"
            f" > {_num(t.heartbeat_lag_p95_seconds)}"
        ),
        for_seconds=t.heartbeat_lag_for_seconds,
        summary="Heartbeats lagging in queue {{ $labels.queue }}",
        description=(
            "p95 heartbeat lag of running jobs in queue {{ $labels.queue }} is"
            " {{ $value | humanizeDuration }}"
            f" (threshold {_num(t.heartbeat_lag_p95_seconds)}s): many workers are not renewing"
            " their leases (hung handlers, starved heartbeat loop or slow database)."
        ),
    ))
    p99 = (
        "histogram_quantile(0.99, sum by (queue, le)"
        f" (rate(tenure_job_runtime_seconds_bucket[{d(t.runtime_p99_window_seconds)}])))"
    )
    floor = _num(t.oldest_running_min_seconds)
    rules.append(AlertRule(
        name="TenureOldestRunningJobTooOld",
        group="tenure-leases",
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_oldest_running_age_seconds)\n"
            "  > on (queue)\n"
            "(\n"
            "    clamp_min(\n"
            f"      ({p99} >= 0)\n"
            f"      * {_num(t.oldest_running_runtime_p99_multiple)},\n"
            f"      {floor}\n"
            "    )\n"
            "  or on (queue)\n"
            f"    (max by (queue) (tenure_queue_oldest_running_age_seconds) * 0 + {floor})\n"
            ")"
        ),
        for_seconds=t.oldest_running_for_seconds,
        summary="Oldest running job in queue {{ $labels.queue }} is far over normal runtime",
        description=(
            "The oldest running job in queue {{ $labels.queue }} started"
            " {{ $value | humanizeDuration }} ago, more than"
            f" {_num(t.oldest_running_runtime_p99_multiple)}x the runtime p99 over"
            f" {d(t.runtime_p99_window_seconds)} (and at least {floor}s): it is hung or its"
            " heartbeat keeps extending a lease that should have ended."
        ),
    ))
    rules.append(AlertRule(
        name="TenureReaperNotRunning",
        group="tenure-leases",
        severity="warning",
        expr=(
            "time() - tenure_reaper_last_cycle_timestamp_seconds"
            f" > {t.reaper_stalled_seconds}"
        ),
        for_seconds=t.reaper_stalled_for_seconds,
        summary="No reaper cycle for {{ $value | humanizeDuration }}",
        description=(
            "No reaper (CronJob, loop or in-worker) has finished a cycle on the database"
            "{{ with $labels.instance }} served by {{ . }}{{ end }} for"
            " {{ $value | humanizeDuration }} (threshold"
            f" {t.reaper_stalled_seconds}s): expired leases are not being recovered, so"
            " jobs of crashed workers stay running until someone reaps them."
        ),
    ))
    rules.append(AlertRule(
        name="TenureReaperTooAggressive",
        group="tenure-leases",
        severity="warning",
        expr=(
            "max by (queue) (increase(tenure_queue_reaped_jobs_total"
            f"[{d(t.reaper_window_seconds)}])) > {t.reaper_max_reaped_per_window}"
        ),
        for_seconds=t.reaper_for_seconds,
        summary="Reaper is recovering many jobs in queue {{ $labels.queue }}",
        description=(
            "The reaper recovered {{ $value | humanize }} jobs of queue {{ $labels.queue }}"
            f" in the last {d(t.reaper_window_seconds)} (threshold"
            f" {t.reaper_max_reaped_per_window}): mass worker loss, or leases/grace too short"
            " for the real runtime, which causes duplicate execution."
        ),
    ))

    # --- retries and dedup ------------------------------------------------------------------
    dw, bw = d(t.dedup_window_seconds), d(t.dedup_baseline_window_seconds)
    rules.append(AlertRule(
        name="TenureDedupHitRateSpike",
        group="tenure-retries-dedup",
        severity="warning",
        expr=(
            "(\n"
            f"    sum by (queue, source) (rate(tenure_dedup_hits_total[{dw}]))\n"
            "  /\n"
            f"    sum by (queue, source) (rate(tenure_dedup_checks_total[{dw}]))\n"
            ")\n"
            "  > on (queue, source)\n"
            "(\n"
            "    clamp_min(\n"
            f"        sum by (queue, source) (rate(tenure_dedup_hits_total[{bw}]))\n"
            "      /\n"
            f"        sum by (queue, source) (rate(tenure_dedup_checks_total[{bw}])),\n"
            f"      {_num(t.dedup_baseline_floor_ratio)}\n"
            "    )\n"
            f"  * {_num(t.dedup_spike_factor)}\n"
            ")\n"
            "and on (queue, source)\n"
            f"  (sum by (queue, source) (rate(tenure_dedup_hits_total[{dw}]))"
            f" > {_num(t.dedup_min_hits_per_second)})"
        ),
        for_seconds=t.dedup_for_seconds,
        summary="Dedup hit rate spiking in queue {{ $labels.queue }} ({{ $labels.source }})",
        description=(
            "{{ $value | humanizePercentage }} of {{ $labels.source }} idempotency checks in"
            f" queue {{{{ $labels.queue }}}} found a duplicate over the last {dw}, more than"
            f" {_num(t.dedup_spike_factor)}x the {bw} baseline: jobs are being executed more"
            " than once (reaper too eager, leases too short) or producers re-send."
        ),
    ))
    rw = d(t.retry_window_seconds)
    rules.append(AlertRule(
        name="TenureRetryStorm",
        group="tenure-retries-dedup",
        severity="warning",
        expr=(
            "(\n"
            f"    sum by (queue) (rate(tenure_jobs_retried_total[{rw}]))\n"
            "  /\n"
            f"    sum by (queue) (rate(tenure_jobs_claimed_total[{rw}]))\n"
            f") > {_num(t.retry_share_of_claims)}\n"
            "and on (queue)\n"
            f"  (sum by (queue) (rate(tenure_jobs_retried_total[{rw}]))"
            f" > {_num(t.retry_min_per_second)})"
        ),
        for_seconds=t.retry_for_seconds,
        summary="Sustained retry storm in queue {{ $labels.queue }}",
        description=(
            "Retries are {{ $value | humanizePercentage }} of claims in queue"
            f" {{{{ $labels.queue }}}} (threshold {_num(t.retry_share_of_claims * 100)}%),"
            f" sustained for {d(t.retry_for_seconds)}: a dependency is failing or leases are"
            " too short; check retries by error code."
        ),
    ))
    sel = f'tenure_jobs_failed_total{{error_code=~"{t.dependency_timeout_error_code_regex}"}}'
    tw = d(t.dependency_timeout_window_seconds)
    tb = d(t.dependency_timeout_baseline_window_seconds)
    rules.append(AlertRule(
        name="TenureDependencyTimeoutsRising",
        group="tenure-retries-dedup",
        severity="info",
        expr=(
            f"sum by (queue, error_code) (rate({sel}[{tw}]))\n"
            "  > on (queue, error_code)\n"
            f"(sum by (queue, error_code) (rate({sel}[{tb}]))"
            f" * {_num(t.dependency_timeout_growth_factor)})\n"
            "and on (queue, error_code)\n"
            f"  (sum by (queue, error_code) (rate({sel}[{tw}]))"
            f" > {_num(t.dependency_timeout_min_per_second)})"
        ),
        for_seconds=t.dependency_timeout_for_seconds,
        summary="Dependency timeouts rising in queue {{ $labels.queue }}",
        description=(
            "Handlers in queue {{ $labels.queue }} fail with {{ $labels.error_code }} at"
            " {{ $value | humanize }}/s over the last"
            f" {tw}, more than {_num(t.dependency_timeout_growth_factor)}x the {tb} baseline:"
            " a downstream dependency is slow or down."
        ),
    ))

    # --- backlog ----------------------------------------------------------------------------
    rules.append(AlertRule(
        name="TenureDeadLetterQueueGrowing",
        group="tenure-backlog",
        severity="warning",
        expr=(
            f"max by (queue) (tenure_queue_dead_letter_jobs) > {t.dead_letter_max_jobs}\n"
            "and on (queue)\n"
            "  (max by (queue) (delta(tenure_queue_dead_letter_jobs"
            f"[{d(t.dead_letter_growth_window_seconds)}])) > 0)"
        ),
        for_seconds=t.dead_letter_for_seconds,
        summary="Dead-letter queue of {{ $labels.queue }} is growing",
        description=(
            "The dead-letter queue of {{ $labels.queue }} holds {{ $value }} job(s)"
            f" (threshold {t.dead_letter_max_jobs}) and grew within the last"
            f" {d(t.dead_letter_growth_window_seconds)}: jobs fail permanently or exhaust"
            " their attempts. Inspect with `tenure dlq`; replay only after a fix."
        ),
    ))
    rules.append(AlertRule(
        name="TenureOldestReadyJobOverSLA",
        group="tenure-backlog",
        severity="critical",
        expr=(
            "max by (queue) (tenure_queue_oldest_ready_age_seconds)"
            f" > {_num(t.ready_age_sla_seconds)}"
        ),
        for_seconds=t.ready_age_for_seconds,
        summary="Oldest ready job in queue {{ $labels.queue }} is over the SLA",
        description=(
            "The oldest ready job in queue {{ $labels.queue }} has waited"
            " {{ $value | humanizeDuration }} since it became available (SLA"
            f" {_num(t.ready_age_sla_seconds)}s): too few healthy workers for the load, or"
            " workers cannot claim."
        ),
    ))
    pw = d(t.piling_up_window_seconds)
    rules.append(AlertRule(
        name="TenureJobsPilingUpWorkersAlive",
        group="tenure-backlog",
        severity="critical",
        expr=(
            'max by (queue) (tenure_queue_jobs{state="ready"})'
            f" > {t.piling_up_min_ready_jobs}\n"
            "and on (queue)\n"
            f'  (max by (queue) (delta(tenure_queue_jobs{{state="ready"}}[{pw}])) > 0)\n'
            "and on (queue)\n"
            "  (max by (queue) (tenure_queue_live_workers) > 0)\n"
            "unless on (queue)\n"
            f"  (sum by (queue) (rate(tenure_jobs_completed_total[{pw}]))"
            f" > {_num(t.piling_up_max_completions_per_second)})\n"
            "unless on (queue)\n"
            f'  (max by (queue) (delta(tenure_queue_jobs{{state="completed"}}[{pw}])) > 0)'
        ),
        for_seconds=t.piling_up_for_seconds,
        summary="Jobs piling up in queue {{ $labels.queue }} while workers look alive",
        description=(
            "{{ $value }} ready jobs in queue {{ $labels.queue }} and the backlog grew over"
            f" the last {pw}, live workers are registered, but nothing completed: workers are"
            " hung or unable to claim (database, permissions, queue name)."
        ),
    ))

    # --- database failover ------------------------------------------------------------------
    cw = d(t.claims_stalled_window_seconds)
    rules.append(AlertRule(
        name="TenureClaimsStalled",
        group="tenure-database",
        severity="warning",
        expr=(
            'max by (queue) (tenure_queue_jobs{state="ready"}) > 0\n'
            "and on (queue)\n"
            "  (max by (queue) (tenure_queue_live_workers) > 0)\n"
            "unless on (queue)\n"
            f"  (sum by (queue) (rate(tenure_jobs_claimed_total[{cw}])) > 0)"
        ),
        for_seconds=t.claims_stalled_for_seconds,
        summary="Workers stopped claiming from queue {{ $labels.queue }}",
        description=(
            "{{ $value }} job(s) are ready in queue {{ $labels.queue }} and workers are registered,"
            f" but no worker claimed anything for {cw}: a database failover that did not finish,"
            " a primary workers cannot reach, or a DSN without every host."
        ),
    ))
    rw = d(t.reconnect_burst_window_seconds)
    rules.append(AlertRule(
        name="TenureDatabaseReconnectBurst",
        group="tenure-database",
        severity="info",
        expr=f"sum(increase(tenure_db_reconnects_total[{rw}])) > {t.reconnect_burst_count}",
        for_seconds=t.reconnect_burst_for_seconds,
        summary="Workers reconnected to the database in a burst",
        description=(
            "Workers re-opened {{ $value | humanize }} database connections in the last"
            f" {rw} (threshold {t.reconnect_burst_count}): the primary probably moved (failover or"
            " switchover). Check that it finished and, with asynchronous replication, whether"
            " acknowledged transactions were lost."
        ),
    ))

    # --- exporter ---------------------------------------------------------------------------
    rules.append(AlertRule(
        name="TenureExporterDown",
        group="tenure-exporter",
        severity="critical",
        expr=(
            f'up{{job=~"{t.exporter_job_regex}"}} == 0\n'
            "or\n"
            "absent(tenure_exporter_last_success_timestamp_seconds)\n"
            "or\n"
            "(time() - tenure_exporter_last_success_timestamp_seconds"
            f" > {_num(t.exporter_stale_seconds)})"
        ),
        for_seconds=t.exporter_down_for_seconds,
        summary="tenure exporter down or stale",
        description=(
            "The tenure queue exporter{{ with $labels.instance }} {{ . }}{{ end }}"
            "{{ with $labels.job }} (job {{ . }}){{ end }} is down, absent or has not"
            " collected successfully for more than"
            f" {_num(t.exporter_stale_seconds)}s (value {{{{ $value }}}}): every queue-level"
            " alert (expired leases, backlog, DLQ) is blind."
        ),
    ))
    return rules


ALERT_NAMES: tuple[str, ...] = tuple(r.name for r in build_rules(AlertThresholds()))
"""Names of all generated alerts, in rule order."""


def build_rule_groups(thresholds: AlertThresholds) -> dict[str, Any]:
    """The Prometheus rule file (``{"groups": [...]}``) for the given thresholds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for rule in build_rules(thresholds):
        groups.setdefault(rule.group, []).append({
            "alert": rule.name,
            "expr": rule.expr,
            "for": prom_duration(rule.for_seconds),
            "labels": {"severity": rule.severity},
            "annotations": {
                "summary": rule.summary,
                "description": rule.description,
                "runbook_url": runbook_url(thresholds, rule.name),
            },
        })
    interval = prom_duration(thresholds.evaluation_interval_seconds)
    return {
        "groups": [
            {"name": name, "interval": interval, "rules": rules}
            for name, rules in groups.items()
        ]
    }


class _RuleDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings (PromQL) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_RuleDumper.add_representer(str, _str_representer)

RULES_HEADER = (
    "# Generated by `python -m tenure.observability.generate` from"
    " src/tenure/observability/alerts.py.\n"
    "# Do not edit: change AlertThresholds or the rule code and regenerate.\n"
)


def render_rules(thresholds: AlertThresholds | None = None) -> str:
    """The rule file as YAML text (deterministic: fixed key order, no timestamps)."""
    data = build_rule_groups(thresholds or AlertThresholds())
    body = yaml.dump(
        data, Dumper=_RuleDumper, sort_keys=False, default_flow_style=False, width=4096,
        allow_unicode=True,
    )
    return RULES_HEADER + body
