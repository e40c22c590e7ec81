"""Per-process worker metrics (names and meanings: docs/metrics.md).

Labels are bounded: queue, task and small enums. No job or worker ids.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

STALE_WRITE_OPERATIONS = ("complete", "retry", "dead_letter", "release", "checkpoint", "heartbeat", "effect_succeed",
                          "rate_limited")
"""Values of the ``operation`` label of ``tenure_stale_writes_rejected_total``: the write the
token CAS refused. They match the ``operation`` that ``job_events`` records for the same write."""

RUNTIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


DB_RECONNECT_ROLES = ("claim", "ack", "heartbeat", "reaper", "exporter")
"""The bounded ``role`` label of ``tenure_db_reconnects_total``: the worker's three connections,
the reaper loop's and the exporter's."""


def db_reconnects_counter(registry: CollectorRegistry | None) -> Counter:
    """``tenure_db_reconnects_total{role}``, the one definition every process registers."""
    return Counter("tenure_db_reconnects", "Database connections re-opened after an error "
                   "(a failover moves the primary).", ["role"], registry=registry)


class WorkerMetrics:
    """The worker's metric families, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        qt = ["queue", "task"]
        self.claimed = Counter("tenure_jobs_claimed", "Jobs claimed (delivery attempts).", qt, registry=registry)
        self.completed = Counter("tenure_jobs_completed", "Completions accepted by the token CAS.", qt, registry=registry)
        self.failed = Counter("tenure_jobs_failed", "Handler failures by classified error code.",
                              [*qt, "error_code"], registry=registry)
        self.retried = Counter("tenure_jobs_retried", "Failures rescheduled with backoff.",
                               [*qt, "error_code"], registry=registry)
        self.dead_lettered = Counter("tenure_jobs_dead_lettered", "Failures moved to the dead-letter queue.",
                                     [*qt, "error_code"], registry=registry)
        self.released = Counter("tenure_jobs_released", "Jobs handed back on shutdown (SIGTERM drain).", qt,
                                registry=registry)
        self.deferred = Counter("tenure_jobs_deferred",
                                "Jobs handed back because another live attempt holds their effect's idempotency key.",
                                qt, registry=registry)
        self.rate_limited = Counter("tenure_jobs_rate_limited",
                                    "Jobs handed back without using an attempt by ctx.rate_limited (back-pressure).",
                                    qt, registry=registry)
        self.timeouts = Counter("tenure_job_timeouts", "Attempts that ran past their task's timeout.", qt,
                                registry=registry)
        self.cancelled_running = Counter("tenure_jobs_cancelled_while_running",
                                         "Running jobs whose cancel this worker learned at a heartbeat.", qt,
                                         registry=registry)
        self.periodic_enqueued = Counter("tenure_periodic_enqueued", "Periodic slots this process enqueued.",
                                         ["queue", "schedule"], registry=registry)
        self.periodic_skipped = Counter("tenure_periodic_slots_skipped",
                                        "Missed periodic slots skipped by the bounded catch-up.", ["queue", "schedule"],
                                        registry=registry)
        self.lease_extensions = Counter("tenure_lease_extensions", "Lease renewals accepted by heartbeat.", qt,
                                        registry=registry)
        self.leases_lost = Counter("tenure_leases_lost", "Leases lost (heartbeat rejected, local deadline "
                                   "passed, checkpoint rejected); counted once per attempt, the handler was told.",
                                   qt, registry=registry)
        self.stale_writes = Counter("tenure_stale_writes_rejected", "Writes rejected by the token CAS.",
                                    [*qt, "operation"], registry=registry)
        self.dedup_checks = Counter("tenure_dedup_checks", "Idempotency checks.", [*qt, "source"], registry=registry)
        self.dedup_hits = Counter("tenure_dedup_hits", "Idempotency checks that found an existing job or effect.",
                                  [*qt, "source"], registry=registry)
        self.runtime = Histogram("tenure_job_runtime_seconds", "Handler wall time.", qt,
                                 buckets=RUNTIME_BUCKETS, registry=registry)
        self.wait = Histogram("tenure_job_wait_seconds", "DB time from available_at to claim.", qt,
                              buckets=LATENCY_BUCKETS, registry=registry)
        self.claim_to_start = Histogram("tenure_job_claim_to_start_seconds", "In-process delay from claim to start.",
                                        qt, buckets=LATENCY_BUCKETS, registry=registry)
        self.attempts = Histogram("tenure_job_attempts", "Attempt number at claim.", qt,
                                  buckets=ATTEMPT_BUCKETS, registry=registry)
        self.in_flight = Gauge("tenure_jobs_in_flight", "Handlers running in this process.", qt, registry=registry)
        self.outcomes_unwritten = Gauge(
            "tenure_worker_outcomes_unwritten",
            "Outcomes of finished attempts not yet written to the database; with the jobs in flight "
            "they never exceed the worker's concurrency (the claim loop waits).", registry=registry)
        self.heartbeat_rtt = Histogram("tenure_heartbeat_roundtrip_seconds", "Duration of the heartbeat statement.",
                                       buckets=LATENCY_BUCKETS, registry=registry)
        self.db_reconnects = db_reconnects_counter(registry)
        self.outcomes_in_doubt = Counter(
            "tenure_worker_outcomes_in_doubt", "Acknowledged outcomes missing from the database after a reconnect "
            "(a failover with asynchronous replication lost them): kind completion|effect; resolution rewritten "
            "(written again under the same token) or in_doubt (the job runs again / the effect key is in doubt).",
            ["kind", "resolution"], registry=registry)
        self.heartbeat_timestamp = Gauge("tenure_worker_heartbeat_timestamp_seconds",
                                         "Unix time of the last successful heartbeat loop.", registry=registry)

    def prime_task(self, queue: str, task: str) -> None:
        """Create the (queue, task) series of the event counters at 0, once per pair, so that a
        rate over them reads 0 rather than "no data" until the first event (a dashboard panel or
        alert on leases lost, stale writes or deferrals is empty otherwise). Counters whose extra
        label is open-ended (error_code) are left to their first increment."""
        for counter in (self.claimed, self.completed, self.released, self.deferred, self.rate_limited,
                        self.timeouts, self.cancelled_running, self.lease_extensions, self.leases_lost):
            counter.labels(queue, task)
        for operation in STALE_WRITE_OPERATIONS:
            self.stale_writes.labels(queue, task, operation)
        self.dedup_checks.labels(queue, task, "effect")
        self.dedup_hits.labels(queue, task, "effect")


def observe_many(child: Any, values: Sequence[float]) -> None:
    """``child.observe(v)`` for each value, with one locked increment of the sum and one per
    bucket touched instead of two per value: a claim batch's wait times, a completion batch's
    runtimes (four observations per no-op job were a tenth of its worker CPU).

    Limits: reads prometheus_client's histogram child internals (``_upper_bounds``,
    ``_buckets``, ``_sum``, unchanged since 0.4); a child without them is observed value by
    value. No exemplars. A NaN lands in the first bucket (``observe`` counts it in none)."""
    if not values:
        return
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for v in values:
            child.observe(v)
        return
    counts = [0] * len(bounds)
    last = len(bounds) - 1
    for v in values:
        counts[min(bisect_left(bounds, v), last)] += 1  # first bound >= v, as observe(); +Inf last
    total.inc(sum(values))
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
