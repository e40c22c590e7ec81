"""Queue-level metrics from SQL (docs/metrics.md), one collector for `tenure exporter` and the
reaper loop. It reads the same ``queue_stats`` query as `tenure stats`, so both agree.

It also serves the reaper's figures from the database, so they exist wherever a reaper runs
without a metrics port (a Kubernetes CronJob pod runs one cycle and exits):
``tenure_queue_reaps_total`` from the audited reap events (every reaper counted once, by
outcome and by the owner's status when reaped) and ``tenure_reaper_*`` last-cycle figures
from the ``reaper_cycles`` row every reaper cycle updates.

Flow control (docs/flow.md): blocked jobs by reason and keys at their limit (read with the
queue figures), the oldest job nothing holds back on each flow queue (for TenureFlowStarvation),
and each rate limit's tokens and pause (``flow_rate_list``: the rate limits' rows, not the jobs).

Each scrape runs the same few statements (partial indexes only); results are cached for
``min_interval`` seconds so that several scrapers cannot load the database. When the database is unreachable the
collector still answers, with ``tenure_exporter_errors_total`` raised and no queue series.

Schema skew: the exporter reads the schema through this code's repository, so it serves
figures only as far as its queries match the schema. It never refuses a schema at another
version: ``tenure_exporter_schema_skew`` is the schema's version minus the versions this code
knows (0: in step; above 0: migrated by newer code, e.g. another JobQueue's newer image;
below 0: a migration is pending), and a query the schema no longer answers counts as a failed
collection. On Kubernetes the operator keeps the exporter from running ahead of the schema
(it is held until its image's migration Job succeeded), so a skew above 0 is the case to watch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import psycopg
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tenure.core.db import Connection, connect
from tenure.core.errors import first_line
from tenure.core.queries import migrations
from tenure.core.repository import FlowStore, ReadStore, ReapingStore, Repository, SchemaStore
from tenure.core.stats import QueueStats

log = logging.getLogger("tenure.exporter")


class ExporterStore(SchemaStore, ReadStore, ReapingStore, FlowStore, Protocol):
    """What a scrape reads: the schema version, queue figures (reads area), reap counts and
    cycles, and the rate limits' buckets (flow area)."""
MIN_INTERVAL_DEFAULT = 5.0
COMPLETED_INTERVAL_DEFAULT = 60.0


class QueueCollector(Collector):
    """A Prometheus collector over ``queue_stats``."""

    def __init__(self, dsn: str, schema: str, *, min_interval: float = MIN_INTERVAL_DEFAULT,
                 completed_interval: float | None = None,
                 on_reconnect: Callable[[], None] | None = None) -> None:
        """``min_interval``: seconds a collection is reused; ``completed_interval``: seconds the
        completed counts (the one part that scans an index of every completed job) are reused
        (default: the larger of ``min_interval`` and 60 s); ``on_reconnect``: called when a
        database error drops the connection, which the next collection re-opens (the CLI counts
        it in ``tenure_db_reconnects_total{role="exporter"}``, as the worker counts its own)."""
        self.dsn, self.schema, self.min_interval = dsn, schema, min_interval
        self.completed_interval = (max(min_interval, COMPLETED_INTERVAL_DEFAULT)
                                   if completed_interval is None else completed_interval)
        self._completed: dict[str, int] | None = None
        self._completed_at = 0.0
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._cached: list[QueueStats] | None = None
        self._reaps: list[dict[str, Any]] = []
        self._cycle: dict[str, Any] | None = None
        self._rates: list[dict[str, Any]] = []
        self._cached_at = 0.0
        #: Schema version minus the versions this code knows, from the last collection.
        self.schema_skew: int | None = None
        self.last_success = 0.0
        self.errors = 0
        self._on_reconnect = on_reconnect

    def read(self) -> list[QueueStats] | None:
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached_at < self.min_interval:
                return self._cached
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = connect(self.dsn, application_name="tenure-exporter")
                repo: ExporterStore = Repository(self._conn, self.schema)
                skew = repo.schema_version() - len(migrations())
                if skew != self.schema_skew and skew != 0:
                    log.warning("schema %r is %d version(s) %s this exporter's code", self.schema,
                                abs(skew), "ahead of" if skew > 0 else "behind")
                self.schema_skew = skew
                if self._completed is None or now - self._completed_at >= self.completed_interval:
                    self._completed, self._completed_at = repo.completed_counts(), now
                stats = repo.queue_stats(completed=self._completed)
                reaps, cycle, rates = repo.reap_counts(), repo.reaper_cycles(), repo.flow_rate_list()
            except psycopg.Error as exc:
                self.errors += 1
                log.warning("queue stats failed: %s", first_line(exc))
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                self._cached = None
                if self._on_reconnect is not None:
                    self._on_reconnect()
                return None
            self._cached, self._cached_at, self.last_success = stats, now, time.time()
            self._reaps, self._cycle = [dict(r) for r in reaps], (dict(cycle) if cycle else None)
            self._rates = [dict(r) for r in rates]
            return stats

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def _reaper_families(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Reaper figures from the database (read with the queue stats, same cache)."""
        reaps = CounterMetricFamily(
            "tenure_queue_reaps", "Jobs reaped (audited reap events of every reaper), by outcome "
            "and the owner's status when reaped.", labels=["queue", "outcome", "owner_status"])
        for row in self._reaps:
            reaps.add_metric([row["queue"], row["outcome"], row["owner_status"]], row["reaped"])
        yield reaps
        if self._cycle is None:
            return  # no reaper has run on this schema yet
        cycles = CounterMetricFamily("tenure_reaper_cycles", "Reaper cycles finished (any reaper).")
        cycles.add_metric([], self._cycle["cycles"])
        yield cycles
        for name, help_, key in (
            ("tenure_reaper_last_cycle_timestamp_seconds",
             "Unix time (database clock) the last reaper cycle finished.", "last_finished_epoch"),
            ("tenure_reaper_last_cycle_duration_seconds", "Duration of the last reaper cycle.",
             "last_seconds"),
            ("tenure_reaper_last_cycle_reaped_jobs", "Jobs the last reaper cycle recovered.",
             "last_reaped"),
        ):
            family = GaugeMetricFamily(name, help_)
            family.add_metric([], float(self._cycle[key]))
            yield family

    def _flow_families(self, stats: list[QueueStats]) -> Iterator[GaugeMetricFamily]:
        """Flow control: blocked jobs by reason, keys at their limit, the oldest job nothing
        holds back (flow queues only), and each rate limit's tokens and pause (docs/metrics.md)."""
        blocked = GaugeMetricFamily("tenure_flow_blocked_jobs", "Runnable jobs flow control holds back, by "
                                    "reason (concurrency: their key's running limit; backpressure: their "
                                    "rate limit's bucket is paused; rate: the bucket is short of tokens).",
                                    labels=["queue", "reason"])
        at_limit = GaugeMetricFamily("tenure_flow_keys_at_limit", "Flow keys with their running limit "
                                     "reached.", labels=["queue"])
        wait = GaugeMetricFamily("tenure_flow_oldest_unblocked_wait_seconds", "Wait of the oldest runnable "
                                 "job nothing holds back, on a flow queue (0: none).", labels=["queue"])
        job = GaugeMetricFamily("tenure_flow_oldest_unblocked_job_id", "Id of that job (0: none): while it "
                                "stays the same, no claim took it.", labels=["queue"])
        for s in stats:
            for reason, value in (("concurrency", s.blocked_concurrency), ("backpressure", s.blocked_backpressure),
                                  ("rate", s.blocked_rate)):
                blocked.add_metric([s.queue, reason], value)
            at_limit.add_metric([s.queue], s.keys_at_limit)
            if s.oldest_unblocked_wait_seconds is not None:
                wait.add_metric([s.queue], s.oldest_unblocked_wait_seconds)
                job.add_metric([s.queue], float(s.oldest_unblocked_job_id or 0))
        tokens = GaugeMetricFamily("tenure_rate_limit_tokens", "Tokens now in the rate limit's shared "
                                   "bucket (a per-key limit: the fewest of its buckets'; 0 while paused).",
                                   labels=["limit"])
        paused = GaugeMetricFamily("tenure_rate_limit_paused", "1 while a bucket of the rate limit is paused "
                                   "by a handler's back-pressure, else 0.", labels=["limit"])
        for r in self._rates:
            tokens.add_metric([r["name"]], float(r["tokens"]))
            paused.add_metric([r["name"]], 1.0 if r["paused_buckets"] else 0.0)
        yield from (blocked, at_limit, wait, job, tokens, paused)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self.read()
        if stats is not None:
            jobs = GaugeMetricFamily("tenure_queue_jobs", "Jobs by state.", labels=["queue", "state"])
            gauges = {
                "running_expired": GaugeMetricFamily("tenure_queue_running_expired_leases",
                                                     "Running jobs whose lease has expired.", labels=["queue"]),
                "oldest_ready_age_seconds": GaugeMetricFamily("tenure_queue_oldest_ready_age_seconds",
                                                              "Age of the oldest ready job.", labels=["queue"]),
                "oldest_running_age_seconds": GaugeMetricFamily("tenure_queue_oldest_running_age_seconds",
                                                                "Age of the oldest running job.", labels=["queue"]),
                "heartbeat_lag_max_seconds": GaugeMetricFamily("tenure_queue_heartbeat_lag_max_seconds",
                                                               "Max heartbeat lag of running jobs.", labels=["queue"]),
                "heartbeat_lag_p95_seconds": GaugeMetricFamily("tenure_queue_heartbeat_lag_p95_seconds",
                                                               "p95 heartbeat lag of running jobs.", labels=["queue"]),
                "failed": GaugeMetricFamily("tenure_queue_dead_letter_jobs", "Dead-letter queue depth.",
                                            labels=["queue"]),
                "redelivered": GaugeMetricFamily("tenure_queue_redelivered_jobs",
                                                 "Non-terminal jobs on attempt > 1.", labels=["queue"]),
                "live_workers": GaugeMetricFamily("tenure_queue_live_workers", "Live workers in the registry.",
                                                  labels=["queue"]),
                "paused": GaugeMetricFamily("tenure_queue_paused", "1 while the queue is paused (no claims).",
                                            labels=["queue"]),
            }
            limit = GaugeMetricFamily("tenure_queue_max_running", "Global running limit of the queue "
                                      "(absent: none).", labels=["queue"])
            reaped = CounterMetricFamily("tenure_queue_reaped_jobs", "Jobs recovered by the reaper.",
                                         labels=["queue"])
            for s in stats:
                for state, value in (("waiting", s.waiting), ("ready", s.ready), ("blocked", s.blocked), ("scheduled", s.scheduled),
                                     ("running", s.running),
                                     ("completed", s.completed), ("failed", s.failed),
                                     ("cancelled", s.cancelled)):
                    jobs.add_metric([s.queue, state], value)
                for attr, family in gauges.items():
                    family.add_metric([s.queue], float(getattr(s, attr)))
                reaped.add_metric([s.queue], s.reaped_total)
                if s.max_running is not None:
                    limit.add_metric([s.queue], s.max_running)
            yield jobs
            yield limit
            yield from gauges.values()
            yield reaped
            yield from self._flow_families(stats)
            yield from self._reaper_families()
        last = GaugeMetricFamily("tenure_exporter_last_success_timestamp_seconds",
                                 "Unix time of the last successful collection.")
        last.add_metric([], self.last_success)
        yield last
        errors = CounterMetricFamily("tenure_exporter_errors", "Failed collections.")
        errors.add_metric([], self.errors)
        yield errors
        if self.schema_skew is not None:
            skew = GaugeMetricFamily("tenure_exporter_schema_skew", "Schema version minus the "
                                     "versions this exporter's code knows (0: in step).")
            skew.add_metric([], float(self.schema_skew))
            yield skew
