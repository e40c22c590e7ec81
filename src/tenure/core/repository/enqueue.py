"""Enqueue one job or a batch (R13 deduplication by idempotency key, R17 in the caller's transaction)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tenure.core import tracing
from tenure.core.errors import JobSpecError
from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import (
    PRIORITY_DEFAULT,
    EnqueueResult,
    JobSpec,
    check_rate_limits_known,
    check_text,
)
from tenure.core.unique import Unique


class EnqueueQueries(RepositoryBase):
    """Insert jobs; every payload is validated before anything is written."""

    def enqueue(self, task: str, payload: Any = None, *, queue: str = "default",
                idempotency_key: str | None = None, delay: float = 0.0, max_attempts: int = 5,
                payload_version: int = 1, correlation_id: str | None = None,
                priority: int = PRIORITY_DEFAULT, flow_key: str | None = None,
                rate_limit: str | None = None, unique: Unique | None = None) -> EnqueueResult:
        """Insert a job (or return the existing one with the same idempotency key, or, with
        ``unique``, the job holding its unique key: docs/unique.md).
        Refuses what :meth:`JobSpec.validate` refuses (JobSpecError) before writing anything, and
        a ``rate_limit`` (``"NAME"`` or ``"NAME:UNITS"``) naming no rate limit, or asking more
        units than its burst. Traced (:mod:`tenure.core.tracing`): a PRODUCER span, whose
        context is stored with the job."""
        spec = JobSpec(task, payload, queue, max_attempts, delay, idempotency_key, priority, flow_key, rate_limit,
                       unique)
        text, base = spec.validated()
        if isinstance(payload_version, bool) or not isinstance(payload_version, int) or payload_version < 1:
            raise JobSpecError(f"payload_version must be a whole number >= 1, got {payload_version!r}")
        if correlation_id is not None:
            check_text("correlation id", correlation_id, name=False)
        rate = spec.rate
        if rate is not None:
            self._check_rates([rate])
        with tracing.producer(queue, task) as span:
            params = {"queue": queue, "task": task, "payload": text, "priority": priority,
                      "payload_version": payload_version, "max_attempts": max_attempts,
                      "delay": float(delay), "idempotency_key": idempotency_key,
                      "correlation_id": correlation_id, "channel": self.channel,
                      "trace_context": span.traceparent, "flow_key": flow_key,
                      "rate_limit": rate[0] if rate else None, "rate_units": rate[1] if rate else 1}
            query = "job_enqueue"
            if unique is not None:
                query = "job_enqueue_unique_update" if unique.updates else "job_enqueue_unique"
                params.update(self._unique_params(base or "", unique))
                if unique.on_conflict == "debounce":
                    params["delay"] = max(float(delay), float(unique.period or 0))
            for attempt in range(5):
                row = self._one(query, params)
                if row is not None:
                    span.sent(int(row["id"]), created=bool(row["created"]))
                    if idempotency_key is not None and row.get("source") == "unique":
                        # The key was claimed for a job the unique key skipped: free it again.
                        self._rows("job_key_release_orphans", {"keys": [idempotency_key]})
                    return EnqueueResult(int(row["id"]), bool(row["created"]), bool(row.get("replaced")))
                # A concurrent enqueue with the same key committed after our snapshot: look again.
                # Past the first miss, the key may be an orphan (its job deleted by hand, not by
                # tenure's prune or purge, which free keys): forget it if no job holds it.
                if attempt >= 1 and idempotency_key is not None:
                    self._rows("job_key_release_orphan", {"key": idempotency_key})
        raise RuntimeError(f"enqueue with idempotency key {idempotency_key!r} (unique: {unique is not None}) found "
                           f"neither a new nor an existing job")

    def enqueue_many(self, jobs: Sequence[JobSpec]) -> int:
        """Insert a batch in one statement; returns how many were new (key duplicates skipped).
        Every job is validated (:meth:`JobSpec.validate`), and its rate limit looked up (as in
        :meth:`enqueue`), before anything is written. A job's unique declaration holds per entry:
        ``skip`` entries are in the one statement (a later entry of the batch with an earlier
        one's key is skipped too), ``replace`` and ``debounce`` entries follow, one statement each,
        in batch order (docs/unique.md).
        Traced: one PRODUCER span per job (a key duplicate's span is marked ``tenure.deduplicated``)."""
        if not jobs:
            return 0
        checked = [j.validated() for j in jobs]
        payloads = [text for text, _ in checked]
        rates = [j.rate for j in jobs]
        self._check_rates(r for r in rates if r is not None)
        updating = [i for i, j in enumerate(jobs) if j.unique is not None and j.unique.updates]
        if updating:
            rest = [j for j in jobs if j.unique is None or not j.unique.updates]
            inserted = self.enqueue_many(rest) if rest else 0
            for i in updating:
                j = jobs[i]
                inserted += self.enqueue(j.task, j.payload, queue=j.queue, idempotency_key=j.idempotency_key,
                                         delay=j.delay, max_attempts=j.max_attempts, priority=j.priority,
                                         flow_key=j.flow_key, rate_limit=j.rate_limit, unique=j.unique).created
            return inserted
        uniques = [self._unique_params(base or "", j.unique) if j.unique is not None else None
                   for j, (_, base) in zip(jobs, checked)]
        spans = [tracing.start_producer(j.queue, j.task) for j in jobs] if tracing.enabled() else []
        row: dict[str, Any] | None = None
        try:
            row = self._one("job_enqueue_many", {
                "queues": [j.queue for j in jobs], "tasks": [j.task for j in jobs],
                "payloads": payloads,
                "max_attempts": [j.max_attempts for j in jobs], "delays": [float(j.delay) for j in jobs],
                "idempotency_keys": [j.idempotency_key for j in jobs],
                "priorities": [j.priority for j in jobs], "flow_keys": [j.flow_key for j in jobs],
                "rate_limits": [r[0] if r else None for r in rates], "rate_units": [r[1] if r else 1 for r in rates],
                "unique_bases": [u["unique_base"] if u else None for u in uniques],
                "unique_periods": [u["unique_period"] if u else None for u in uniques],
                "unique_states": [",".join(u["unique_states"]) if u else None for u in uniques],
                "channel": self.channel,
                "trace_contexts": [s.traceparent for s in spans] or [None] * len(jobs)})
            orphans = sorted({j.idempotency_key for j in jobs if j.unique is not None and j.idempotency_key})
            if orphans:  # keys claimed for jobs a unique key skipped
                self._rows("job_key_release_orphans", {"keys": orphans})
        except BaseException as exc:
            for span in spans:
                span.failed(exc)
            raise
        finally:
            if spans:
                self._name_traced(spans, row)
        return int(row["inserted"]) if row else 0

    @staticmethod
    def _unique_params(base: str, unique: Unique) -> dict[str, Any]:
        """The unique key's query parameters: its payload-derived hash (``base``), the period that
        buckets it by time (None: none), the states it covers."""
        return {"unique_base": base, "unique_period": unique.bucket_period,
                "unique_states": list(unique.states), "debounce": unique.on_conflict == "debounce"}

    def enqueue_rate_limits(self, names: Iterable[str]) -> dict[str, int]:
        """The burst of each rate limit among ``names`` that exists (an unknown name is absent)."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        return {str(r["name"]): int(r["burst"]) for r in self._rows("job_rate_limit_list", {"names": wanted})}

    def _check_rates(self, refs: Iterable[tuple[str, int]]) -> None:
        """JobSpecError for a reference to an unknown rate limit or more units than its burst.
        Looked up just before the insert: a limit deleted in between limits nothing (the claim
        skips unknown names), so no lock is worth more than this."""
        refs = list(refs)
        if refs:
            check_rate_limits_known(refs, self.enqueue_rate_limits(name for name, _ in refs))

    @staticmethod
    def _name_traced(spans: list[tracing.ProducerSpan], row: dict[str, Any] | None) -> None:
        """Give each batch span its job id (found by its own trace context), then end them all."""
        by_context = dict(zip((row or {}).get("traced_contexts") or [], (row or {}).get("traced_ids") or []))
        for span in spans:
            job_id = by_context.get(span.traceparent) if span.traceparent else None
            if job_id is not None:
                span.sent(int(job_id))
            elif row is not None:
                span.deduplicated()  # a key duplicate: the existing job's id is not returned
            span.end()
