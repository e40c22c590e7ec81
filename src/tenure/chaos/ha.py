"""`tenure chaos --ha patroni`: failovers of a real Patroni cluster under load, with guarded effects.

One run: start a three-member Patroni cluster (:mod:`tenure.chaos.patroni`, asynchronous or
synchronous replication) and, outside it, the harness's own embedded PostgreSQL holding the
*ledger*: what the workers were told (acknowledged ``eff.succeeded()``, acknowledged completions),
what they did (handler starts), and the guarded effect's external provider (which honours the
idempotency key, R14). Workers, reapers and the producer use the cluster's multi-host DSN
(``target_session_attrs=read-write``). While jobs flow at ``rate`` jobs/s, the harness injects
failovers one after the other, each once the cluster is healthy again:

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
:mod:`tenure.chaos.invariants` checked on the final primary.

Limits: one machine; ``isolate`` needs network namespaces (root and iproute2) and is skipped
otherwise; leases must outlast a failover or jobs are (correctly) recovered and run again.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from tenure.chaos import QUEUE
from tenure.chaos.harness import ChaosConfig, ChaosHarness
from tenure.chaos.invariants import Timing, check_all, quantile
from tenure.chaos.patroni import ClusterConfig, ClusterError, PatroniCluster
from tenure.chaos.store import ChaosStore
from tenure.core.db import connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.errors import ConfigError
from tenure.core.repository import JobSpec, Repository

FAULT_KINDS = ("switchover", "kill", "isolate")
REPLICATION_MODES = ("async", "sync")
RATE_DEFAULT = 20.0
ROUNDS_DEFAULT = 1
CALM_DEFAULT = 5.0
LEASE_DEFAULT = 30.0
HEARTBEAT_DEFAULT = 5.0
GRACE_DEFAULT = 5.0
FAILOVER_TIMEOUT = 330.0
REJOIN_TIMEOUT = 240.0
PROBE_INTERVAL = 0.1


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
class FailoverRecord:
    kind: str
    old_primary: str
    new_primary: str | None = None
    started: float = 0.0
    """Epoch seconds of the injection (this machine's clock, which the cluster and the ledger share)."""
    unavailable_from: float = 0.0
    """The injection, or the last write the old primary accepted after it, whichever is later."""
    first_write: float | None = None
    """The first write a new primary accepted through the multi-host DSN."""
    healthy_again: float | None = None
    stall: float | None = None
    """The longest gap between two completions acknowledged to workers that overlaps the outage."""
    error: str | None = None

    @property
    def failover_seconds(self) -> float | None:
        """Writes unavailable: from the old primary's last write (or the fault) to the new primary's first."""
        return None if self.first_write is None else round(self.first_write - self.unavailable_from, 3)

    @property
    def stall_seconds(self) -> float | None:
        """Workers stalled: the longest gap between acknowledged completions across the outage."""
        return None if self.stall is None else round(self.stall, 3)


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


class HaChaosHarness(ChaosHarness):
    """Runs one HA chaos run (:meth:`run_once`) and returns its :class:`HaReport`."""

    def __init__(self, config: ChaosConfig, ha: HaConfig, *, log_dir: Path | None = None,
                 progress: bool = False, keep: bool = False) -> None:
        ha.validate()
        super().__init__(ha_chaos_config(config), log_dir=log_dir, progress=progress, keep=keep)
        self.ha = ha
        self.cluster: PatroniCluster | None = None
        self.ledger_server: EmbeddedServer | None = None
        self.ledger_dsn = ""
        self._tmp = Path(tempfile.mkdtemp(prefix="tenure-ha-chaos-"))
        self.enqueued_at: dict[int, float] = {}
        self.failovers: list[FailoverRecord] = []
        self._faults_done = threading.Event()
        self._fault_error: BaseException | None = None
        self._rng = random.Random(config.seed)

    # -- setup ----------------------------------------------------------------------------------
    def _setup_database(self) -> None:
        self.ledger_server = ensure_server(self._tmp / "ledger")
        self.ledger_dsn = self.ledger_server.dsn
        with connect(self.ledger_dsn, application_name="tenure-chaos-ledger") as conn:
            ChaosStore(conn, self.schema).ha_setup()
        self._say(f"chaos-ha: starting a 3-member Patroni cluster ({self.ha.replication} replication)")
        self.cluster = PatroniCluster(ClusterConfig(synchronous=self.ha.replication == "sync"),
                                      base=self._tmp / "cluster")
        self.cluster.start()
        self.dsn = self.cluster.dsn()
        with connect(self.dsn, application_name="tenure-chaos-setup") as conn:
            Repository(conn, self.schema).migrate()
            store = ChaosStore(conn, self.schema)
            store.setup()
            store.ha_setup()
        self._offset = 0.0  # one machine: the cluster, the ledger and the harness share a clock

    def _env(self, slot: int | None) -> dict[str, str]:
        env = super()._env(slot)
        env["TENURE_CHAOS_LEDGER_URL"] = self.ledger_dsn
        return env

    # -- load -----------------------------------------------------------------------------------
    def _produce_ha(self) -> None:
        c = self.config
        conn: psycopg.Connection[Any] | None = None
        started = time.monotonic()
        try:
            while not self._faults_done.is_set() and not self._stop.is_set():
                due = int((time.monotonic() - started) * self.ha.rate) + 1
                if due <= self.enqueued:
                    self._stop.wait(min(0.05, 1.0 / self.ha.rate))
                    continue
                work = [self._rng.uniform(c.work_ms_min, c.work_ms_max) for _ in range(due - self.enqueued)]
                batch = [JobSpec(task="chaos.job", queue=QUEUE, max_attempts=c.max_attempts,
                                 idempotency_key=f"chaos-job:{n}", payload={"n": n, "work_ms": round(w, 1)})
                         for n, w in zip(range(self.enqueued, due), work)]
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-producer")
                    Repository(conn, self.schema).enqueue_many(batch)
                except psycopg.Error:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stop.wait(0.2)  # the same batch again: idempotency keys make it safe
                    continue
                now = time.time()
                for n in range(self.enqueued, due):
                    self.enqueued_at[n] = now
                self.enqueued = due
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self._producer_error = exc
        finally:
            if conn is not None:
                conn.close()

    # -- faults ---------------------------------------------------------------------------------
    def _probe_until_new_primary(self, rec: FailoverRecord, old_host: str, deadline: float) -> None:
        """Write through the multi-host DSN until a server other than ``old_host`` accepts a write:
        sets ``rec.first_write``, and ``rec.unavailable_from`` to the fault or the last write the old
        primary accepted, whichever is later (``patronictl`` takes seconds before it demotes)."""
        conn: psycopg.Connection[Any] | None = None
        rec.unavailable_from = rec.started
        try:
            while time.monotonic() < deadline:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-probe")
                    sent = time.time()
                    row = ChaosStore(conn, self.schema).ha_probe()
                    if str(row["host"]) != old_host:
                        rec.first_write = time.time()
                        return
                    rec.unavailable_from = max(rec.unavailable_from, sent)
                except psycopg.Error:
                    if conn is not None:
                        conn.close()
                    conn = None
                time.sleep(PROBE_INTERVAL)
        finally:
            if conn is not None:
                conn.close()

    def _one_failover(self, kind: str) -> FailoverRecord:
        cluster = self.cluster
        assert cluster is not None
        old = cluster.leader()
        if old is None:
            raise ClusterError("no leader before the failover")
        old_host = cluster._member(old).host
        rec = FailoverRecord(kind, old)
        switch: threading.Thread | None = None
        switch_error: list[BaseException] = []
        rec.started = time.time()
        if kind == "switchover":
            def run_switchover() -> None:
                try:
                    cluster.switchover()
                except BaseException as exc:  # noqa: BLE001 - reported with the record
                    switch_error.append(exc)
            switch = threading.Thread(target=run_switchover, name="chaos-switchover", daemon=True)
            switch.start()
        elif kind == "kill":
            cluster.kill_postmaster(old)
        elif kind == "isolate":
            cluster.isolate(old)
        deadline = time.monotonic() + FAILOVER_TIMEOUT
        self._probe_until_new_primary(rec, old_host, deadline)
        if switch is not None:
            switch.join(timeout=FAILOVER_TIMEOUT)
        try:
            rec.new_primary = cluster.wait_leader(other_than=old, timeout=max(1.0, deadline - time.monotonic()))
        except ClusterError as exc:
            rec.error = str(exc).splitlines()[0]
        if switch_error:
            rec.error = str(switch_error[0]).splitlines()[0]
        if kind == "isolate":
            cluster.heal(old)
        try:
            cluster.wait_healthy(REJOIN_TIMEOUT)
            rec.healthy_again = time.time()
        except ClusterError as exc:
            rec.error = (rec.error or "") + f" rejoin: {str(exc).splitlines()[0]}"
        return rec

    def _fault_loop(self, kinds: list[str]) -> None:
        try:
            for i, kind in enumerate(kinds):
                time.sleep(self.ha.calm)
                assert self.cluster is not None
                self.cluster.wait_healthy(REJOIN_TIMEOUT)
                self._say(f"chaos-ha: failover {i + 1}/{len(kinds)}: {kind} (primary {self.cluster.leader()}, "
                          f"{self.enqueued} enqueued)")
                rec = self._one_failover(kind)
                self.failovers.append(rec)
                self._say(f"chaos-ha:   {rec.old_primary} -> {rec.new_primary}: first write after "
                          f"{rec.failover_seconds}s" + (f" ({rec.error})" if rec.error else ""))
            time.sleep(self.ha.calm)
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self._fault_error = exc
        finally:
            self._faults_done.set()

    # -- the run --------------------------------------------------------------------------------
    def run_ha(self) -> HaReport:
        """One full run; always stops every process, the cluster and the ledger server."""
        c = self.config
        began = time.monotonic()
        kinds = [k for _ in range(self.ha.rounds) for k in self.ha.faults]
        try:
            self._setup_database()
            assert self.cluster is not None
            if not self.cluster.can_isolate and "isolate" in kinds:
                kinds = [k for k in kinds if k != "isolate"]
                self.skipped.append("isolate: needs network namespaces (root and iproute2)")
            for i in range(c.reapers):
                self._spawn("reaper", i)
            for i in range(c.workers):
                self._spawn("worker", i)
            producer = threading.Thread(target=self._produce_ha, name="chaos-producer", daemon=True)
            faults = threading.Thread(target=self._fault_loop, args=(kinds,), name="chaos-faults", daemon=True)
            producer.start()
            faults.start()
            self._ha_main_loop(producer, faults)
            self._stop.set()
            self._shutdown()
            return self._verify_ha(time.monotonic() - began)
        finally:
            self._stop.set()
            self._faults_done.set()
            self._shutdown()
            if self._conn is not None and not self._conn.closed:
                self._conn.close()
            if self.cluster is not None:
                self.cluster.stop()
            if self.ledger_server is not None:
                self.ledger_server.stop("immediate")
            if not self.keep:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def _ha_main_loop(self, producer: threading.Thread, faults: threading.Thread) -> None:
        c = self.config
        next_sample = next_progress = last_line = 0.0
        done_at: float | None = None
        while True:
            now = time.monotonic()
            self._watch_processes()
            for error, what in ((self._producer_error, "producer"), (self._fault_error, "fault injection")):
                if error is not None:
                    raise RuntimeError(f"{what} failed: {error}") from error
            store = self._store()
            if store is not None:
                try:
                    if now >= next_sample:
                        store.lease_sample()
                        next_sample = now + 0.5
                    if now >= next_progress:
                        next_progress = now + 1.0
                        prog = store.progress(QUEUE)
                        if self.show_progress and now - last_line >= 10:
                            last_line = now
                            self._say(f"chaos-ha: enqueued {self.enqueued}, terminal {prog['terminal']}, "
                                      f"running {prog['running']}, pending {prog['pending']}")
                        if not faults.is_alive() and not producer.is_alive():
                            if prog["terminal"] >= self.enqueued and prog["total"] >= self.enqueued:
                                return
                            done_at = done_at or now
                            if now - done_at > c.settle_timeout:
                                self._say("chaos-ha: settle timeout: some jobs never became terminal")
                                return
                except psycopg.Error:
                    if self._conn is not None:
                        self._conn.close()
            time.sleep(0.2)

    # -- verdict --------------------------------------------------------------------------------
    def _verify_ha(self, wall: float) -> HaReport:
        c = self.config
        store = None
        for _ in range(100):
            store = self._store()
            if store is not None:
                break
            time.sleep(0.3)
        if store is None:
            raise RuntimeError("cannot reach the cluster to check the invariants")
        for rec in self.failovers:
            store.fault_record(f"failover_{rec.kind}", pid=None, started=rec.started,
                               ended=rec.first_write or rec.healthy_again or rec.started,
                               detail={"old": rec.old_primary, "new": rec.new_primary})
        jobs = store.jobs_summary(QUEUE)
        with connect(self.ledger_dsn, application_name="tenure-chaos-ledger") as conn:
            ledger = ChaosStore(conn, self.schema).ledger_rows()
        started_tokens = {str(r["lock_token"]) for r in ledger if r["kind"] == "handler_start"}
        reaps = store.reaps(QUEUE)
        for reap in reaps:
            if str(reap["lock_token"]) not in started_tokens and not reap.get("worker_fence"):
                reap["worker_fence"] = "claim_never_delivered"
        timing = Timing(lease=c.lease, grace=c.grace, reaper_interval=c.reaper_interval, heartbeat=c.heartbeat,
                        max_lease_total=c.max_lease_total, margin=c.recovery_margin)
        verdict = check_all(jobs=jobs, reaps=reaps, faults=store.faults(),
                            events=store.event_counts(QUEUE), planned=self.enqueued, timing=timing,
                            run_end=time.time())
        figures = ledger_figures(ledger, jobs, set(self.enqueued_at))
        acks = sorted(float(r["at"]) for r in ledger if r["kind"] == "completion_acked")
        for rec in self.failovers:
            if rec.first_write is not None:  # no new primary seen: no outage to measure
                rec.stall = completion_gap(acks, rec.unavailable_from, rec.first_write)
        fo = [r.failover_seconds for r in self.failovers if r.failover_seconds is not None]
        stall = [r.stall_seconds for r in self.failovers if r.stall_seconds is not None]
        figures.update({
            "failovers": len(self.failovers),
            "failovers_by_kind": dict(Counter(r.kind for r in self.failovers)),
            "failovers_with_errors": sum(1 for r in self.failovers if r.error),
            "failover_seconds": _stats(fo),
            "worker_stall_seconds": _stats(stall),
            "stale_writes_rejected": verdict.figures.get("stale_writes_rejected_total"),
            "reaps": verdict.figures.get("reaps"),
            "claims_never_delivered": verdict.figures.get("fenced_attempts_claim_never_delivered"),
            "invariants_held": verdict.ok,
            "invariant_violations": {k: len(v) for k, v in verdict.violations.items() if v},
        })
        ok = (verdict.ok and figures["jobs_lost"] == 0 and figures["acked_completions_lost"] == 0
              and figures["guarded_effects_rerun_after_ack"] == 0 and not figures["failovers_with_errors"]
              and figures["jobs_not_terminal"] == 0)
        failovers = [{**asdict(r), "failover_seconds": r.failover_seconds, "stall_seconds": r.stall_seconds}
                     for r in self.failovers]
        return HaReport(ok=ok, replication=self.ha.replication,
                        config={**asdict(c), **asdict(self.ha)}, wall_seconds=round(wall, 1),
                        skipped=self.skipped, failovers=failovers, figures=figures,
                        violations={k: v[:20] for k, v in verdict.violations.items() if v})


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
