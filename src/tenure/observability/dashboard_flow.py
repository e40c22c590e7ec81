"""The "Flow control" row of the overview dashboard (docs/flow.md): runnable jobs held back by
reason, the flow keys at their running limit, each rate limit's tokens and pauses, and the wait of
the oldest job nothing holds back, against the threshold of TenureFlowStarvation.

Limits: rate limits are shared by every queue and task (a job names one), so the rate-limit
metrics carry a ``limit`` label and no ``queue``: that panel ignores the ``$queue`` variable. A
per-key limit shows the fewest tokens of its buckets (docs/metrics.md). The flow key is never a
label (keys are unbounded), so no panel shows one key.
"""

from __future__ import annotations

from tenure.observability.panels import PanelSpec, Query, Section, sel
from tenure.observability.thresholds import AlertThresholds

FLOW_ROW_TITLE = "Flow control"
RATE_LIMIT_TOKENS = "tenure_rate_limit_tokens"
RATE_LIMIT_PAUSED = "tenure_rate_limit_paused"
RATE_LIMIT_METRICS = (RATE_LIMIT_TOKENS, RATE_LIMIT_PAUSED)
"""Schema-wide metrics (a ``limit`` label, no ``queue``): a panel may show them unfiltered."""


def flow_section(t: AlertThresholds) -> Section:
    """The row: blocked jobs by reason, keys at their limit, rate-limit tokens, starvation."""
    return Section(FLOW_ROW_TITLE, [
        PanelSpec(
            "Blocked jobs by reason",
            "Runnable jobs flow control holds back, by reason: concurrency (their key has its"
            " running limit reached), backpressure (a handler paused their rate limit's bucket with"
            " ctx.rate_limited), rate (the bucket holds fewer tokens than their units). They are"
            " not in the ready count, and the operator adds no worker for them.",
            [Query(f"max by (queue, reason) ({sel('tenure_flow_blocked_jobs')})", "{{queue}} {{reason}}")],
            stacked=True,
        ),
        PanelSpec(
            "Flow keys at their running limit",
            "Flow keys with as many running jobs as their running limit (`tenure flow limit`): each"
            " gets no claim until one of its jobs ends. `tenure flow list` names them.",
            [Query(f"max by (queue) ({sel('tenure_flow_keys_at_limit')})", "{{queue}}")],
        ),
        PanelSpec(
            "Rate-limit tokens",
            "Tokens now in each rate limit's bucket (a per-key limit: the fewest of its buckets;"
            " 0 while paused), and 1 while a handler's back-pressure pauses one of its buckets"
            " (right axis). Tokens flat at 0 with rate-blocked jobs: the limit, not the workers,"
            " sets the pace. Shared by every queue: not filtered by queue.",
            [
                Query(f"max by (limit) ({RATE_LIMIT_TOKENS})", "{{limit}} tokens"),
                Query(f"max by (limit) ({RATE_LIMIT_PAUSED})", "{{limit}} paused"),
            ],
            right_axis_regex=".* paused",
        ),
        PanelSpec(
            "Oldest job nothing holds back",
            "On queues with flow keys or rate limits: the wait of the oldest runnable job whose key"
            " is under its running limit, and which no job of its key (itself or older) waiting for"
            " rate-limit tokens holds back: one the next claim could take. The line is TenureFlowStarvation's threshold (which also needs the same job"
            " to stay unclaimed while other jobs are claimed).",
            [Query(f"max by (queue) ({sel('tenure_flow_oldest_unblocked_wait_seconds')})", "{{queue}}")],
            unit="s",
            thresholds=[t.flow_starvation_wait_seconds],
        ),
    ])
