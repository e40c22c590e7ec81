"""Rule group ``tenure-flow``: flow control's fairness (docs/flow.md). A job that nothing holds
back (its key under its running limit, and neither it nor an older job of its key waiting for
rate-limit tokens: the claim takes a key's jobs first in, first out) is one the next claim could
take; the fair claim takes the oldest such job first once it has waited the workers' priority
aging. When the same job stays the oldest one nothing holds back for a whole window
while the queue's other jobs are claimed, the claim passes it over: fairness is broken.

The exporter serves, per flow queue, the wait of that job
(``tenure_flow_oldest_unblocked_wait_seconds``) and its id (``tenure_flow_oldest_unblocked_job_id``):
the id is what tells a job that is never taken (the id stays) from a hot key's backlog drained
one job after another (the id changes at every claim, even though the wait stays long).

Limits: the exporter looks for that job among the oldest ``FLOW_WALK_MAX`` runnable jobs of the
queue (``tenure.core.repository.reads``); behind a longer run of held-back jobs it reports none
and this rule stays silent. Progress is counted from either source (worker claim counters or the
completed count from SQL), as in ``tenure-backlog``.
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, number, prom_duration
from tenure.observability.thresholds import AlertThresholds

GROUP = "tenure-flow"


def flow_starvation(t: AlertThresholds) -> AlertRule:
    window = prom_duration(t.flow_starvation_window_seconds)
    return AlertRule(
        name="TenureFlowStarvation",
        group=GROUP,
        severity="warning",
        expr=(
            "max by (queue) (tenure_flow_oldest_unblocked_wait_seconds)"
            f" > {number(t.flow_starvation_wait_seconds)}\n"
            "and on (queue)\n"
            f"  (max by (queue) (changes(tenure_flow_oldest_unblocked_job_id[{window}])) == 0)\n"
            "and on (queue)\n"
            "  (\n"
            f"    sum by (queue) (increase(tenure_jobs_claimed_total[{window}])) > 0\n"
            "  or\n"
            f'    max by (queue) (delta(tenure_queue_jobs{{state="completed"}}[{window}])) > 0\n'
            "  )"
        ),
        for_seconds=t.flow_starvation_for_seconds,
        summary="A job of queue {{ $labels.queue }} that no flow limit holds back is not claimed",
        description=(
            "The oldest job of queue {{ $labels.queue }} that nothing holds back (its key is under its"
            " running limit, and neither it nor an older job of its key waits for rate-limit tokens)"
            " has waited"
            " {{ $value | humanizeDuration }} (threshold"
            f" {number(t.flow_starvation_wait_seconds)}s), and it stayed the same job for {window}"
            " while other jobs of the queue were claimed: the claim passes it over. Its id is"
            " tenure_flow_oldest_unblocked_job_id; see it with `tenure jobs show ID`."
        ),
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [flow_starvation(t)]
