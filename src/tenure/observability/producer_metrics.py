"""Enqueue-time dedup counters for producers (processes that call ``tenure.enqueue``).

They live in the default prometheus-client registry, so a producer that already serves
/metrics exposes them with no extra code: ``tenure_dedup_checks_total{source="enqueue"}`` and
``tenure_dedup_hits_total{source="enqueue"}``. Worker processes use their own registry.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter

_lock = threading.Lock()
_counters: tuple[Counter, Counter] | None = None


def _get(registry: CollectorRegistry = REGISTRY) -> tuple[Counter, Counter]:
    global _counters
    with _lock:
        if _counters is None:
            labels = ["queue", "task", "source"]
            _counters = (Counter("tenure_dedup_checks", "Idempotency checks.", labels, registry=registry),
                         Counter("tenure_dedup_hits", "Idempotency checks that found an existing job or effect.",
                                 labels, registry=registry))
        return _counters


def count_enqueue_dedup(queue: str, task: str, *, hit: bool) -> None:
    checks, hits = _get()
    checks.labels(queue, task, "enqueue").inc()
    if hit:
        hits.labels(queue, task, "enqueue").inc()
