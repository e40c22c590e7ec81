"""WorkerMetrics.prime_task: a queue/task's event counters read 0, not "no data", before their first event;
observe_many: a batch of observations reads exactly as the same values observed one by one."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Histogram

from tenure.worker.metrics import LATENCY_BUCKETS, RUNTIME_BUCKETS, STALE_WRITE_OPERATIONS, WorkerMetrics, observe_many


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


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for m in registry.collect() for s in m.samples if not s.name.endswith("_created")]


def test_observe_many_equals_one_by_one_on_every_bucket_edge() -> None:
    rng = random.Random(13)
    for buckets in (LATENCY_BUCKETS, RUNTIME_BUCKETS):
        edges = [b for b in buckets] + [-1.0, 0.0, 1e12]
        values = [rng.choice([*edges, rng.random() * 4000, rng.random()]) for _ in range(2000)]
        one, many = CollectorRegistry(), CollectorRegistry()
        h_one = Histogram("h_seconds", "h", ["queue"], buckets=buckets, registry=one)
        h_many = Histogram("h_seconds", "h", ["queue"], buckets=buckets, registry=many)
        for v in values:
            h_one.labels("q").observe(v)
        observe_many(h_many.labels("q"), values[:700])
        observe_many(h_many.labels("q"), values[700:])
        observe_many(h_many.labels("q"), [])
        exact, summed = _samples(many), _samples(one)
        assert [s for s in exact if not s[0].endswith("_sum")] == [s for s in summed if not s[0].endswith("_sum")]
        assert [s[2] for s in exact if s[0].endswith("_sum")] == pytest.approx(
            [s[2] for s in summed if s[0].endswith("_sum")], rel=1e-12)  # summed in another order


def test_observe_many_falls_back_to_observe_without_the_internals() -> None:
    seen: list[float] = []
    observe_many(SimpleNamespace(observe=seen.append), [0.5, 2.0])
    assert seen == [0.5, 2.0]
