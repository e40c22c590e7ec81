"""Every tunable number of the generated alert rules, each declared once.

A knob is one field of :class:`AlertThresholds`: its default, its type and its validation rule
sit in the same declaration (``name: type = knob(default, rule)``), with the docstring below
it. The rule modules (``alerts_*``) read every value from an ``AlertThresholds`` object; no
threshold is written into the PromQL. This is the ``config.libsonnet`` of kubernetes-mixin:
tune here, the rule groups stay generic.

Naming carries meaning: a ``*_for_seconds`` knob is a rule's ``for`` (how long the condition
must hold before the alert fires), a ``*_window_seconds`` knob a PromQL range. Count and rate
thresholds fire when the observed value is strictly above them.

Limits: :meth:`AlertThresholds.validate` checks each knob on its own and the few relations
between knobs; it cannot know the deployed lease, heartbeat or reaper settings, which the
thresholds must be set to match (see ``docs/observability.md``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenure.core.errors import ConfigError

T = TypeVar("T")

Rule = Callable[[str, Any], str | None]
"""A knob's validation: (field name, value) -> the error message, or None when valid."""

RULE_KEY = "tenure.threshold_rule"
"""Key of the validation rule in a knob's dataclass field metadata."""


def positive(name: str, value: Any) -> str | None:
    """Durations, limits and multiples that must be strictly above zero."""
    return None if value > 0 else f"{name} must be > 0, got {value}"


def non_negative(name: str, value: Any) -> str | None:
    """``for`` durations, counts and rates where zero is meaningful."""
    return None if value >= 0 else f"{name} must be >= 0, got {value}"


def share(name: str, value: Any) -> str | None:
    """A fraction of a whole, in (0, 1]."""
    return None if 0 < value <= 1 else f"{name} must be in (0, 1]"


def growth_factor(name: str, value: Any) -> str | None:
    """A multiple of a baseline; at or below 1 the alert would fire at the baseline itself."""
    return None if value > 1 else f"{name} must be > 1, got {value}"


def url_without_fragment(name: str, value: Any) -> str | None:
    """A base URL to which ``#<anchor>`` is appended."""
    if not value or "#" in value:
        return f"{name} must be a non-empty URL without a '#' fragment"
    return None


def label_regex(name: str, value: Any) -> str | None:
    """A regex written inside a PromQL ``=~"..."`` matcher (so no quotes or backslashes)."""
    if not value:
        return f"{name} must not be empty"
    if '"' in value or "\\" in value:
        return f"{name} must not contain quotes or backslashes"
    try:
        re.compile(value)
    except re.error as exc:
        return f"{name} is not a valid regex: {exc}"
    return None


def knob(default: T, rule: Rule) -> T:
    """Declare one threshold: its default and the rule :meth:`AlertThresholds.validate` applies."""
    return dataclasses.field(default=default, metadata={RULE_KEY: rule})


@dataclass(frozen=True)
class AlertThresholds:
    """Every tunable number of the generated alert rules (see the module docstring)."""

    evaluation_interval_seconds: int = knob(60, positive)
    """Rule-group evaluation interval (the ``interval`` of every generated group)."""
    runbook_base_url: str = knob(
        "https://github.com/tenure-dev/tenure/blob/main/docs/runbooks.md", url_without_fragment
    )
    """URL of docs/runbooks.md; each alert's ``runbook_url`` is this plus ``#<alertname lower>``."""

    # --- leases ---------------------------------------------------------------------------
    expired_leases_warning_count: int = knob(0, non_negative)
    """TenureExpiredLeases fires when more running jobs than this hold an expired lease."""
    expired_leases_for_seconds: int = knob(120, non_negative)
    """``for`` of TenureExpiredLeases; keep it above reaper interval + grace so a healthy
    reaper clears ordinary crashes before anyone is paged (the default is well above what a
    healthy reaper takes with its defaults, ``alerts_leases.healthy_reap_seconds``)."""
    expired_leases_critical_count: int = knob(10, non_negative)
    """TenureExpiredLeasesHigh fires when more running jobs than this hold an expired lease."""
    expired_leases_high_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureExpiredLeasesHigh."""

    heartbeat_lag_p95_seconds: float = knob(20.0, positive)
    """TenureHeartbeatLagHigh fires when the p95 heartbeat lag of running jobs exceeds this;
    set it to a few heartbeat intervals and below the lease (R21)."""
    heartbeat_lag_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureHeartbeatLagHigh."""

    oldest_running_runtime_p99_multiple: float = knob(3.0, positive)
    """TenureOldestRunningJobTooOld fires when the oldest running job is older than this
    multiple of the queue's runtime p99 (tenure_job_runtime_seconds)."""
    oldest_running_min_seconds: float = knob(900.0, positive)
    """Floor of that limit, and the limit itself when the queue completed nothing within
    ``runtime_p99_window_seconds`` (no p99 to compare with)."""
    runtime_p99_window_seconds: int = knob(3600, positive)
    """Range over which the runtime p99 is computed."""
    oldest_running_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureOldestRunningJobTooOld."""

    reaper_window_seconds: int = knob(600, positive)
    """Range over which reaped jobs are counted for TenureReaperTooAggressive."""
    reaper_max_reaped_per_window: int = knob(20, non_negative)
    """TenureReaperTooAggressive fires when the reaper recovered more jobs than this within
    ``reaper_window_seconds``."""
    reaper_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureReaperTooAggressive."""
    reaper_stalled_seconds: int = knob(600, positive)
    """TenureReaperNotRunning fires when no reaper finished a cycle for longer than this
    (tenure_reaper_last_cycle_timestamp_seconds); keep it several reaper intervals (the
    CronJob's schedule) long."""
    reaper_stalled_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureReaperNotRunning."""

    # --- retries and dedup ----------------------------------------------------------------
    dedup_window_seconds: int = knob(300, positive)
    """Short range of the current dedup hit rate."""
    dedup_baseline_window_seconds: int = knob(3600, positive)
    """Range of the dedup hit-rate baseline (longer than ``dedup_window_seconds``)."""
    dedup_spike_factor: float = knob(3.0, growth_factor)
    """TenureDedupHitRateSpike fires when the current hit rate (hits/checks) exceeds the
    baseline times this factor."""
    dedup_baseline_floor_ratio: float = knob(0.01, non_negative)
    """Lower bound of the baseline hit rate, so a queue with no duplicates at all does not
    alert on its first few hits."""
    dedup_min_hits_per_second: float = knob(0.05, non_negative)
    """Minimum absolute dedup hit rate (hits/s) for the alert; silences quiet queues."""
    dedup_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureDedupHitRateSpike."""

    retry_window_seconds: int = knob(600, positive)
    """Range of the retry and claim rates for TenureRetryStorm."""
    retry_share_of_claims: float = knob(0.25, share)
    """TenureRetryStorm fires when retries exceed this share of claims (0..1)."""
    retry_min_per_second: float = knob(0.05, non_negative)
    """Minimum absolute retry rate (retries/s) for TenureRetryStorm."""
    retry_for_seconds: int = knob(900, non_negative)
    """``for`` of TenureRetryStorm: how long the storm must be sustained."""

    dependency_timeout_error_code_regex: str = knob(".*timeout.*", label_regex)
    """RE2 regex of the ``error_code`` values that mean a dependency timed out."""
    dependency_timeout_window_seconds: int = knob(600, positive)
    """Short range of the timeout failure rate."""
    dependency_timeout_baseline_window_seconds: int = knob(3600, positive)
    """Range of the timeout failure-rate baseline (longer than the short range)."""
    dependency_timeout_growth_factor: float = knob(2.0, growth_factor)
    """TenureDependencyTimeoutsRising fires when the current rate exceeds baseline × this."""
    dependency_timeout_min_per_second: float = knob(0.05, non_negative)
    """Minimum absolute timeout failure rate (failures/s) for the alert."""
    dependency_timeout_for_seconds: int = knob(600, non_negative)
    """``for`` of TenureDependencyTimeoutsRising."""

    # --- backlog --------------------------------------------------------------------------
    dead_letter_max_jobs: int = knob(0, non_negative)
    """TenureDeadLetterQueueGrowing fires when the DLQ holds more jobs than this and grew
    within ``dead_letter_growth_window_seconds``."""
    dead_letter_growth_window_seconds: int = knob(1800, positive)
    """Range over which DLQ growth is measured."""
    dead_letter_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureDeadLetterQueueGrowing."""

    ready_age_sla_seconds: float = knob(300.0, positive)
    """Queueing SLA: TenureOldestReadyJobOverSLA fires when the oldest ready job has waited
    longer than this since ``available_at``."""
    ready_age_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureOldestReadyJobOverSLA."""

    piling_up_min_ready_jobs: int = knob(10, non_negative)
    """TenureJobsPilingUpWorkersAlive needs more ready jobs than this."""
    piling_up_window_seconds: int = knob(600, positive)
    """Range over which backlog growth and completions are measured."""
    piling_up_max_completions_per_second: float = knob(0.001, non_negative)
    """Completion rate (jobs/s) at or below which the queue counts as making no progress."""
    piling_up_for_seconds: int = knob(600, non_negative)
    """``for`` of TenureJobsPilingUpWorkersAlive."""

    # --- flow control ---------------------------------------------------------------------
    flow_starvation_wait_seconds: float = knob(900.0, positive)
    """TenureFlowStarvation fires when the oldest job of a flow queue that nothing holds back
    has waited longer than this since ``available_at``; keep it above the workers'
    ``--priority-aging`` (300 s by default), after which the claim takes such a job first."""
    flow_starvation_window_seconds: int = knob(600, positive)
    """Range over which that job must have stayed the same (no claim took it) while the queue's
    other jobs were claimed or completed."""
    flow_starvation_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureFlowStarvation."""

    # --- database failover ----------------------------------------------------------------
    claims_stalled_window_seconds: int = knob(120, positive)
    """Range over which TenureClaimsStalled looks for claims (keep it above a failover's length)."""
    claims_stalled_for_seconds: int = knob(120, non_negative)
    """``for`` of TenureClaimsStalled."""

    reconnect_burst_window_seconds: int = knob(300, positive)
    """Range over which database reconnects are counted for TenureDatabaseReconnectBurst."""
    reconnect_burst_count: int = knob(5, non_negative)
    """TenureDatabaseReconnectBurst fires when more reconnects than this happen within the window."""
    reconnect_burst_for_seconds: int = knob(60, non_negative)
    """``for`` of TenureDatabaseReconnectBurst."""

    # --- exporter -------------------------------------------------------------------------
    exporter_job_regex: str = knob(".*tenure-exporter.*", label_regex)
    """RE2 regex matching the Prometheus ``job`` label of the exporter scrape targets."""
    exporter_stale_seconds: float = knob(300.0, positive)
    """TenureExporterDown fires when the last successful collection is older than this."""
    exporter_down_for_seconds: int = knob(300, non_negative)
    """``for`` of TenureExporterDown."""

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid knob, then the first broken relation."""
        for f in dataclasses.fields(self):
            rule: Rule = f.metadata[RULE_KEY]
            problem = rule(f.name, getattr(self, f.name))
            if problem is not None:
                raise ConfigError(problem)
        relations = (
            ("expired_leases_critical_count", ">=", "expired_leases_warning_count"),
            ("dedup_baseline_window_seconds", ">", "dedup_window_seconds"),
            ("dependency_timeout_baseline_window_seconds", ">", "dependency_timeout_window_seconds"),
        )
        for larger, op, smaller in relations:
            a, b = getattr(self, larger), getattr(self, smaller)
            if not (a >= b if op == ">=" else a > b):
                raise ConfigError(f"{larger} must be {op} {smaller}")

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
