"""Rule group ``tenure-database``: a database failover seen from the queue (claims stop while
work is ready) and from the processes (a burst of reconnects).

Limits: neither rule can tell a failover from a network partition; the runbooks say how to
confirm which one happened and whether asynchronous replication lost acknowledged work.
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, prom_duration
from tenure.observability.thresholds import AlertThresholds

GROUP = "tenure-database"


def claims_stalled(t: AlertThresholds) -> AlertRule:
    cw = prom_duration(t.claims_stalled_window_seconds)
    return AlertRule(
        name="TenureClaimsStalled",
        group=GROUP,
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
    )


def database_reconnect_burst(t: AlertThresholds) -> AlertRule:
    rw = prom_duration(t.reconnect_burst_window_seconds)
    return AlertRule(
        name="TenureDatabaseReconnectBurst",
        group=GROUP,
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
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [claims_stalled(t), database_reconnect_burst(t)]
