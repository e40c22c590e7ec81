"""The chaos harness: real worker and reaper processes, a producer, and seeded faults.

One run: migrate a fresh schema, start ``workers`` worker processes (``tenure worker --app
tenure.chaos.tasks:app``; worker 0 reaches the database through :class:`TcpProxy`, workers 1
and 2 run with their wall clocks skewed by ``+skew``/``-skew`` seconds), ``reapers`` reaper
processes, and a producer thread that spreads ``jobs`` jobs over ``duration`` seconds; a second
one enqueues ``workflows`` random workflows, ``batches`` batches with callbacks and racing unique
jobs over ``unique_keys`` keys on ``WF_QUEUE`` during the first half (issue 39). Faults,
chosen by ``seed``:

- job-level markers in the payload (kill -9 before the effect, after the effect and before the
  acknowledgement, during the acknowledgement; a handler that hangs forever), fired by the task
  once per job, on the first attempt that reaches them;
- process-level faults fired as the producer passes seeded points: SIGSTOP of a worker for
  longer than the lease, then SIGCONT; a partition of worker 0 (``drop`` or ``blackhole``) for
  longer than the lease; a PostgreSQL restart (only when the harness owns the embedded server);
  a queue pause; a cancel; slow completions (``job_history`` locked ACCESS EXCLUSIVE as long as a
  SIGSTOP, so every acknowledgement waits: issue 40);
- ``restart_in_gap`` markers (harness-owned server only): after a job's guarded body and before
  its ``eff.succeeded()``, the task asks the harness for ``pg_ctl restart -m fast`` (through a
  file in a control folder) and waits 3 s, the gap where a restart once ran an effect twice.

A worker that dies is replaced at once (a Deployment would); a worker holding two hung handlers
is restarted gracefully (a liveness probe would). When every job is terminal, everything is
stopped and the invariants of :mod:`tenure.chaos.invariants` (and ``invariants_control``,
``invariants_flow``, ``invariants_workflow``) are checked from the database.

Limits: one host (signals, loopback proxy); the proxy partitions one worker, not the reapers;
a PostgreSQL restart needs the harness's own embedded server; clock skew uses libfaketime when
present (``scripts/tools/faketime.sh``), else an offset injected into ``time.time`` of the
worker (the leases never read either).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from tenure.chaos import QUEUE, TIMED_TASK, WF_QUEUE
from tenure.chaos.config import POLL_INTERVAL, RATE_LIMIT_NAME, ChaosConfig
from tenure.chaos.faults import FaultPlan, Injector, make_plan, skew_for, skew_method, upstream, worker_env
from tenure.chaos.fleet import Fleet
from tenure.chaos.invariants import Verdict, check_all
from tenure.chaos.invariants_control import check_job_control
from tenure.chaos.invariants_flow import RateLimit, Service, check_flow, check_keys_served, check_rate
from tenure.chaos.invariants_workflow import check_extras, summary_lines
from tenure.chaos.journal import Journal
from tenure.chaos.loop import Cadence, Hooks, Progress, run_until_settled
from tenure.chaos.producer import ExtrasProducer, Pace, Producer, extras_for
from tenure.chaos.proxy import TcpProxy
from tenure.chaos.store import ChaosStore
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.repository import JobSpec, Repository
from tenure.flow import set_rate_limit

log = logging.getLogger("tenure.chaos")

CADENCE = Cadence(tick=0.1, sample=0.2, progress=0.5, line=5.0)
HUNG_CHECK_INTERVAL = 1.0
"""Seconds between two looks for workers to recycle."""
BATCH_MAX = 500


@dataclass
class ChaosReport:
    """What a run measured; ``ok`` is True when every invariant held."""

    ok: bool
    config: dict[str, Any]
    seed: int
    schema: str
    database: str
    wall_seconds: float
    clock_skew: dict[str, Any]
    skipped: list[str]
    violations: dict[str, list[str]]
    figures: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)



class ChaosHarness:
    """Runs one chaos run (:meth:`run_once`) and returns its :class:`ChaosReport`.

    ``dsn`` None: the harness starts its own embedded PostgreSQL in ``datadir`` (a temporary
    folder when None) and may restart it. ``schema`` None: a fresh ``chaos_<hex>`` schema,
    dropped afterwards unless ``keep``. The run's parts: a :class:`Journal`, a :class:`Fleet`,
    a :class:`Producer` and an :class:`Injector`, all drawing on one RNG from the seed.
    """

    def __init__(self, config: ChaosConfig, *, dsn: str | None = None, schema: str | None = None,
                 datadir: Path | None = None, keep: bool = False, log_dir: Path | None = None,
                 progress: bool = False) -> None:
        config.validate()
        self.config = config
        self.given_dsn = dsn
        self.schema = schema or f"chaos_{uuid.uuid4().hex[:10]}"
        self.datadir = datadir
        self.keep = keep
        self.log_dir = log_dir
        self.server: EmbeddedServer | None = None
        self.dsn = ""
        self.proxy: TcpProxy | None = None
        self.rng = config.rng()
        self.skipped: list[str] = []
        self.journal = Journal(self.schema, show_progress=progress)
        self._stop = threading.Event()
        self._own_tmp: Path | None = None
        self._control = Path(tempfile.mkdtemp(prefix="tenure-chaos-control-"))
        """Where ``restart_in_gap`` tasks drop their restart requests."""

    def _setup_database(self) -> None:
        if self.given_dsn:
            self.dsn = self.given_dsn
        else:
            if self.datadir is None:
                self._own_tmp = Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
                self.datadir = self._own_tmp / "pgdata"
            self.server = ensure_server(self.datadir)
            self.dsn = self.server.dsn
        with connect(self.dsn, application_name="tenure-chaos-setup") as conn:
            repo = Repository(conn, self.schema)
            repo.migrate()
            ChaosStore(conn, self.schema).setup()
            if self.config.flow_keys and self.config.per_key_running:
                repo.flow_per_key_set(QUEUE, self.config.per_key_running, requested_by="tenure-chaos")
            if self.config.rate_per_second:
                set_rate_limit(conn, RATE_LIMIT_NAME, self.config.rate_per_second, burst=self.config.burst,
                               schema=self.schema, requested_by="tenure-chaos")
        self.journal.attach(self.dsn)
        self.journal.measure_offset()

    def _plan(self) -> FaultPlan:
        """The fault plan for what this database allows; starts the proxy when partitions are planned."""
        counts = self.config.counts()
        target = upstream(self.dsn)
        can_partition, can_restart = target is not None, self.server is not None
        if not can_partition and counts["partitions"]:
            self.skipped.append("partition: the database URL is not a TCP host the proxy can front")
        if not can_restart and counts["pg_restarts"]:
            self.skipped.append("pg_restart: only with the harness's own embedded server (no --database-url)")
        plan = make_plan(self.config, can_partition=can_partition, can_restart=can_restart, rng=self.rng)
        if target is not None and counts["partitions"]:
            self.proxy = TcpProxy(*target)
            self.proxy.start()
        return plan

    def _producer(self, plan: FaultPlan) -> Producer:
        c = self.config

        def job(n: int) -> JobSpec:
            marker = plan.markers.get(n)
            return JobSpec(task=TIMED_TASK if marker == "overrun" else "chaos.job", queue=QUEUE,
                           max_attempts=c.max_attempts, idempotency_key=f"chaos-job:{n}",
                           flow_key=f"chaos-key:{n % c.flow_keys}" if c.flow_keys else None,
                           rate_limit=RATE_LIMIT_NAME if c.rate_per_second else None,
                           payload={"n": n, "work_ms": round(plan.work_ms[n], 1),
                                    **({"fault": marker} if marker is not None else {})})

        pace = Pace(due=lambda elapsed: min(c.jobs, int(elapsed / c.duration * c.jobs) + 1),
                    over=lambda enqueued: enqueued >= c.jobs, idle=min(0.05, c.duration / c.jobs),
                    retry_on=psycopg.OperationalError, retry_wait=0.5, batch_max=BATCH_MAX)
        return Producer(self.dsn, self.schema, pace=pace, job=job, stop=self._stop)

    def _extras(self) -> ExtrasProducer:
        """The workflows, batches and unique bursts (issue 39), due over the first half of production,
        drawn from a generator seeded by the run's RNG (after the fault plan)."""
        return extras_for(self.config, self.dsn, self.schema, span=self.config.duration / 2, rng=self.rng,
                          stop=self._stop)

    def run_once(self) -> ChaosReport:
        """One full run; always stops every process it started."""
        c = self.config
        began = time.monotonic()
        self._setup_database()
        plan = self._plan()
        method = skew_method()
        control_dir = self._control if self.server is not None else None
        fleet = Fleet(c, self.journal, dsn=self.dsn, schema=self.schema, log_dir=self.log_dir,
                      extra_env=lambda slot: worker_env(c, slot, dsn=self.dsn, proxy=self.proxy,
                                                        control_dir=control_dir))
        try:
            fleet.start()
            for slot in range(min(c.workers, 3)):
                if skew_for(c, slot):
                    self.journal.record("clock_skew", None, self.journal.db_time(), skew_seconds=skew_for(c, slot),
                                        slot=slot, method=method)
            producer = self._producer(plan)
            extras = self._extras()
            injector = Injector(c, plan, journal=self.journal, fleet=fleet, rng=self.rng, dsn=self.dsn,
                                schema=self.schema, server=self.server, proxy=self.proxy, control_dir=self._control)
            producer.start()
            extras.start()
            run_until_settled(fleet=fleet, journal=self.journal, cadence=CADENCE,
                              hooks=self._hooks(producer, extras, injector, fleet), settle_timeout=c.settle_timeout,
                              prefix="chaos")
        finally:
            self._stop.set()
            self._shutdown(fleet)
        run_end = self.journal.db_time()
        report = self._verify(run_end, time.monotonic() - began, method, extras.counts)
        self._cleanup()
        return report

    def _hooks(self, producer: Producer, extras: ExtrasProducer, injector: Injector, fleet: Fleet) -> Hooks:
        c = self.config
        next_hung = 0.0

        def step(now: float) -> None:
            injector.serve_restart_requests()
            for source in (producer, extras):
                if source.error is not None:
                    raise RuntimeError(f"producer failed: {source.error}") from source.error
            injector.step(now, producer.enqueued)

        def recycle(store: ChaosStore, now: float) -> None:
            nonlocal next_hung
            if now >= next_hung:
                fleet.recycle_hung(store)
                next_hung = now + HUNG_CHECK_INTERVAL
            if c.unique_keys:
                store.unique_sample()

        def line(prog: Progress) -> str:
            return (f"chaos: enqueued {producer.enqueued}/{c.jobs}, terminal {prog['terminal']}, "
                    f"running {prog['running']}, pending {prog['pending']}, faults left {injector.left}")

        return Hooks(step=step, quiet=lambda: not producer.is_alive() and not extras.is_alive() and injector.finished,
                     settled=lambda prog: bool(prog["terminal"] >= c.jobs), line=line, every_tick=recycle,
                     history_locked=lambda: injector.history_locked, drain=(WF_QUEUE,))

    def _shutdown(self, fleet: Fleet) -> None:
        fleet.shutdown()
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None and not self.server.is_running():
            self.server.start()
        self.journal.flush()

    def _verify(self, run_end: float, wall: float, skew_method: str, enqueued: dict[str, int]) -> ChaosReport:
        c = self.config
        store = self.journal.reach("the database to check the invariants", attempts=50, wait=0.2)
        self.journal.flush()
        jobs = store.jobs_summary(QUEUE)
        reaps = store.reaps(QUEUE)
        faults = store.faults()
        events = store.event_counts(QUEUE)
        offsets = store.clock_offsets()
        pause_claims = {int(f["id"]): store.claims_between(QUEUE, float(f["started_at"]), float(f["ended_at"]))
                        for f in faults if f["kind"] == "queue_pause" and f["ended_at"] is not None}
        timeout_jobs = store.timeout_job_ids(QUEUE)
        verdict: Verdict = check_all(jobs=jobs, reaps=reaps, faults=faults, events=events, planned=c.jobs,
                                     timing=c.timing(), run_end=run_end, capacity=store.capacity_samples())
        check_job_control(verdict, jobs=jobs, faults=faults, reaps=reaps, pause_claims=pause_claims,
                          timeout_jobs=timeout_jobs)
        check_flow(verdict, store.flow_samples(), per_key_running=c.per_key_running if c.flow_keys else 0)
        self._check_rates_and_keys(verdict, store.attempts(QUEUE), faults, run_end)
        check_extras(verdict, store, faults=faults, enqueued=enqueued)
        if self.proxy is not None:
            verdict.figures["proxy_connections_dropped"] = self.proxy.connections_dropped
        skew = {"method": skew_method, "requested_seconds": c.skew,
                "observed_offsets_by_pid": {str(r["pid"]): round(float(r["offset_seconds"]), 1) for r in offsets}}
        database = "embedded (owned by the harness)" if self.server is not None else "given by --database-url"
        return ChaosReport(ok=verdict.ok, config={**asdict(c), "fault_counts": c.counts()}, seed=c.seed,
                           schema=self.schema, database=database, wall_seconds=round(wall, 1), clock_skew=skew,
                           skipped=self.skipped, violations=verdict.violations, figures=verdict.figures)

    def _check_rates_and_keys(self, verdict: Verdict, attempts: list[dict[str, Any]], faults: list[dict[str, Any]],
                              run_end: float) -> None:
        """``rate_within_limit`` and ``keys_served`` over every attempt of the run."""
        c = self.config
        limit = RateLimit(RATE_LIMIT_NAME, c.rate_per_second, c.burst) if c.rate_per_second else None
        check_rate(verdict, attempts, limit=limit, every_job=True)
        service = Service(keys=c.flow_keys or 1, per_key_running=c.per_key_running if c.flow_keys else 0,
                          slots=c.workers * c.concurrency, work_max=c.work_ms_max / 1000, poll=POLL_INTERVAL,
                          margin=c.recovery_margin, per_second=c.rate_per_second)
        check_keys_served(verdict, attempts, faults, service=service, timing=c.timing(), run_end=run_end)

    def _cleanup(self) -> None:
        problem = self.journal.close(drop_schema=not self.keep)
        if problem is not None:
            log.warning("could not drop schema %s: %s", self.schema, problem)
        shutil.rmtree(self._control, ignore_errors=True)
        if self.server is not None and not self.keep:
            self.server.stop("immediate")
            if self._own_tmp is not None:
                shutil.rmtree(self._own_tmp, ignore_errors=True)


def _capacity_line(cap: dict[str, Any]) -> str:
    return (f"{cap.get('peak_held')} vs {cap.get('concurrency')} ({cap.get('peak_held_during_slow_completions')} in "
            f"{cap.get('samples_during_slow_completions', 0)} samples while locked); "
            f"{cap.get('samples_above', 0)} sample(s) above, {sum((cap.get('excused') or {}).values())} excused")


def _flow_line(flow: dict[str, Any]) -> str:
    if not flow.get("per_key_running"):
        return "no per-key limit"
    return (f"{flow.get('peak_running_per_key')} ({flow.get('peak_live_per_key')}) vs {flow['per_key_running']}; "
            f"{flow.get('samples_at_limit', 0)} of {flow.get('samples', 0)} samples at the limit, "
            f"{flow.get('samples_above', 0)} above")


def _rate_line(rate: dict[str, Any]) -> str:
    if not rate.get("limit"):
        return "no rate limit"
    return (f"{rate.get('peak_units_in_window')} vs {rate.get('allowed_per_window'):g} "
            f"({rate['per_second']:g}/s + burst {rate['burst']}); {rate.get('starts')} starts "
            f"({rate.get('reaped_starts')} reaped), {rate.get('starts_leaving_bucket_dry')} left the bucket dry, "
            f"{rate.get('windows_above', 0)} window(s) above")


def _keys_line(keys: dict[str, Any]) -> str:
    wait = keys.get("wait_seconds") or {}
    return (f"{wait.get('p50')} / {wait.get('p99')} / {wait.get('max')} s (bound {keys.get('bound_seconds')}s, "
            f"{keys.get('waits', 0)} waits over {keys.get('keys', 0)} keys; worst key {keys.get('worst_key')!r}, "
            f"{keys.get('max_wait_before_excuses')}s before fault excuses)")


def format_report(report: ChaosReport) -> str:
    """The human-readable table printed at the end of a run."""
    f = report.figures
    rec = f.get("recovery_seconds_killed", {})
    allrec = f.get("recovery_seconds_all_faults", {})
    lines: list[tuple[str, str]] = [
        ("seed / schema", f"{report.seed} / {report.schema} ({report.database})"),
        ("wall time", f"{report.wall_seconds}s"),
        ("jobs planned / completed / DLQ", f"{f.get('jobs_planned')} / {f.get('jobs_completed')} / "
                                           f"{f.get('jobs_dead_lettered')} {f.get('dead_letter_causes') or ''}"),
        ("attempts (claims) / redelivered jobs", f"{f.get('attempts')} / {f.get('redelivered_jobs')}"),
        ("cancels: running revoked / pending / lost race",
         " / ".join(str((f.get("cancels") or {}).get(k, 0)) for k in ("revoked_running", "cancelled_pending",
                                                                       "lost_race"))),
        ("queue pauses / claims while paused", f"{(f.get('queue_pauses') or {}).get('pauses', 0)} / "
                                               f"{(f.get('queue_pauses') or {}).get('claims_while_paused', 0)}"),
        ("timeouts: overruns fired / jobs retried as task_timeout",
         f"{(f.get('task_timeouts') or {}).get('overruns_fired', 0)} / "
         f"{(f.get('task_timeouts') or {}).get('jobs_retried_as_timeout', 0)}"),
        ("faults injected", ", ".join(f"{k}={v}" for k, v in f.get("faults_injected", {}).items())),
        ("kill during ack: ack first / kill first", "{ack_committed_first} / {killed_first}".format(
            **f.get("kill_during_ack_outcomes", {"ack_committed_first": 0, "killed_first": 0}))),
        ("guarded effects applied", str(f.get("guarded_effects_applied"))),
        ("guarded: provider dedups (body re-run)", str(f.get("guarded_provider_dedups"))),
        ("guarded: body re-runs by planned fault", str(f.get("guarded_body_reruns_by_planned_fault"))),
        ("PostgreSQL restarts in the body/success gap", str(f.get("restart_in_gap_fired"))),
        ("unguarded effects / duplicates", f"{f.get('unguarded_effects')} / {f.get('unguarded_duplicates')} "
                                           f"(in {f.get('jobs_with_unguarded_duplicates')} jobs)"),
        ("reaps by cause", ", ".join(f"{k}={v}" for k, v in f.get("reaps_by_cause", {}).items())),
        ("finished attempts reaped: excused by a fault / not", "{excused} / {violations}".format(
            **f.get("returned_attempts_reaped", {"excused": 0, "violations": 0}))),
        ("held per worker: peak vs concurrency (slow completions)", _capacity_line(f.get("capacity") or {})),
        ("running per flow key: peak (live leases) vs limit", _flow_line(f.get("flow") or {})),
        ("rate limit: peak units started in 1 s vs allowed", _rate_line(f.get("rate") or {})),
        ("key waits with room, p50/p99/max", _keys_line(f.get("keys_served") or {})),
        *summary_lines(f),
        ("recovery of killed jobs p50/p99/max", f"{rec.get('p50')} / {rec.get('p99')} / {rec.get('max')} s "
                                                f"(n={rec.get('n')}, bound {f.get('recovery_bound_seconds')}s)"),
        ("recovery, all faults p50/p99/max", f"{allrec.get('p50')} / {allrec.get('p99')} / {allrec.get('max')} s "
                                             f"(n={allrec.get('n')})"),
        ("stale writes rejected", f"{f.get('stale_writes_rejected_total')} "
                                  + ", ".join(f"{k}={v}" for k, v in f.get("stale_writes_rejected", {}).items())),
        ("fenced attempts: rejection recorded / self-fenced / effect CAS rejected",
         f"{f.get('fenced_attempts_with_recorded_rejection')} / {f.get('fenced_attempts_self_fenced_before_writing')}"
         f" / {f.get('fenced_attempts_effect_succeed_rejected_unrecorded')} of {f.get('fenced_attempts_checked')}"),
        ("clock skew", f"{report.clock_skew['method']}: observed " + (", ".join(
            f"{offset:+.0f}s in {n} worker process(es)" for offset, n in sorted(Counter(
                round(v) for v in report.clock_skew["observed_offsets_by_pid"].values() if abs(v) > 1).items()))
            or "none")),
    ]
    if report.skipped:
        lines.append(("skipped", "; ".join(report.skipped)))
    width = max(len(k) for k, _ in lines)
    out = [f"{k.ljust(width)}  {v}" for k, v in lines]
    out.append("")
    out.append("invariants:")
    for name, problems in report.violations.items():
        out.append(f"  {'PASS' if not problems else 'FAIL'}  {name}" + (f" ({len(problems)})" if problems else ""))
        for p in problems[:10]:
            out.append(f"        - {p}")
    out.append("")
    out.append("RESULT: " + ("all invariants held" if report.ok else "INVARIANT VIOLATED"))
    return "\n".join(out)
