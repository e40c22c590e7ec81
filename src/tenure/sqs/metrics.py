"""The metrics of `tenure sqs`, served on its own ``/metrics``: requests by action and outcome,
their latency, and the long polls waiting. Labels are bounded: an action outside the API is
counted as ``unknown``, an outcome is ``ok`` or an SQS error shape."""

from __future__ import annotations

from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20.5)


class SqsMetrics:
    def __init__(self, registry: CollectorRegistry, actions: Collection[str], waiting: Callable[[], int]) -> None:
        self.registry = registry
        self.actions = frozenset(actions)
        self.requests = Counter("tenure_sqs_requests_total", "SQS API requests by action and outcome "
                                "(ok or the SQS error shape).", ["action", "outcome"], registry=registry)
        self.seconds = Histogram("tenure_sqs_request_duration_seconds", "SQS API request latency in seconds, "
                                 "long polls included.", ["action"], buckets=_BUCKETS, registry=registry)
        self.long_polls = Gauge("tenure_sqs_long_polls_waiting", "ReceiveMessage long polls waiting for a "
                                "message now.", registry=registry)
        self.long_polls.set_function(lambda: float(waiting()))
        self.expired = Counter("tenure_sqs_messages_expired_total", "SQS messages deleted by this replica because "
                               "they outlived their queue's MessageRetentionPeriod.", ["queue"], registry=registry)

    def observe(self, action: str, outcome: str, seconds: float) -> None:
        label = action if action in self.actions else "unknown"
        self.requests.labels(label, outcome).inc()
        self.seconds.labels(label).observe(seconds)
