"""Rule group ``tenure-exporter``: the SQL exporter that every queue-level alert depends on.

Limits: matches scrape targets by the ``job`` label regex of the thresholds; a deployment that
names its scrape job differently must set ``exporter_job_regex``.
"""

from __future__ import annotations

from tenure.observability.alert_rule import AlertRule, number
from tenure.observability.thresholds import AlertThresholds

GROUP = "tenure-exporter"


def exporter_down(t: AlertThresholds) -> AlertRule:
    stale = number(t.exporter_stale_seconds)
    return AlertRule(
        name="TenureExporterDown",
        group=GROUP,
        severity="critical",
        expr=(
            f'up{{job=~"{t.exporter_job_regex}"}} == 0\n'
            "or\n"
            "absent(tenure_exporter_last_success_timestamp_seconds)\n"
            "or\n"
            "(time() - tenure_exporter_last_success_timestamp_seconds"
            f" > {stale})"
        ),
        for_seconds=t.exporter_down_for_seconds,
        summary="tenure exporter down or stale",
        description=(
            "The tenure queue exporter{{ with $labels.instance }} {{ . }}{{ end }}"
            "{{ with $labels.job }} (job {{ . }}){{ end }} is down, absent or has not"
            " collected successfully for more than"
            f" {stale}s (value {{{{ $value }}}}): every queue-level"
            " alert (expired leases, backlog, DLQ) is blind."
        ),
    )


def rules(t: AlertThresholds) -> list[AlertRule]:
    """The group's rules, in file order."""
    return [exporter_down(t)]
