"""`tenure doctor`: the R20 playbook run against the live database and the worker registry.

It answers, with evidence, the questions an on-call engineer asks when leases expire:

* **dead or hung or slow storage?** A worker whose registry row went silent (no heartbeat
  statement for three of its intervals) is *dead*; a job whose owner is alive and renewing
  but which has run far longer than its task's runtime p99 is *hung*; heartbeats arriving
  late while the owners are alive point at *slow storage* when the measured database round
  trip is slow, and at a starved heartbeat loop (CPU, GC, blocking) when it is not.
* **scope**: which queues and tasks are affected, since when (first expired lease or reap in
  the window) and which worker versions were involved (a deploy).
* **the reaper**: too eager when the token it reaped later tried to write (a stale
  completion, write or heartbeat: the owner was still working), too slow when leases stay
  expired longer than grace + interval.
* **settings from observed data** (R21): lease = runtime p99 × margin (not below a floor),
  heartbeat = lease / 3 at most, grace = one heartbeat + the lateness observed now + twice the
  slowest round trip.

Limits: the doctor does not know the deployed reaper's grace and interval (pass them; the
defaults are the reaper's), and sees lease lengths only through running jobs. Runtime
percentiles come from ``job_events`` (claimed → completed), so pruned history shortens them.
It only reads; it never recovers anything (R20: review before any manual recovery). What it
returns (findings, scope, suggestions) and how that is rendered is :mod:`.doctor_report`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from tenure.core.errors import ConfigError
from tenure.core.repository import ReadStore, RegistryStore
from tenure.observability.doctor_report import (
    EXIT_FINDINGS,
    EXIT_HEALTHY,
    SEVERITIES,
    Finding,
    Report,
    ScopeEntry,
    Suggestion,
    render_text,
    severity_rank,
)
from tenure.reaper.reaper import GRACE_DEFAULT, INTERVAL_DEFAULT
from tenure.worker.heartbeat import MIN_LEASE_TO_HEARTBEAT_RATIO

WINDOW_SECONDS_DEFAULT = 3600.0
LEASE_MARGIN_DEFAULT = 2.0
LEASE_FLOOR_SECONDS_DEFAULT = 10.0
HUNG_RUNTIME_MULTIPLE_DEFAULT = 3.0
HUNG_MIN_SECONDS_DEFAULT = 60.0
RTT_SAMPLES_DEFAULT = 5
SLOW_RTT_SECONDS_DEFAULT = 0.1
SLOW_RTT_HEARTBEAT_FRACTION_DEFAULT = 0.25
LATE_HEARTBEAT_MULTIPLE_DEFAULT = 2.0
RUNNING_LIMIT_DEFAULT = 10_000
EXAMPLES_DEFAULT = 5

__all__ = [
    "EXAMPLES_DEFAULT", "EXIT_FINDINGS", "EXIT_HEALTHY", "HUNG_MIN_SECONDS_DEFAULT",
    "HUNG_RUNTIME_MULTIPLE_DEFAULT", "LATE_HEARTBEAT_MULTIPLE_DEFAULT", "LEASE_FLOOR_SECONDS_DEFAULT",
    "LEASE_MARGIN_DEFAULT", "RTT_SAMPLES_DEFAULT", "RUNNING_LIMIT_DEFAULT", "SEVERITIES",
    "SLOW_RTT_HEARTBEAT_FRACTION_DEFAULT", "SLOW_RTT_SECONDS_DEFAULT", "WINDOW_SECONDS_DEFAULT",
    "Doctor", "DoctorConfig", "Finding", "Report", "ScopeEntry", "Suggestion", "render_text",
]


class DoctorStore(ReadStore, RegistryStore, Protocol):
    """What the doctor reads: the reads area's views, and the workers (registry area)."""


@dataclass(frozen=True)
class DoctorConfig:
    """What the doctor looks at and how it judges."""

    queue: str | None = None
    """Only this queue (None: all queues)."""
    window_seconds: float = WINDOW_SECONDS_DEFAULT
    """History considered for runtime percentiles and reaps."""
    lease_margin: float = LEASE_MARGIN_DEFAULT
    """Suggested lease = runtime p99 × this margin."""
    lease_floor_seconds: float = LEASE_FLOOR_SECONDS_DEFAULT
    """Smallest suggested lease: absorbs jitter, pauses and latency variation (R21)."""
    hung_runtime_multiple: float = HUNG_RUNTIME_MULTIPLE_DEFAULT
    """A renewed job older than this multiple of its task's runtime p99 counts as hung."""
    hung_min_seconds: float = HUNG_MIN_SECONDS_DEFAULT
    """...and older than this (also the limit when the task has no runtime history)."""
    reaper_grace: float = GRACE_DEFAULT
    """The deployed reaper's grace (seconds past expiry before it recovers a job)."""
    reaper_interval: float = INTERVAL_DEFAULT
    """The deployed reaper's interval; expired for longer than grace + interval = too slow."""
    rtt_samples: int = RTT_SAMPLES_DEFAULT
    """Database round trips measured (``db_now``)."""
    slow_rtt_seconds: float = SLOW_RTT_SECONDS_DEFAULT
    """Median round trip above which storage counts as slow..."""
    slow_rtt_heartbeat_fraction: float = SLOW_RTT_HEARTBEAT_FRACTION_DEFAULT
    """...or above this fraction of the shortest live heartbeat interval."""
    late_heartbeat_multiple: float = LATE_HEARTBEAT_MULTIPLE_DEFAULT
    """A heartbeat lag above this multiple of the owner's interval counts as late."""
    running_limit: int = RUNNING_LIMIT_DEFAULT
    """Most running jobs examined (oldest first)."""
    examples: int = EXAMPLES_DEFAULT
    """Job or worker ids listed as evidence per finding."""

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid setting."""
        positive = ("window_seconds", "lease_margin", "hung_runtime_multiple", "reaper_interval",
                    "slow_rtt_seconds", "slow_rtt_heartbeat_fraction", "late_heartbeat_multiple")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"doctor {name.replace('_', ' ')} must be > 0, got {getattr(self, name)}")
        for name in ("lease_floor_seconds", "hung_min_seconds", "reaper_grace"):
            if getattr(self, name) < 0:
                raise ConfigError(f"doctor {name.replace('_', ' ')} must be >= 0, got {getattr(self, name)}")
        for name in ("rtt_samples", "running_limit", "examples"):
            if getattr(self, name) < 1:
                raise ConfigError(f"doctor {name.replace('_', ' ')} must be >= 1, got {getattr(self, name)}")


def _ceil(value: float, step: float) -> float:
    return round(math.ceil(value / step - 1e-9) * step, 6)


def _floor(value: float, step: float) -> float:
    return round(max(step, math.floor(value / step + 1e-9) * step), 6)


class Doctor:
    """Runs the playbook once against one repository (read-only)."""

    def __init__(self, config: DoctorConfig = DoctorConfig()) -> None:
        config.validate()
        self.config = config

    def measure_rtt(self, repo: ReadStore) -> list[float]:
        """Round trips of the ``db_now`` statement, in seconds (the heartbeat's path to storage)."""
        samples = []
        for _ in range(self.config.rtt_samples):
            started = time.perf_counter()
            repo.db_now()
            samples.append(time.perf_counter() - started)
        return samples

    def run_once(self, repo: DoctorStore) -> Report:
        cfg = self.config
        checked_at = repo.db_now()["now"]
        rtt = self.measure_rtt(repo)
        rtt_median, rtt_max = statistics.median(rtt), max(rtt)
        workers = [w for w in repo.worker_list() if cfg.queue is None or cfg.queue in (w["queues"] or [])]
        running = repo.running_jobs(cfg.queue, cfg.running_limit)
        quantiles = {(q["queue_name"], q["task"]): q for q in repo.runtime_quantiles(cfg.window_seconds)
                     if cfg.queue is None or q["queue_name"] == cfg.queue}
        reaps = repo.reap_review(cfg.window_seconds, cfg.queue)
        stats = repo.queue_stats(cfg.queue)

        findings: list[Finding] = []
        findings += self._dead_workers(workers, running)
        findings += self._hung_jobs(running, quantiles)
        late = self._heartbeats_late(running, rtt_median, workers)
        findings += late
        findings += self._slow_storage(rtt, workers)
        findings += self._expired_and_slow_reaper(running)
        findings += self._eager_reaper(reaps)
        suggestions = self._suggestions(quantiles, running, workers, rtt_max)
        findings += self._lease_below_p99(suggestions)
        findings.sort(key=lambda f: (-severity_rank(f.severity), f.code))

        alive = sum(1 for w in workers if w["alive"])
        stopped = sum(1 for w in workers if w["stopped_at"] is not None)
        return Report(
            checked_at=checked_at.isoformat() if isinstance(checked_at, datetime) else str(checked_at),
            queue=cfg.queue, findings=findings, scope=self._scope(running, reaps, workers),
            suggestions=suggestions,
            storage={"rtt_seconds": [round(s, 6) for s in rtt], "rtt_median_seconds": rtt_median,
                     "rtt_max_seconds": rtt_max, "queues": len(stats),
                     "heartbeat_lag_p95_seconds": {s.queue: s.heartbeat_lag_p95_seconds for s in stats}},
            workers={"alive": alive, "silent": len(workers) - alive - stopped, "stopped": stopped},
            settings=asdict(cfg))

    # -- dead vs hung vs slow storage ---------------------------------------------------------
    def _dead_workers(self, workers: list[dict[str, Any]], running: list[dict[str, Any]]) -> list[Finding]:
        held: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for job in running:
            held[job["locked_by"]].append(job)
        out = []
        silent = {w["id"]: w for w in workers if not w["alive"] and w["stopped_at"] is None}
        # Owners of running jobs that the registry no longer knows (row pruned) or saw stop.
        orphan_owners = {j["locked_by"] for j in running if j["owner_status"] in ("unknown", "stopped")}
        for worker_id in sorted(set(silent) | orphan_owners):
            jobs = held.get(worker_id, [])
            w = silent.get(worker_id)
            expired = [j for j in jobs if j["lease_remaining_seconds"] < 0]
            evidence: dict[str, Any] = {
                "worker_id": worker_id,
                "registry": "silent" if w else (jobs[0]["owner_status"] if jobs else "unknown"),
                "jobs_held": len(jobs), "leases_expired": len(expired),
                "job_ids": [j["id"] for j in jobs[: self.config.examples]],
                "queues": sorted({j["queue_name"] for j in jobs}),
                "tasks": sorted({j["task"] for j in jobs}),
            }
            if w:
                evidence.update(host=w["host"], pid=w["pid"], version=w["version"],
                                silent_seconds=w["silent_seconds"], heartbeat_seconds=w["heartbeat_seconds"],
                                last_seen_at=w["last_seen_at"])
            severity = "warning" if jobs else "info"
            what = f"holds {len(jobs)} running job(s), {len(expired)} with an expired lease" if jobs \
                else "holds no jobs (stale registry row; `tenure prune` forgets it)"
            out.append(Finding("dead_worker", severity, f"worker {worker_id} is dead (registry silent): {what}",
                               evidence))
        return out

    def _runtime_limit(self, quantiles: dict[tuple[str, str], dict[str, Any]], queue: str,
                       task: str) -> tuple[float, float | None]:
        q = quantiles.get((queue, task))
        p99 = float(q["p99"]) if q and q["p99"] is not None else None
        limit = self.config.hung_min_seconds
        if p99 is not None:
            limit = max(limit, p99 * self.config.hung_runtime_multiple)
        return limit, p99

    def _hung_jobs(self, running: list[dict[str, Any]],
                   quantiles: dict[tuple[str, str], dict[str, Any]]) -> list[Finding]:
        groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        limits: dict[tuple[str, str], tuple[float, float | None]] = {}
        for job in running:
            key = (job["queue_name"], job["task"])
            limits[key] = limit, _ = self._runtime_limit(quantiles, *key)
            renewed = job["lease_remaining_seconds"] >= 0 and job["heartbeat_lag_seconds"] <= (
                self.config.late_heartbeat_multiple * float(job["owner_heartbeat_seconds"] or 0))
            if job["owner_status"] == "alive" and renewed and job["age_seconds"] > limit:
                groups[key].append(job)
        out = []
        for (queue, task), jobs in sorted(groups.items()):
            limit, p99 = limits[(queue, task)]
            oldest = max(jobs, key=lambda j: j["age_seconds"])
            out.append(Finding(
                "hung_job", "warning",
                f"{len(jobs)} job(s) of {queue}/{task} heartbeat but run far past normal: oldest "
                f"{oldest['age_seconds']:.1f}s vs limit {limit:.1f}s (owner alive: hung handler, not a dead worker)",
                {"queue": queue, "task": task, "jobs": len(jobs),
                 "job_ids": [j["id"] for j in jobs[: self.config.examples]],
                 "owners": sorted({j["locked_by"] for j in jobs})[: self.config.examples],
                 "oldest_age_seconds": oldest["age_seconds"], "runtime_p99_seconds": p99,
                 "limit_seconds": limit,
                 "limit_basis": (f"max({self.config.hung_runtime_multiple:g} x p99, {self.config.hung_min_seconds:g}s)"
                                 if p99 is not None else f"no runtime history: {self.config.hung_min_seconds:g}s"),
                 "heartbeat_lag_seconds": oldest["heartbeat_lag_seconds"]}))
        return out

    def _heartbeats_late(self, running: list[dict[str, Any]], rtt_median: float,
                         workers: list[dict[str, Any]]) -> list[Finding]:
        late = [j for j in running if j["owner_status"] == "alive" and j["owner_heartbeat_seconds"]
                and j["heartbeat_lag_seconds"] > self.config.late_heartbeat_multiple * j["owner_heartbeat_seconds"]]
        if not late:
            return []
        slow = self._rtt_is_slow(rtt_median, workers)
        cause = ("slow storage: the database round trip itself is slow" if slow else
                 "starved heartbeat loop (CPU, GC pause, blocked process): the database answers quickly")
        worst = max(late, key=lambda j: j["heartbeat_lag_seconds"])
        return [Finding(
            "heartbeats_late", "warning",
            f"{len(late)} running job(s) owned by live workers have heartbeats over "
            f"{self.config.late_heartbeat_multiple:g} intervals late; likely {cause}",
            {"jobs": len(late), "job_ids": [j["id"] for j in late[: self.config.examples]],
             "max_heartbeat_lag_seconds": worst["heartbeat_lag_seconds"],
             "owner_heartbeat_seconds": worst["owner_heartbeat_seconds"],
             "rtt_median_seconds": rtt_median, "cause": "slow_storage" if slow else "starved_heartbeat_loop"})]

    def _rtt_limit(self, workers: list[dict[str, Any]]) -> float:
        intervals = [float(w["heartbeat_seconds"]) for w in workers if w["alive"]]
        limit = self.config.slow_rtt_seconds
        if intervals:
            limit = min(limit, min(intervals) * self.config.slow_rtt_heartbeat_fraction)
        return limit

    def _rtt_is_slow(self, rtt_median: float, workers: list[dict[str, Any]]) -> bool:
        return rtt_median > self._rtt_limit(workers)

    def _slow_storage(self, rtt: list[float], workers: list[dict[str, Any]]) -> list[Finding]:
        median = statistics.median(rtt)
        limit = self._rtt_limit(workers)
        if median <= limit:
            return []
        intervals = [float(w["heartbeat_seconds"]) for w in workers if w["alive"]]
        critical = bool(intervals) and median >= min(intervals)
        return [Finding(
            "slow_storage", "critical" if critical else "warning",
            f"database round trip is slow: median {median * 1000:.1f} ms over {len(rtt)} samples "
            f"(limit {limit * 1000:.1f} ms)" + ("; a heartbeat cannot finish within its interval" if critical else ""),
            {"rtt_seconds": rtt, "rtt_median_seconds": median, "limit_seconds": limit,
             "shortest_live_heartbeat_seconds": min(intervals) if intervals else None})]

    # -- the reaper ---------------------------------------------------------------------------
    def _expired_and_slow_reaper(self, running: list[dict[str, Any]]) -> list[Finding]:
        expired = [j for j in running if j["lease_remaining_seconds"] < 0]
        if not expired:
            return []
        cfg = self.config
        overdue_after = cfg.reaper_grace + cfg.reaper_interval
        overdue = [j for j in expired if -j["lease_remaining_seconds"] > overdue_after]
        out = []
        within = [j for j in expired if j not in overdue]
        if within:
            out.append(Finding(
                "expired_leases", "info",
                f"{len(within)} running job(s) hold an expired lease, within the reaper's grace + interval "
                f"({overdue_after:g}s): recovery is due",
                {"jobs": len(within), "job_ids": [j["id"] for j in within[: cfg.examples]],
                 "owners": dict(sorted(_count(j["owner_status"] for j in within).items()))}))
        if overdue:
            worst = max(overdue, key=lambda j: -j["lease_remaining_seconds"])
            out.append(Finding(
                "reaper_too_slow", "warning",
                f"{len(overdue)} job(s) have held an expired lease longer than grace + interval "
                f"({cfg.reaper_grace:g}s + {cfg.reaper_interval:g}s): the reaper is not running, "
                "is failing, or its batch is too small",
                {"jobs": len(overdue), "job_ids": [j["id"] for j in overdue[: cfg.examples]],
                 "max_expired_for_seconds": -worst["lease_remaining_seconds"],
                 "reaper_grace_seconds": cfg.reaper_grace, "reaper_interval_seconds": cfg.reaper_interval,
                 "queues": sorted({j["queue_name"] for j in overdue}),
                 "owners": dict(sorted(_count(j["owner_status"] for j in overdue).items()))}))
        return out

    def _eager_reaper(self, reaps: list[dict[str, Any]]) -> list[Finding]:
        out = []
        for r in reaps:
            if not r["followed_by_stale_write"]:
                continue
            out.append(Finding(
                "reaper_too_eager", "warning",
                f"{r['followed_by_stale_write']} of {r['reaped']} reaped job(s) of {r['queue_name']}/{r['task']} "
                "were still being worked on: the reaped token later tried to write "
                f"({r['followed_by_stale_completion']} stale completion(s)); lease or grace is too short for "
                "the real runtime, so jobs run twice",
                {"queue": r["queue_name"], "task": r["task"], "reaped": r["reaped"],
                 "followed_by_stale_write": r["followed_by_stale_write"],
                 "followed_by_stale_completion": r["followed_by_stale_completion"],
                 "owner_alive_when_reaped": r["owner_alive"],
                 "max_stale_after_seconds": r["max_stale_after_seconds"],
                 "job_ids": list(r["stale_job_ids"] or []), "window_seconds": self.config.window_seconds,
                 "first_reaped_at": r["first_reaped_at"], "last_reaped_at": r["last_reaped_at"]}))
        return out

    # -- scope --------------------------------------------------------------------------------
    def _scope(self, running: list[dict[str, Any]], reaps: list[dict[str, Any]],
               workers: list[dict[str, Any]]) -> list[ScopeEntry]:
        expired: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for j in running:
            if j["lease_remaining_seconds"] < 0:
                expired[(j["queue_name"], j["task"])].append(j)
        reaped = {(r["queue_name"], r["task"]): r for r in reaps}
        versions = {w["id"]: w["version"] for w in workers}
        out = []
        for key in sorted(set(expired) | set(reaped)):
            jobs, r = expired.get(key, []), reaped.get(key)
            times = [j["lease_expires_at"] for j in jobs if j["lease_expires_at"] is not None]
            if r is not None:
                times.append(r["first_reaped_at"])
            owners = sorted({j["locked_by"] for j in jobs})
            out.append(ScopeEntry(
                queue=key[0], task=key[1], expired_now=len(jobs), reaped_in_window=int(r["reaped"]) if r else 0,
                since=min(times).isoformat() if times else None, workers=owners[: self.config.examples],
                worker_versions=sorted({str(v) for v in [*(versions.get(o) for o in owners),
                                                         *(j["owner_version"] for j in jobs)] if v})))
        return out

    # -- suggestions (R21) --------------------------------------------------------------------
    def _suggestions(self, quantiles: dict[tuple[str, str], dict[str, Any]], running: list[dict[str, Any]],
                     workers: list[dict[str, Any]], rtt_max: float) -> list[Suggestion]:
        cfg = self.config
        lateness = [j["heartbeat_lag_seconds"] - float(j["owner_heartbeat_seconds"]) for j in running
                    if j["owner_status"] == "alive" and j["owner_heartbeat_seconds"]]
        observed_late = max([0.0, *lateness])
        out = []
        for (queue, task), q in sorted(quantiles.items()):
            if not q["runs"] or q["p99"] is None:
                continue
            p99 = float(q["p99"])
            lease = max(_ceil(p99 * cfg.lease_margin, 1.0), cfg.lease_floor_seconds)
            heartbeat = _floor(lease / MIN_LEASE_TO_HEARTBEAT_RATIO, 0.1)
            grace = _ceil(heartbeat + observed_late + 2 * rtt_max, 1.0)
            leases = [j["lease_remaining_seconds"] + j["heartbeat_lag_seconds"] for j in running
                      if (j["queue_name"], j["task"]) == (queue, task) and j["lease_remaining_seconds"] >= 0]
            hbs = [float(w["heartbeat_seconds"]) for w in workers if w["alive"] and queue in (w["queues"] or [])]
            if not leases:  # nothing running: the leases live workers registered with
                leases = [float(w["lease_seconds"]) for w in workers
                          if w["alive"] and w.get("lease_seconds") and queue in (w["queues"] or [])]
            out.append(Suggestion(
                queue=queue, task=task, runs=int(q["runs"]), runtime_p50_seconds=float(q["p50"]),
                runtime_p99_seconds=p99, lease_seconds=lease, heartbeat_seconds=heartbeat, grace_seconds=grace,
                current_lease_seconds=round(statistics.median(leases), 3) if leases else None,
                current_heartbeat_seconds=max(hbs) if hbs else None,
                basis=(f"lease = max(p99 {p99:.3f}s x {cfg.lease_margin:g}, floor {cfg.lease_floor_seconds:g}s); "
                       f"heartbeat = lease/{MIN_LEASE_TO_HEARTBEAT_RATIO:g} at most; grace = heartbeat + observed "
                       f"lateness {observed_late:.3f}s + 2 x max round trip {rtt_max:.4f}s "
                       f"({q['runs']} run(s) in the last {cfg.window_seconds:g}s)")))
        return out

    def _lease_below_p99(self, suggestions: list[Suggestion]) -> list[Finding]:
        out = []
        for s in suggestions:
            if s.current_lease_seconds is not None and s.current_lease_seconds < s.runtime_p99_seconds:
                out.append(Finding(
                    "lease_below_runtime_p99", "warning",
                    f"{s.queue}/{s.task}: the lease ({s.current_lease_seconds:g}s) is shorter than the runtime p99 "
                    f"({s.runtime_p99_seconds:.1f}s); every slow run depends on heartbeats (suggest "
                    f"{s.lease_seconds:g}s)",
                    {"queue": s.queue, "task": s.task, "current_lease_seconds": s.current_lease_seconds,
                     "runtime_p99_seconds": s.runtime_p99_seconds, "suggested_lease_seconds": s.lease_seconds}))
        return out


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[str(item)] += 1
    return dict(counts)
