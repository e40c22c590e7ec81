"""Rule group ``tenure-retries-dedup``: duplicate execution, retry storms and failing
dependencies, each compared with a rate floor so quiet queues stay silent.

Limits: worker counters are per process and summed; the baselines include the current window,
so these alerts detect a rise and resolve once the new level becomes the baseline.
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, number, prom_duration
from tenure.observability.thresholds import AlertThresholds

GROUP = "tenure-retries-dedup"


def dedup_hit_rate_spike(t: AlertThresholds) -> AlertRule:
    dw, bw = prom_duration(t.dedup_window_seconds), prom_duration(t.dedup_baseline_window_seconds)
    return AlertRule(
        name="TenureDedupHitRateSpike",
        group=GROUP,
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
            f"      {number(t.dedup_baseline_floor_ratio)}\n"
            "    )\n"
            f"  * {number(t.dedup_spike_factor)}\n"
            ")\n"
            "and on (queue, source)\n"
            f"  (sum by (queue, source) (rate(tenure_dedup_hits_total[{dw}]))"
            f" > {number(t.dedup_min_hits_per_second)})"
        ),
        for_seconds=t.dedup_for_seconds,
        summary="Dedup hit rate spiking in queue {{ $labels.queue }} ({{ $labels.source }})",
        description=(
            "{{ $value | humanizePercentage }} of {{ $labels.source }} idempotency checks in"
            f" queue {{{{ $labels.queue }}}} found a duplicate over the last {dw}, more than"
            f" {number(t.dedup_spike_factor)}x the {bw} baseline: jobs are being executed more"
            " than once (reaper too eager, leases too short) or producers re-send."
        ),
    )


def retry_storm(t: AlertThresholds) -> AlertRule:
    rw = prom_duration(t.retry_window_seconds)
    return AlertRule(
        name="TenureRetryStorm",
        group=GROUP,
        severity="warning",
        expr=(
            "(\n"
            f"    sum by (queue) (rate(tenure_jobs_retried_total[{rw}]))\n"
            "  /\n"
            f"    sum by (queue) (rate(tenure_jobs_claimed_total[{rw}]))\n"
            f") > {number(t.retry_share_of_claims)}\n"
            "and on (queue)\n"
            f"  (sum by (queue) (rate(tenure_jobs_retried_total[{rw}]))"
            f" > {number(t.retry_min_per_second)})"
        ),
        for_seconds=t.retry_for_seconds,
        summary="Sustained retry storm in queue {{ $labels.queue }}",
        description=(
            "Retries are {{ $value | humanizePercentage }} of claims in queue"
            f" {{{{ $labels.queue }}}} (threshold {number(t.retry_share_of_claims * 100)}%),"
            f" sustained for {prom_duration(t.retry_for_seconds)}: a dependency is failing or"
            " leases are too short; check retries by error code."
        ),
    )


def dependency_timeouts_rising(t: AlertThresholds) -> AlertRule:
    sel = f'tenure_jobs_failed_total{{error_code=~"{t.dependency_timeout_error_code_regex}"}}'
    tw = prom_duration(t.dependency_timeout_window_seconds)
    tb = prom_duration(t.dependency_timeout_baseline_window_seconds)
    return AlertRule(
        name="TenureDependencyTimeoutsRising",
        group=GROUP,
        severity="info",
        expr=(
            f"sum by (queue, error_code) (rate({sel}[{tw}]))\n"
            "  > on (queue, error_code)\n"
            f"(sum by (queue, error_code) (rate({sel}[{tb}]))"
            f" * {number(t.dependency_timeout_growth_factor)})\n"
            "and on (queue, error_code)\n"
            f"  (sum by (queue, error_code) (rate({sel}[{tw}]))"
            f" > {number(t.dependency_timeout_min_per_second)})"
        ),
        for_seconds=t.dependency_timeout_for_seconds,
        summary="Dependency timeouts rising in queue {{ $labels.queue }}",
        description=(
            "Handlers in queue {{ $labels.queue }} fail with {{ $labels.error_code }} at"
            " {{ $value | humanize }}/s over the last"
            f" {tw}, more than {number(t.dependency_timeout_growth_factor)}x the {tb} baseline:"
            " a downstream dependency is slow or down."
        ),
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [dedup_hit_rate_spike(t), retry_storm(t), dependency_timeouts_rising(t)]
