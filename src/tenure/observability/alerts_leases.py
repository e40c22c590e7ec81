"""Rule group ``tenure-leases``: zombie jobs (expired leases, late heartbeats, hung jobs) and
the reaper that recovers them.

Limits: queue-level gauges come from the SQL exporter, possibly several replicas, so they are
aggregated with ``max by (queue)``. The reaper's cycle timestamp carries no queue label (one
reaper serves a whole schema).
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, number, prom_duration
from tenure.observability.thresholds import AlertThresholds
from tenure.reaper import reaper
from tenure.worker.heartbeat import HEARTBEAT_DEFAULT

GROUP = "tenure-leases"


def healthy_reap_seconds() -> float:
    """Seconds from a lease's expiry to its requeue by a healthy reaper with default settings:
    the owner's heartbeat (issue 22 item 5) + grace + alive-owner grace + one interval (a first
    expiry is requeued with no backoff)."""
    return (HEARTBEAT_DEFAULT + reaper.GRACE_DEFAULT + reaper.ALIVE_OWNER_GRACE_DEFAULT
            + reaper.INTERVAL_DEFAULT)


def expired_leases(t: AlertThresholds) -> AlertRule:
    return AlertRule(
        name="TenureExpiredLeases",
        group=GROUP,
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_running_expired_leases)"
            f" > {t.expired_leases_warning_count}"
        ),
        for_seconds=t.expired_leases_for_seconds,
        summary="Running jobs with an expired lease in queue {{ $labels.queue }}",
        description=(
            "{{ $value }} running job(s) in queue {{ $labels.queue }} hold a lease that expired"
            f" (DB clock) for at least {prom_duration(t.expired_leases_for_seconds)}: their"
            " workers are dead, hung or cut off from the database, and the reaper has not"
            " recovered them (a healthy reaper with the default settings requeues them within"
            f" {prom_duration(int(healthy_reap_seconds()))} after their lease expired)."
        ),
    )


def expired_leases_high(t: AlertThresholds) -> AlertRule:
    return AlertRule(
        name="TenureExpiredLeasesHigh",
        group=GROUP,
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
            f" {prom_duration(t.expired_leases_high_for_seconds)}). Workers are failing at"
            " scale or the reaper is not running."
        ),
    )


def heartbeat_lag_high(t: AlertThresholds) -> AlertRule:
    return AlertRule(
        name="TenureHeartbeatLagHigh",
        group=GROUP,
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_heartbeat_lag_p95_seconds)"
            f" > {number(t.heartbeat_lag_p95_seconds)}"
        ),
        for_seconds=t.heartbeat_lag_for_seconds,
        summary="Heartbeats lagging in queue {{ $labels.queue }}",
        description=(
            "p95 heartbeat lag of running jobs in queue {{ $labels.queue }} is"
            " {{ $value | humanizeDuration }}"
            f" (threshold {number(t.heartbeat_lag_p95_seconds)}s): many workers are not"
            " renewing their leases (hung handlers, starved heartbeat loop or slow database)."
        ),
    )


def oldest_running_job_too_old(t: AlertThresholds) -> AlertRule:
    window = prom_duration(t.runtime_p99_window_seconds)
    p99 = (
        "histogram_quantile(0.99, sum by (queue, le)"
        f" (rate(tenure_job_runtime_seconds_bucket[{window}])))"
    )
    multiple = number(t.oldest_running_runtime_p99_multiple)
    floor = number(t.oldest_running_min_seconds)
    return AlertRule(
        name="TenureOldestRunningJobTooOld",
        group=GROUP,
        severity="warning",
        expr=(
            "max by (queue) (tenure_queue_oldest_running_age_seconds)\n"
            "  > on (queue)\n"
            "(\n"
            "    clamp_min(\n"
            f"      ({p99} >= 0)\n"
            f"      * {multiple},\n"
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
            f" {multiple}x the runtime p99 over {window} (and at least {floor}s): it is hung"
            " or its heartbeat keeps extending a lease that should have ended."
        ),
    )


def reaper_not_running(t: AlertThresholds) -> AlertRule:
    return AlertRule(
        name="TenureReaperNotRunning",
        group=GROUP,
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
    )


def reaper_too_aggressive(t: AlertThresholds) -> AlertRule:
    window = prom_duration(t.reaper_window_seconds)
    return AlertRule(
        name="TenureReaperTooAggressive",
        group=GROUP,
        severity="warning",
        expr=(
            "max by (queue) (increase(tenure_queue_reaped_jobs_total"
            f"[{window}])) > {t.reaper_max_reaped_per_window}"
        ),
        for_seconds=t.reaper_for_seconds,
        summary="Reaper is recovering many jobs in queue {{ $labels.queue }}",
        description=(
            "The reaper recovered {{ $value | humanize }} jobs of queue {{ $labels.queue }}"
            f" in the last {window} (threshold"
            f" {t.reaper_max_reaped_per_window}): mass worker loss, or leases/grace too short"
            " for the real runtime, which causes duplicate execution."
        ),
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [
        expired_leases(t),
        expired_leases_high(t),
        heartbeat_lag_high(t),
        oldest_running_job_too_old(t),
        reaper_not_running(t),
        reaper_too_aggressive(t),
    ]
