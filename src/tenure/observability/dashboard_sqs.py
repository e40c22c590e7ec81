"""The "SQS API" row of the overview dashboard: what `tenure sqs` serves, from its own
``/metrics`` (:mod:`tenure.sqs.metrics`): requests by action, errors by SQS error shape, their
share, latency quantiles by action and the long polls waiting.

Limits: these metrics are per `tenure sqs` process and carry no ``queue`` label (a request's
queue is not a label: queue names are unbounded), so the row ignores the ``$queue`` variable
and sums over every scraped replica; the queues' own traffic is in the per-queue panels above.
ReceiveMessage latency includes long-poll waits (up to WaitTimeSeconds, 20 s), so its
quantiles measure how long clients wait, not how fast the server is; the latency panel
therefore also shows the p95 of every other action together.
"""

from __future__ import annotations

from tenure.observability.panels import RATE, PanelSpec, Query, Section

SQS_REQUESTS = "tenure_sqs_requests_total"
SQS_SECONDS = "tenure_sqs_request_duration_seconds"
SQS_LONG_POLLS = "tenure_sqs_long_polls_waiting"
SQS_EXPIRED = "tenure_sqs_messages_expired_total"
SQS_METRICS = (SQS_REQUESTS, SQS_SECONDS, SQS_LONG_POLLS, SQS_EXPIRED)
"""The metrics of `tenure sqs`: the only ones a panel may show without the queue filter, besides
the schema-wide reaper cycle gauges. All but the expired messages' counter carry no queue label;
that one is charted by queue, all queues (like the rest of the row, it ignores ``$queue``)."""
SQS_ROW_TITLE = "SQS API"
NOT_OK = 'outcome!="ok"'
INTERNAL = 'outcome="InternalFailure"'


def _requests(*matchers: str) -> str:
    inner = ",".join(matchers)
    return f"rate({SQS_REQUESTS}{{{inner}}}[{RATE}])" if inner else f"rate({SQS_REQUESTS}[{RATE}])"


def _latency(q: float, by: str, *matchers: str) -> str:
    inner = ",".join(matchers)
    bucket = f"{SQS_SECONDS}_bucket{{{inner}}}" if inner else f"{SQS_SECONDS}_bucket"
    return f"histogram_quantile({q}, sum by ({by}le) (rate({bucket}[{RATE}])))"


def sqs_api_section() -> Section:
    """The row: request rate, errors by shape, error share, latency, long polls."""
    return Section(SQS_ROW_TITLE, [
        PanelSpec(
            "SQS requests by action (/s)",
            "Requests `tenure sqs` answered, by API action (`unknown`: an action outside the"
            " API), summed over replicas; whatever the outcome.",
            [Query(f"sum by (action) ({_requests()})", "{{action}}")],
            unit="reqps",
            width=8,
        ),
        PanelSpec(
            "SQS errors by shape (/s)",
            "Refused or failed requests by SQS error shape (QueueDoesNotExist, AccessDenied,"
            " SignatureDoesNotMatch, ReceiptHandleIsInvalid, ...) and action. InternalFailure"
            " is a server fault (a traceback in the `tenure sqs` log); the others are the"
            " client's.",
            [Query(f"sum by (outcome, action) ({_requests(NOT_OK)})",
                   "{{outcome}} ({{action}})")],
            unit="reqps",
            width=8,
            stacked=True,
        ),
        PanelSpec(
            "SQS error share",
            "Share of all requests answered with an error, and with InternalFailure (server"
            " faults); 0 while requests succeed. Auth errors (403) rising at once for every action: a rotated or wrong"
            " credentials Secret.",
            [
                Query(f"(sum({_requests(NOT_OK)}) or vector(0)) / sum({_requests()})", "errors"),
                Query(f"(sum({_requests(INTERNAL)}) or vector(0)) / sum({_requests()})", "InternalFailure"),
            ],
            unit="percentunit",
            width=8,
        ),
        PanelSpec(
            "SQS latency p95 by action",
            "p95 request latency by action, and p50/p95 of every action but ReceiveMessage"
            " (whose latency includes long-poll waits, up to WaitTimeSeconds).",
            [
                Query(_latency(0.95, "action, "), "{{action}} p95"),
                Query(_latency(0.5, "", 'action!="ReceiveMessage"'), "all but ReceiveMessage p50"),
                Query(_latency(0.95, "", 'action!="ReceiveMessage"'), "all but ReceiveMessage p95"),
            ],
            unit="s",
        ),
        PanelSpec(
            "SQS long polls waiting",
            "ReceiveMessage calls waiting for a message now (WaitTimeSeconds > 0), over all"
            " replicas: idle consumers. Each holds no database connection while it waits.",
            [Query(f"sum({SQS_LONG_POLLS})", "waiting")],
        ),
        PanelSpec(
            "SQS messages expired (/s)",
            "Messages deleted because they outlived their queue's MessageRetentionPeriod, by"
            " queue, summed over replicas (each replica's sweep deletes some). Anything above 0:"
            " consumers fall behind the retention, or nobody reads the queue.",
            [Query(f"sum by (queue) (rate({SQS_EXPIRED}[{RATE}]))", "{{queue}}")],
            unit="reqps",
        ),
    ])
