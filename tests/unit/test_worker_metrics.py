"""WorkerMetrics.prime_task: a queue/task's event counters read 0, not "no data", before their first event."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tenure.worker.metrics import STALE_WRITE_OPERATIONS, WorkerMetrics


def test_primed_task_serves_zero_valued_event_counters() -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    labels = {"queue": "emails", "task": "send"}
    assert registry.get_sample_value("tenure_leases_lost_total", labels) is None
    metrics.prime_task("emails", "send")
    metrics.prime_task("emails", "send")  # idempotent
    for name in ("tenure_leases_lost_total", "tenure_jobs_released_total", "tenure_jobs_deferred_total",
                 "tenure_lease_extensions_total", "tenure_job_timeouts_total"):
        assert registry.get_sample_value(name, labels) == 0.0, name
    for op in STALE_WRITE_OPERATIONS:
        assert registry.get_sample_value("tenure_stale_writes_rejected_total", {**labels, "operation": op}) == 0.0
    assert registry.get_sample_value("tenure_dedup_checks_total", {**labels, "source": "effect"}) == 0.0
    # Open-ended labels (error_code) are not invented.
    assert not [s for m in registry.collect() if m.name == "tenure_jobs_failed" for s in m.samples]
