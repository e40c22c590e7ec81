"""Rule group ``tenure-backlog``: the dead-letter queue, the queueing SLA and jobs piling up
while workers look alive.

Limits: progress is counted from either source (worker completion counters or the completed
count from SQL), so unscraped workers do not make a queue look stuck; with no live worker at
all the piling-up rule stays silent (expired leases and the SLA alert cover that case).
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, number, prom_duration
from tenure.observability.thresholds import AlertThresholds

GROUP = "tenure-backlog"


def dead_letter_queue_growing(t: AlertThresholds) -> AlertRule:
    window = prom_duration(t.dead_letter_growth_window_seconds)
    return AlertRule(
        name="TenureDeadLetterQueueGrowing",
        group=GROUP,
        severity="warning",
        expr=(
            f"max by (queue) (tenure_queue_dead_letter_jobs) > {t.dead_letter_max_jobs}\n"
            "and on (queue)\n"
            "  (max by (queue) (delta(tenure_queue_dead_letter_jobs"
            f"[{window}])) > 0)"
        ),
        for_seconds=t.dead_letter_for_seconds,
        summary="Dead-letter queue of {{ $labels.queue }} is growing",
        description=(
            "The dead-letter queue of {{ $labels.queue }} holds {{ $value }} job(s)"
            f" (threshold {t.dead_letter_max_jobs}) and grew within the last"
            f" {window}: jobs fail permanently or exhaust"
            " their attempts. Inspect with `tenure dlq`; replay only after a fix."
        ),
    )


def oldest_ready_job_over_sla(t: AlertThresholds) -> AlertRule:
    return AlertRule(
        name="TenureOldestReadyJobOverSLA",
        group=GROUP,
        severity="critical",
        expr=(
            "max by (queue) (tenure_queue_oldest_ready_age_seconds)"
            f" > {number(t.ready_age_sla_seconds)}"
        ),
        for_seconds=t.ready_age_for_seconds,
        summary="Oldest ready job in queue {{ $labels.queue }} is over the SLA",
        description=(
            "The oldest ready job in queue {{ $labels.queue }} has waited"
            " {{ $value | humanizeDuration }} since it became available (SLA"
            f" {number(t.ready_age_sla_seconds)}s): too few healthy workers for the load, or"
            " workers cannot claim."
        ),
    )


def jobs_piling_up_workers_alive(t: AlertThresholds) -> AlertRule:
    pw = prom_duration(t.piling_up_window_seconds)
    return AlertRule(
        name="TenureJobsPilingUpWorkersAlive",
        group=GROUP,
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
            f" > {number(t.piling_up_max_completions_per_second)})\n"
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
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [dead_letter_queue_growing(t), oldest_ready_job_over_sla(t), jobs_piling_up_workers_alive(t)]
