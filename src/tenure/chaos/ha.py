"""`tenure chaos --ha patroni`: failovers of a real Patroni cluster under load, with guarded effects.

One run: start a three-member Patroni cluster (:mod:`tenure.chaos.patroni`, asynchronous or
synchronous replication) and, outside it, the harness's own embedded PostgreSQL holding the
*ledger*: what the workers were told (acknowledged ``eff.succeeded()``, acknowledged completions),
what they did (handler starts), and the guarded effect's external provider (which honours the
idempotency key, R14). Workers, reapers and the producer use the cluster's multi-host DSN
(``target_session_attrs=read-write``). While jobs flow at ``rate`` jobs/s, and the run's
workflows, batches and unique bursts (issue 39, as in the local run) are enqueued on ``WF_QUEUE``
over the first ``calm`` x failovers seconds, the harness injects failovers one after the other,
each once the cluster is healthy again:

- ``switchover``: ``patronictl switchover --force`` (planned);
- ``kill``: SIGKILL of the primary's postmaster (Patroni fails over at once: ``primary_start_timeout`` 0);
- ``isolate``: the primary's network link goes down, cutting it off from the DCS, its replicas and
  every client; healed once a new primary took a write (the old one is rewound and rejoins).

Per failover it measures the failover time (fault to the first write a new primary accepted through
the multi-host DSN) and the worker stall (fault to the first acknowledged completion). After the
last job is terminal it compares the ledger with the final primary: jobs lost (acknowledged
enqueues missing), acknowledged completions lost, jobs run twice, guarded effects run again after
their success was acknowledged, provider calls repeated (the in-doubt window the provider's
idempotency key absorbs), stale writes rejected, plus every invariant of
:mod:`tenure.chaos.invariants` and :mod:`tenure.chaos.invariants_workflow` checked on the final
primary (a workflow or batch whose commit a failover left unconfirmed is sent again and may exist
twice: the checks hold over whatever was written).

Limits: one machine; ``isolate`` needs network namespaces (root and iproute2) and is skipped
otherwise; leases must outlast a failover or jobs are (correctly) recovered and run again.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from tenure.chaos import QUEUE, WF_QUEUE
from tenure.chaos.config import ChaosConfig
from tenure.chaos.failover import FAULT_KINDS, FailoverRecord, Failovers
from tenure.chaos.fleet import Fleet
from tenure.chaos.invariants import Verdict, check_all, quantile
from tenure.chaos.invariants_workflow import check_extras, summary_lines
from tenure.chaos.journal import Journal
from tenure.chaos.loop import Cadence, Hooks, Progress, run_until_settled
from tenure.chaos.patroni import ClusterConfig, PatroniCluster
from tenure.chaos.producer import ExtrasProducer, Pace, Producer, extras_for
from tenure.chaos.store import ChaosStore, Row
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.errors import ConfigError
from tenure.core.repository import JobSpec, Repository

REPLICATION_MODES = ("async", "sync")
RATE_DEFAULT = 20.0
ROUNDS_DEFAULT = 1
CALM_DEFAULT = 5.0
LEASE_DEFAULT = 30.0
HEARTBEAT_DEFAULT = 5.0
GRACE_DEFAULT = 5.0
CADENCE = Cadence(tick=0.2, sample=0.5, progress=1.0, line=10.0, retry_on=psycopg.Error)


@dataclass(frozen=True)
class HaConfig:
    """One HA chaos run (the worker settings come from :class:`ChaosConfig`)."""

    replication: str = "async"
    """``async`` (Patroni's default) or ``sync`` (``synchronous_mode: true``)."""
    faults: tuple[str, ...] = FAULT_KINDS
    """Failover kinds, injected in this order, ``rounds`` times."""
    rounds: int = ROUNDS_DEFAULT
    """How many times the list of ``faults`` is repeated."""
    rate: float = RATE_DEFAULT
    """Jobs enqueued per second while the failovers run."""
    calm: float = CALM_DEFAULT
    """Seconds of healthy cluster under load before each failover."""

    def validate(self) -> None:
        if self.replication not in REPLICATION_MODES:
            raise ConfigError(f"replication must be one of {', '.join(REPLICATION_MODES)}")
        unknown = [f for f in self.faults if f not in FAULT_KINDS]
        if unknown or not self.faults:
            raise ConfigError(f"unknown failover kind(s) {unknown}; choose from {', '.join(FAULT_KINDS)}")
        if self.rounds < 1 or self.rate <= 0 or self.calm < 0:
            raise ConfigError("rounds must be >= 1, rate positive, calm >= 0")


def ha_chaos_config(base: ChaosConfig) -> ChaosConfig:
    """The worker settings of an HA run: only failovers (no kills, hangs, stops, skew)."""
    return replace(base, kills_per_kind=0, hangs=0, sigstops=0, partitions=0, pg_restarts=0, skew=0.0)


@dataclass
class HaReport:
    ok: bool
    replication: str
    config: dict[str, Any]
    wall_seconds: float
    skipped: list[str]
    failovers: list[dict[str, Any]]
    figures: dict[str, Any]
    violations: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


class HaChaosHarness:
    """Runs one HA chaos run (:meth:`run_ha`) and returns its :class:`HaReport`.

    Composes the parts the local run uses (:class:`Journal`, :class:`Fleet`, :class:`Producer`, the
    shared main loop) with a Patroni cluster, a ledger server and :class:`Failovers`.
    """

    def __init__(self, config: ChaosConfig, ha: HaConfig, *, log_dir: Path | None = None,
                 progress: bool = False, keep: bool = False) -> None:
        ha.validate()
        self.config = ha_chaos_config(config)
        self.config.validate()
        self.ha = ha
        self.log_dir = log_dir
        self.keep = keep
        self.schema = f"chaos_{uuid.uuid4().hex[:10]}"
        self.journal = Journal(self.schema, show_progress=progress)
        self.rng = self.config.rng()
        self.cluster: PatroniCluster | None = None
        self.ledger_server: EmbeddedServer | None = None
        self.ledger_dsn = ""
        self.dsn = ""
        self.skipped: list[str] = []
        self.enqueued_at: dict[int, float] = {}
        self._tmp = Path(tempfile.mkdtemp(prefix="tenure-ha-chaos-"))
        self._stop = threading.Event()
        self._faults_done = threading.Event()

    # -- setup ----------------------------------------------------------------------------------
    def _setup_database(self) -> None:
        self.ledger_server = ensure_server(self._tmp / "ledger")
        self.ledger_dsn = self.ledger_server.dsn
        with connect(self.ledger_dsn, application_name="tenure-chaos-ledger") as conn:
            ChaosStore(conn, self.schema).ha_setup()
        self.journal.say(f"chaos-ha: starting a 3-member Patroni cluster ({self.ha.replication} replication)")
        self.cluster = PatroniCluster(ClusterConfig(synchronous=self.ha.replication == "sync"),
                                      base=self._tmp / "cluster")
        self.cluster.start()
        self.dsn = self.cluster.dsn()
        with connect(self.dsn, application_name="tenure-chaos-setup") as conn:
            Repository(conn, self.schema).migrate()
            store = ChaosStore(conn, self.schema)
            store.setup()
            store.ha_setup()
        self.journal.attach(self.dsn)  # offset 0: the cluster, the ledger and the harness share a clock

    def _producer(self) -> Producer:
        """Jobs at ``rate`` per second until the last failover is over."""
        c, rate = self.config, self.ha.rate

        def job(n: int) -> JobSpec:
            work = self.rng.uniform(c.work_ms_min, c.work_ms_max)
            return JobSpec(task="chaos.job", queue=QUEUE, max_attempts=c.max_attempts,
                           idempotency_key=f"chaos-job:{n}", payload={"n": n, "work_ms": round(work, 1)})

        def acknowledged(jobs: range) -> None:
            now = time.time()
            for n in jobs:
                self.enqueued_at[n] = now

        pace = Pace(due=lambda elapsed: int(elapsed * rate) + 1, over=lambda _: self._faults_done.is_set(),
                    idle=min(0.05, 1.0 / rate), retry_on=psycopg.Error, retry_wait=0.2)
        return Producer(self.dsn, self.schema, pace=pace, job=job, stop=self._stop, on_enqueued=acknowledged)

    # -- the run --------------------------------------------------------------------------------
    def run_ha(self) -> HaReport:
        """One full run; always stops every process, the cluster and the ledger server."""
        c = self.config
        began = time.monotonic()
        kinds = [k for _ in range(self.ha.rounds) for k in self.ha.faults]
        fleet: Fleet | None = None
        try:
            self._setup_database()
            assert self.cluster is not None
            if not self.cluster.can_isolate and "isolate" in kinds:
                kinds = [k for k in kinds if k != "isolate"]
                self.skipped.append("isolate: needs network namespaces (root and iproute2)")
            ledger = {"TENURE_CHAOS_LEDGER_URL": self.ledger_dsn}
            fleet = Fleet(c, self.journal, dsn=self.dsn, schema=self.schema, log_dir=self.log_dir,
                          extra_env=lambda slot: ledger)
            fleet.start()
            producer = self._producer()
            # Workflows, batches and unique bursts over the calm before the failovers, so they straddle the first.
            extras = extras_for(c, self.dsn, self.schema, span=self.ha.calm * len(kinds), rng=self.rng,
                                stop=self._stop, retry_on=psycopg.Error)
            failovers = Failovers(self.cluster, kinds, dsn=self.dsn, schema=self.schema, calm=self.ha.calm,
                                  journal=self.journal, enqueued=lambda: producer.enqueued, done=self._faults_done)
            producer.start()
            extras.start()
            failovers.start()
            run_until_settled(fleet=fleet, journal=self.journal, cadence=CADENCE,
                              hooks=self._hooks(producer, extras, failovers), settle_timeout=c.settle_timeout,
                              prefix="chaos-ha")
            self._stop.set()
            fleet.shutdown()
            return self._verify_ha(time.monotonic() - began, failovers.records, producer.enqueued, extras.counts)
        finally:
            self._stop.set()
            self._faults_done.set()
            if fleet is not None:
                fleet.shutdown()
            self.journal.close()
            if self.cluster is not None:
                self.cluster.stop()
            if self.ledger_server is not None:
                self.ledger_server.stop("immediate")
            if not self.keep:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def _hooks(self, producer: Producer, extras: ExtrasProducer, failovers: Failovers) -> Hooks:
        def step(now: float) -> None:
            for error, what in ((producer.error, "producer"), (extras.error, "producer"),
                                (failovers.error, "fault injection")):
                if error is not None:
                    raise RuntimeError(f"{what} failed: {error}") from error

        def sample(store: ChaosStore, now: float) -> None:
            if self.config.unique_keys:
                store.unique_sample()

        def line(prog: Progress) -> str:
            return (f"chaos-ha: enqueued {producer.enqueued}, terminal {prog['terminal']}, "
                    f"running {prog['running']}, pending {prog['pending']}")

        return Hooks(step=step, quiet=lambda: not (failovers.is_alive() or producer.is_alive() or extras.is_alive()),
                     settled=lambda prog: bool(prog["terminal"] >= producer.enqueued
                                               and prog["total"] >= producer.enqueued),
                     line=line, every_tick=sample, drain=(WF_QUEUE,))

    # -- verdict --------------------------------------------------------------------------------
    def _verify_ha(self, wall: float, records: list[FailoverRecord], enqueued: int,
                   extras: dict[str, int]) -> HaReport:
        store = self.journal.reach("the cluster to check the invariants", attempts=100, wait=0.3)
        for rec in records:
            self.journal.record(f"failover_{rec.kind}", None, rec.started,
                                rec.first_write or rec.healthy_again or rec.started,
                                old=rec.old_primary, new=rec.new_primary)
        self.journal.flush()
        jobs = store.jobs_summary(QUEUE)
        with connect(self.ledger_dsn, application_name="tenure-chaos-ledger") as conn:
            ledger = ChaosStore(conn, self.schema).ledger_rows()
        verdict = self._invariants(store, jobs, ledger, enqueued)
        check_extras(verdict, store, faults=store.faults(), enqueued=extras)
        figures = ledger_figures(ledger, jobs, set(self.enqueued_at))
        acks = sorted(float(r["at"]) for r in ledger if r["kind"] == "completion_acked")
        for rec in records:
            if rec.first_write is not None:  # no new primary seen: no outage to measure
                rec.stall = completion_gap(acks, rec.unavailable_from, rec.first_write)
        figures.update(failover_figures(records, verdict))
        ok = (verdict.ok and figures["jobs_lost"] == 0 and figures["acked_completions_lost"] == 0
              and figures["guarded_effects_rerun_after_ack"] == 0 and not figures["failovers_with_errors"]
              and figures["jobs_not_terminal"] == 0)
        failovers = [{**asdict(r), "failover_seconds": r.failover_seconds, "stall_seconds": r.stall_seconds}
                     for r in records]
        return HaReport(ok=ok, replication=self.ha.replication,
                        config={**asdict(self.config), **asdict(self.ha)}, wall_seconds=round(wall, 1),
                        skipped=self.skipped, failovers=failovers, figures=figures,
                        violations={k: v[:20] for k, v in verdict.violations.items() if v})

    def _invariants(self, store: ChaosStore, jobs: list[Row], ledger: list[Row], enqueued: int) -> Verdict:
        """Every invariant of :mod:`tenure.chaos.invariants` on the final primary; a reap of a claim
        no handler ever started (committed, then lost in a failover) is marked as such."""
        started_tokens = {str(r["lock_token"]) for r in ledger if r["kind"] == "handler_start"}
        reaps = store.reaps(QUEUE)
        for reap in reaps:
            if str(reap["lock_token"]) not in started_tokens and not reap.get("worker_fence"):
                reap["worker_fence"] = "claim_never_delivered"
        return check_all(jobs=jobs, reaps=reaps, faults=store.faults(), events=store.event_counts(QUEUE),
                         planned=enqueued, timing=self.config.timing(), run_end=time.time(),
                         capacity=store.capacity_samples())


def failover_figures(records: list[FailoverRecord], verdict: Verdict) -> dict[str, Any]:
    """The failovers' own figures, and what the invariants found that the HA report shows."""
    fo = [r.failover_seconds for r in records if r.failover_seconds is not None]
    stall = [r.stall_seconds for r in records if r.stall_seconds is not None]
    return {
        "failovers": len(records),
        "failovers_by_kind": dict(Counter(r.kind for r in records)),
        "failovers_with_errors": sum(1 for r in records if r.error),
        "failover_seconds": _stats(fo),
        "worker_stall_seconds": _stats(stall),
        "stale_writes_rejected": verdict.figures.get("stale_writes_rejected_total"),
        "reaps": verdict.figures.get("reaps"),
        "claims_never_delivered": verdict.figures.get("fenced_attempts_claim_never_delivered"),
        "invariants_held": verdict.ok,
        "invariants_checked": sorted(verdict.violations),
        "invariant_violations": {k: len(v) for k, v in verdict.violations.items() if v},
        **{k: verdict.figures.get(k) for k in ("workflows", "batches", "unique", "extras_enqueued")},
    }


def completion_gap(acks: list[float], start: float, end: float) -> float | None:
    """The longest gap between consecutive acknowledged completions (sorted epochs) that overlaps
    ``[start, end]``; None when no completion follows ``start``."""
    gaps = [b - a for a, b in zip(acks, acks[1:]) if b > start and a < end]
    return max(gaps) if gaps else None


def _stats(values: list[float]) -> dict[str, float | int | None]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)
    return {"n": len(values), "p50": r(quantile(values, 0.5)), "max": r(max(values) if values else None)}


def ledger_figures(ledger: list[dict[str, Any]], jobs: list[dict[str, Any]],
                   enqueued: set[int]) -> dict[str, Any]:
    """Compare what the clients were told (the ledger) with what the final primary holds.

    Pure: ``ledger`` rows as returned by ``chaos_ledger_rows``, ``jobs`` as ``chaos_jobs_summary``,
    ``enqueued`` the job numbers whose enqueue was acknowledged to the producer.
    """
    by_n = {int(j["n"]): j for j in jobs if j["n"] is not None}
    lost_jobs = sorted(enqueued - set(by_n))
    starts: dict[int, set[str]] = defaultdict(set)
    provider: dict[int, list[float]] = defaultdict(list)
    effect_acked: dict[int, float] = {}
    lost_acks: list[str] = []
    acked = 0
    for row in ledger:
        n, kind, at = int(row["job_n"]), str(row["kind"]), float(row["at"])
        if kind == "handler_start":
            starts[n].add(str(row["lock_token"]))
        elif kind == "provider_call":
            provider[n].append(at)
        elif kind == "effect_acked":
            effect_acked[n] = min(at, effect_acked.get(n, at))
        elif kind == "completion_acked":
            acked += 1
            job = by_n.get(n)
            tokens = {str(t) for t in (job["completion_tokens"] if job else None) or []}
            if str(row["lock_token"]) not in tokens:
                lost_acks.append(f"n={n} token {str(row['lock_token'])[:8]} "
                                 f"(now {job['status'] if job else 'missing'})")
    rerun_after_ack = sum(1 for n, calls in provider.items() if n in effect_acked
                          for at in calls if at > effect_acked[n])
    not_terminal = sum(1 for j in jobs if j["status"] not in ("completed", "failed"))
    return {
        "jobs_enqueued_acked": len(enqueued),
        "jobs_lost": len(lost_jobs),
        "jobs_lost_examples": lost_jobs[:10],
        "jobs_not_terminal": not_terminal,
        "jobs_completed": sum(1 for j in jobs if j["status"] == "completed"),
        "jobs_dead_lettered": sum(1 for j in jobs if j["status"] == "failed"),
        "acked_completions": acked,
        "acked_completions_lost": len(lost_acks),
        "acked_completions_lost_examples": lost_acks[:10],
        "jobs_run_twice": sum(1 for tokens in starts.values() if len(tokens) > 1),
        "guarded_effects_rerun_after_ack": rerun_after_ack,
        "guarded_provider_calls_repeated": sum(len(calls) - 1 for calls in provider.values() if len(calls) > 1),
        "guarded_effects_applied_twice": 0,  # the provider dedups by key; repeats are counted above
    }


def format_ha_report(report: HaReport) -> str:
    f = report.figures
    fo, st = f.get("failover_seconds", {}), f.get("worker_stall_seconds", {})
    lines = [
        ("replication", report.replication),
        ("failovers", f"{f.get('failovers')} {f.get('failovers_by_kind')} (errors: {f.get('failovers_with_errors')})"),
        ("failover time p50 / max", f"{fo.get('p50')} / {fo.get('max')} s"),
        ("worker stall p50 / max", f"{st.get('p50')} / {st.get('max')} s"),
        ("jobs enqueued (acked) / completed / DLQ", f"{f.get('jobs_enqueued_acked')} / {f.get('jobs_completed')} / "
                                                    f"{f.get('jobs_dead_lettered')}"),
        ("jobs lost", str(f.get("jobs_lost"))),
        ("acked completions lost", f"{f.get('acked_completions_lost')} of {f.get('acked_completions')}"),
        ("jobs run twice", str(f.get("jobs_run_twice"))),
        ("guarded effects re-run after acked success", str(f.get("guarded_effects_rerun_after_ack"))),
        ("provider calls repeated (deduplicated by key)", str(f.get("guarded_provider_calls_repeated"))),
        ("stale writes rejected", str(f.get("stale_writes_rejected"))),
        ("claims committed but never delivered (reaped)", str(f.get("claims_never_delivered"))),
        *summary_lines(f),
        ("chaos invariants", "held" if f.get("invariants_held") else f"VIOLATED {f.get('invariant_violations')}"),
        ("wall time", f"{report.wall_seconds}s"),
    ]
    if report.skipped:
        lines.append(("skipped", "; ".join(report.skipped)))
    width = max(len(k) for k, _ in lines)
    out = [f"{k.ljust(width)}  {v}" for k, v in lines]
    for name, problems in report.violations.items():
        out.append(f"  FAIL {name}: " + "; ".join(problems[:5]))
    for r in report.failovers:
        if r.get("error"):
            out.append(f"  failover {r['kind']} {r['old_primary']}: {r['error']}")
    out.append("RESULT: " + ("no loss, every invariant held" if report.ok else "LOSS OR INVARIANT VIOLATED"))
    return "\n".join(out)
