"""Grafana dashboards for tenure, generated with grafanalib.

Three dashboards (overview, lease health, retries/dedup) are rendered into
``dashboards/*.json`` by ``python -m tenure.observability.generate``. Each has a
``datasource`` variable (any Prometheus) and a multi-value ``queue`` variable; every panel
query filters ``queue=~"$queue"`` through :func:`~tenure.observability.panels.sel`, and panels
that mirror an alert draw its threshold from
:class:`~tenure.observability.thresholds.AlertThresholds`. This module holds what each
dashboard shows; :mod:`.panels` how a panel is built and laid out.

Limits: panels use only metrics that carry a ``queue`` label (see docs/metrics.md), so
unlabelled process metrics (heartbeat round-trip, reaper cycle time, exporter freshness) are
not charted here; the exceptions are the schema-wide reaper cycle gauges, the rate-limit gauges
of the overview's "Flow control" row (:mod:`.dashboard_flow`: a rate limit is shared by every
queue) and its "SQS API" row (:mod:`.dashboard_sqs`: `tenure sqs` metrics have no queue label). Output is deterministic: fixed uids and panel ids, keys sorted on render.
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib._gen import DashboardEncoder

from tenure.observability.dashboard_flow import flow_section
from tenure.observability.dashboard_sqs import sqs_api_section
from tenure.observability.panels import (
    CANCELLED,
    DEAD_LETTERED,
    RATE,
    READY,
    RUNNING,
    PanelSpec,
    Query,
    layout_dashboard,
    quantile,
    rate,
    sel,
)
from tenure.observability.thresholds import AlertThresholds

DASHBOARD_UIDS: dict[str, str] = {
    "overview": "tenure-overview",
    "lease-health": "tenure-lease-health",
    "retries-dedup": "tenure-retries-dedup",
}
"""File stem -> Grafana uid; the uids are stable so links and provisioning survive regeneration."""

def _overview_queue_panels(t: AlertThresholds) -> list[PanelSpec]:
    """Throughput, backlog against live workers, jobs by state, queueing age and the DLQ."""
    return [
        PanelSpec(
            "Throughput (jobs/s)",
            "Claims, completions accepted by the token CAS, and handler failures, summed over"
            " workers.",
            [
                Query(f"sum by (queue) ({rate('tenure_jobs_completed_total')})",
                      "{{queue}} completed"),
                Query(f"sum by (queue) ({rate('tenure_jobs_claimed_total')})",
                      "{{queue}} claimed"),
                Query(f"sum by (queue) ({rate('tenure_jobs_failed_total')})",
                      "{{queue}} failed"),
            ],
            unit="ops",
        ),
        PanelSpec(
            "Ready backlog vs live workers",
            "Ready jobs (left) against workers the registry saw within their liveness window"
            " (right). Backlog rising while workers stay flat and throughput is zero means hung"
            " or unable to claim (TenureJobsPilingUpWorkersAlive).",
            [
                Query(f"max by (queue) ({sel('tenure_queue_jobs', READY)})",
                      "{{queue}} ready"),
                Query(f"max by (queue) ({sel('tenure_queue_live_workers')})",
                      "{{queue}} live workers"),
            ],
            right_axis_regex=".* live workers",
        ),
        PanelSpec(
            "Jobs by state",
            "Queue contents by state, from SQL (not summed from workers).",
            [Query(f"max by (queue, state) ({sel('tenure_queue_jobs')})", "{{queue}} {{state}}")],
        ),
        PanelSpec(
            "Oldest ready job age",
            "Time the oldest ready job has waited since available_at. The line is the SLA of"
            " TenureOldestReadyJobOverSLA.",
            [Query(f"max by (queue) ({sel('tenure_queue_oldest_ready_age_seconds')})",
                   "{{queue}}")],
            unit="s",
            thresholds=[t.ready_age_sla_seconds],
        ),
        PanelSpec(
            "Dead-letter queue depth",
            "Failed jobs waiting in the DLQ (a quarantine: inspect with `tenure dlq`, replay in"
            " small batches after a fix).",
            [Query(f"max by (queue) ({sel('tenure_queue_dead_letter_jobs')})", "{{queue}}")],
            thresholds=[float(t.dead_letter_max_jobs) + 1] if t.dead_letter_max_jobs else [],
        ),
    ]


def _overview_running_panels() -> list[PanelSpec]:
    """Running rows against handlers in flight, pauses and limits, cancels and periodic slots, latency."""
    return [
        PanelSpec(
            "Running (DB) vs in flight (workers)",
            "Running rows in the database against handlers the workers report running. A gap"
            " that persists is zombie jobs: rows marked running that no live handler holds.",
            [
                Query(f"max by (queue) ({sel('tenure_queue_jobs', RUNNING)})",
                      "{{queue}} running (DB)"),
                Query(f"sum by (queue) ({sel('tenure_jobs_in_flight')})",
                      "{{queue}} in flight"),
            ],
        ),
        PanelSpec(
            "Paused queues and global running limits",
            "1 while a queue is paused (`tenure queues pause`; workers claim nothing from it,"
            " running jobs finish), and running jobs against the queue's global max_running"
            " (`tenure queues limit`). Running flat at the limit with a ready backlog means the"
            " limit, not the workers, sets the pace.",
            [
                Query(f"max by (queue) ({sel('tenure_queue_paused')})", "{{queue}} paused"),
                Query(f"max by (queue) ({sel('tenure_queue_jobs', RUNNING)})", "{{queue}} running"),
                Query(f"max by (queue) ({sel('tenure_queue_max_running')})", "{{queue}} max running"),
            ],
            right_axis_regex=".* paused",
        ),
        PanelSpec(
            "Cancels, timeouts and periodic slots",
            "Running jobs whose cancel the owner learned at a heartbeat, attempts that ran past"
            " their task's timeout (retried as task_timeout), cancelled jobs in the table, and"
            " periodic slots enqueued or skipped by the bounded catch-up.",
            [
                Query(f"sum by (queue) ({rate('tenure_jobs_cancelled_while_running_total')})",
                      "{{queue}} cancelled while running/s"),
                Query(f"sum by (queue, task) ({rate('tenure_job_timeouts_total')})",
                      "{{queue}} {{task}} timeouts/s"),
                Query(f"max by (queue) ({sel('tenure_queue_jobs', CANCELLED)})",
                      "{{queue}} cancelled (DB)"),
                Query(f"sum by (queue, schedule) ({rate('tenure_periodic_enqueued_total')})",
                      "{{queue}} {{schedule}} periodic enqueued/s"),
                Query(f"sum by (queue, schedule) ({rate('tenure_periodic_slots_skipped_total')})",
                      "{{queue}} {{schedule}} periodic skipped/s"),
            ],
        ),
        PanelSpec(
            "Queueing latency and runtime",
            "p95 wait from available_at to claim, and p50/p99 handler runtime. The runtime p99"
            " is the basis for the lease length (R21).",
            [
                Query(quantile(0.95, "tenure_job_wait_seconds"), "{{queue}} wait p95"),
                Query(quantile(0.5, "tenure_job_runtime_seconds"), "{{queue}} runtime p50"),
                Query(quantile(0.99, "tenure_job_runtime_seconds"), "{{queue}} runtime p99"),
            ],
            unit="s",
        ),
    ]


def overview(t: AlertThresholds) -> Any:
    """The overview dashboard: is the queue keeping up? Then flow control, and `tenure sqs`'s API."""
    return layout_dashboard(
        DASHBOARD_UIDS["overview"], "tenure / Overview",
        "Throughput, backlog against live workers, queueing age and the dead-letter queue.",
        [*_overview_queue_panels(t), *_overview_running_panels()],
        [flow_section(t), sqs_api_section()],
    )


def _lease_expiry_panels(t: AlertThresholds) -> list[PanelSpec]:
    """Expired leases, heartbeat lag and the oldest running job."""
    p99_limit = (
        f"clamp_min({quantile(0.99, 'tenure_job_runtime_seconds')}"
        f" * {t.oldest_running_runtime_p99_multiple:g}, {t.oldest_running_min_seconds:g})"
    )
    return [
        PanelSpec(
            "Running jobs with an expired lease",
            "Zombie candidates: running rows whose lease expired by the DB clock. Lines are"
            " the TenureExpiredLeases and TenureExpiredLeasesHigh thresholds.",
            [
                Query(f"max by (queue) ({sel('tenure_queue_running_expired_leases')})",
                      "{{queue}} expired"),
                Query(f"max by (queue) ({sel('tenure_queue_jobs', RUNNING)})",
                      "{{queue}} running"),
            ],
            thresholds=[float(t.expired_leases_warning_count) + 1,
                        float(t.expired_leases_critical_count) + 1],
        ),
        PanelSpec(
            "Heartbeat lag (max, p95)",
            "now - last_heartbeat_at over running jobs. The line is the p95 threshold of"
            " TenureHeartbeatLagHigh; it should sit well below the lease.",
            [
                Query(f"max by (queue) ({sel('tenure_queue_heartbeat_lag_max_seconds')})",
                      "{{queue}} max"),
                Query(f"max by (queue) ({sel('tenure_queue_heartbeat_lag_p95_seconds')})",
                      "{{queue}} p95"),
            ],
            unit="s",
            thresholds=[t.heartbeat_lag_p95_seconds],
        ),
        PanelSpec(
            "Oldest running job vs runtime p99",
            "Age of the oldest running job against the TenureOldestRunningJobTooOld limit"
            " (runtime p99 times the configured multiple, floored).",
            [
                Query(f"max by (queue) ({sel('tenure_queue_oldest_running_age_seconds')})",
                      "{{queue}} oldest running"),
                Query(p99_limit, "{{queue}} alert limit"),
            ],
            unit="s",
        ),
    ]


def _reaper_panels(t: AlertThresholds) -> list[PanelSpec]:
    """What the reapers recovered, and whether any reaper runs at all."""
    return [
        PanelSpec(
            "Reaped jobs per interval",
            "Jobs the reapers recovered per interval, from the audited reap events (every"
            " reaper counted once: CronJob, loop or in-worker), by outcome and by the owner's"
            " status when reaped (alive = the worker still heartbeats elsewhere: the lease is"
            " too short). Spikes mean mass worker loss or a reaper that is too eager (compare"
            " with stale writes rejected).",
            [
                Query(f"max by (queue) (increase({sel('tenure_queue_reaped_jobs_total')}"
                      f"[{RATE}]))", "{{queue}} reaped"),
                Query("sum by (queue, outcome, owner_status) (max by (queue, outcome,"
                      f" owner_status) (increase({sel('tenure_queue_reaps_total')}[{RATE}])))",
                      "{{queue}} {{outcome}} (owner {{owner_status}})"),
            ],
            bars=True,
        ),
        PanelSpec(
            "Reaper cycles",
            "Seconds since any reaper last finished a cycle, and that cycle's duration (from"
            " the reaper_cycles row, served by the exporter; schema-wide, not per queue). A"
            " growing age means no reaper runs: expired leases are never recovered"
            " (TenureReaperNotRunning).",
            [
                Query("min(time() - tenure_reaper_last_cycle_timestamp_seconds)",
                      "since last cycle"),
                Query("max(tenure_reaper_last_cycle_duration_seconds)", "last cycle duration"),
            ],
            unit="s",
            thresholds=[float(t.reaper_stalled_seconds)],
        ),
    ]


def _lease_write_panels() -> list[PanelSpec]:
    """What happens to leases: lost, stale writes rejected by the token CAS, extended, released."""
    return [
        PanelSpec(
            "Leases lost (/s)",
            "Heartbeats rejected because the token moved, the row is gone or the maximum total"
            " lease was reached; the handler was told to stop.",
            [Query(f"sum by (queue, task) ({rate('tenure_leases_lost_total')})",
                   "{{queue}} {{task}}")],
            unit="ops",
        ),
        PanelSpec(
            "Stale writes rejected by the token CAS (/s)",
            "Writes (complete, retry, dead_letter, release, checkpoint, heartbeat,"
            " effect_succeed) from an attempt that no longer owns the job. Non-zero after reaps"
            " means the reaper took over jobs that were still running (lease or grace too short).",
            [Query(f"sum by (queue, operation) ({rate('tenure_stale_writes_rejected_total')})",
                   "{{queue}} {{operation}}")],
            unit="ops",
        ),
        PanelSpec(
            "Lease extensions (/s)",
            "Lease renewals accepted by heartbeat. Falling to zero while jobs are running means"
            " heartbeats stopped.",
            [Query(f"sum by (queue, task) ({rate('tenure_lease_extensions_total')})",
                   "{{queue}} {{task}}")],
            unit="ops",
        ),
        PanelSpec(
            "Released on shutdown (/s)",
            "Jobs handed back unfinished at the end of a SIGTERM drain; expected around"
            " deploys. Effect deferrals are counted apart (Retries and dedup dashboard).",
            [Query(f"sum by (queue, task) ({rate('tenure_jobs_released_total')})",
                   "{{queue}} {{task}}")],
            unit="ops",
        ),
    ]


def lease_health(t: AlertThresholds) -> Any:
    """The lease-health dashboard: zombie jobs and their recovery."""
    return layout_dashboard(
        DASHBOARD_UIDS["lease-health"], "tenure / Lease health",
        "Zombie detection: expired leases, heartbeat lag, oldest running job, reaper activity"
        " and token-CAS rejections.",
        [*_lease_expiry_panels(t), *_reaper_panels(t), *_lease_write_panels()],
    )


def _retry_panels(t: AlertThresholds) -> list[PanelSpec]:
    """Attempts, redeliveries, retries and failures by error code."""
    return [
        PanelSpec(
            "Attempt distribution at claim",
            "Claims per interval by attempt number (histogram buckets). Mass at attempt > 1"
            " means redeliveries: retries or reaped leases.",
            [Query(f"sum by (le) (increase({sel('tenure_job_attempts_bucket')}[{RATE}]))",
                   "{{le}}")],
            kind="heatmap",
        ),
        PanelSpec(
            "Redelivered jobs (attempt > 1)",
            "Non-terminal jobs on a second or later attempt, and the p95 attempt number at"
            " claim.",
            [
                Query(f"max by (queue) ({sel('tenure_queue_redelivered_jobs')})",
                      "{{queue}} redelivered"),
                Query(quantile(0.95, "tenure_job_attempts"), "{{queue}} attempt p95"),
            ],
        ),
        PanelSpec(
            "Retries by error code (/s)",
            "Failures rescheduled with backoff, by classified error code.",
            [Query(f"sum by (queue, error_code) ({rate('tenure_jobs_retried_total')})",
                   "{{queue}} {{error_code}}")],
            unit="ops",
            stacked=True,
        ),
        PanelSpec(
            "Retry share of claims",
            "Retries divided by claims. The line is the TenureRetryStorm threshold.",
            [Query(
                f"sum by (queue) ({rate('tenure_jobs_retried_total')})"
                f" / sum by (queue) ({rate('tenure_jobs_claimed_total')})",
                "{{queue}}",
            )],
            unit="percentunit",
            thresholds=[t.retry_share_of_claims],
        ),
        PanelSpec(
            "Failures by error code (/s)",
            "Every handler attempt that raised, by classified error code.",
            [Query(f"sum by (queue, error_code) ({rate('tenure_jobs_failed_total')})",
                   "{{queue}} {{error_code}}")],
            unit="ops",
        ),
    ]


def _dedup_panels() -> list[PanelSpec]:
    """Dedup hit rate and hits, dead-lettering and effect deferrals."""
    return [
        PanelSpec(
            "Dedup hit rate by source",
            "Share of idempotency checks that found an existing job (source=enqueue) or an"
            " existing effect (source=effect). A rising effect hit rate is duplicate execution"
            " being absorbed (TenureDedupHitRateSpike).",
            [Query(
                f"sum by (queue, source) ({rate('tenure_dedup_hits_total')})"
                f" / sum by (queue, source) ({rate('tenure_dedup_checks_total')})",
                "{{queue}} {{source}}",
            )],
            unit="percentunit",
        ),
        PanelSpec(
            "Dedup hits (/s) by source",
            "Absolute duplicate suppressions per second.",
            [Query(f"sum by (queue, source) ({rate('tenure_dedup_hits_total')})",
                   "{{queue}} {{source}}")],
            unit="ops",
        ),
        PanelSpec(
            "Dead-lettered (jobs/s)",
            "Jobs moved to the DLQ by workers (by error code) and by the reaper.",
            [
                Query(
                    f"sum by (queue, error_code) ({rate('tenure_jobs_dead_lettered_total')})",
                    "{{queue}} {{error_code}}",
                ),
                Query(
                    "sum by (queue) (max by (queue, owner_status) "
                    f"({rate('tenure_queue_reaps_total', DEAD_LETTERED)}))",
                    "{{queue}} reaper",
                ),
            ],
            unit="ops",
        ),
        PanelSpec(
            "Effect deferrals (/s)",
            "Jobs handed back without using an attempt because another live attempt holds"
            " their effect's idempotency key (leased_by_other_worker): a job with the same"
            " key, or this job's previous attempt after the reaper took it over while it ran.",
            [Query(f"sum by (queue, task) ({rate('tenure_jobs_deferred_total')})",
                   "{{queue}} {{task}}")],
            unit="ops",
        ),
    ]


def retries_dedup(t: AlertThresholds) -> Any:
    """The retries-and-dedup dashboard: redelivery, failures and duplicate execution."""
    return layout_dashboard(
        DASHBOARD_UIDS["retries-dedup"], "tenure / Retries and dedup",
        "Attempt distribution, retries and failures by error code, dedup hit rate and"
        " dead-lettering.",
        [*_retry_panels(t), *_dedup_panels()],
    )


def build_dashboards(thresholds: AlertThresholds | None = None) -> dict[str, Any]:
    """File stem -> grafanalib Dashboard, in a stable order."""
    t = thresholds or AlertThresholds()
    return {
        "overview": overview(t),
        "lease-health": lease_health(t),
        "retries-dedup": retries_dedup(t),
    }


def render_dashboard(dashboard: Any) -> str:
    """Dashboard JSON text: sorted keys, two-space indent, trailing newline."""
    data = dashboard.to_json_data()
    return json.dumps(data, sort_keys=True, indent=2, cls=DashboardEncoder) + "\n"
