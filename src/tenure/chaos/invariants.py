"""The invariants a chaos run must satisfy, checked from what the database recorded.

Pure functions over rows read by :class:`tenure.chaos.store.ChaosStore` (no SQL, no clock):
times are epoch seconds by the database clock. Each invariant yields a list of violations
(empty = holds); figures are reported whatever the outcome.

- ``all_terminal``: every planned job exists once and is completed or failed with a cause.
- ``guarded_effect_exactly_once``: one applied guarded effect per completed job (at most one for
  a dead-lettered job) and the execution store marks it succeeded.
- ``guarded_body_once_across_restart``: a job whose worker saw PostgreSQL restart between its
  guarded body and ``eff.succeeded()`` (``restart_in_gap``) ran that body exactly once.
- ``single_completion``: at most one accepted completion per job, exactly one if completed.
- ``stale_writes_fenced``: every accepted completion carries the final claim's token; no write
  carrying a reaped token is accepted after its reap; every reaped attempt whose process
  survived long enough to write again either left a recorded rejection (``heartbeat_lost``,
  ``stale_completion_rejected`` or ``stale_write_rejected``) or provably wrote nothing: its
  handler stopped on ``LeaseLost`` from ``check_lease()`` before any write (noted by the chaos
  task as ``self_fenced``), or its ``eff.succeeded()`` was rejected by the execution store
  (``effect_succeed_rejected``; counted apart, as the core records it only in a metric).
- ``no_early_reap``: each reap happened more than ``grace`` after the attempt's lease expiry as
  far as it can be known: the claim's lease (claim time + lease, exact), the latest expiry the
  harness sampled while the attempt ran, and the expiry in the reap event's detail when the core
  records it.
- ``recovery_bounded``: each reap caused by a killed, stopped or partitioned process came within
  lease + heartbeat + grace + reaper interval + margin of the fault; a hung handler's within
  max_lease_total + heartbeat + grace + reaper interval + margin of its claim.
- ``success_not_rerun`` (issue 40): no attempt whose handler had returned successfully (the chaos
  task notes it in ``chaos_returns`` as its last act) was reaped afterwards, which would run its
  job again (or dead-letter it), unless its process was killed, stopped or partitioned, or the
  database restarted or failed over: a slow acknowledgement alone must never cost a finished
  job its lease. A reap is the only way a running attempt goes back to the queue (a timeout's
  retry and a cancel are the worker's and the user's own verdicts), so this is "no second attempt
  after a successful one".
- ``held_within_capacity`` (issue 40): in every sample the harness took (every tick, about
  0.1 s), no worker held more running jobs under unexpired leases than its registered
  concurrency. Its handlers in flight plus its finished jobs whose outcomes are not yet written
  are exactly those rows, so a worker that went on claiming while its acknowledgements waited
  shows here. A row whose lease expired is the reaper's, not the worker's (the worker gave it up
  at its local deadline, which never comes after the database's expiry); samples within a
  SIGSTOP or partition of that worker, or a restart or failover, plus the recovery bound, and
  rows of hung handlers (whose capped lease ends as the worker claims again), are excused.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from tenure.core.repository import REJECTED_WRITE_EVENTS

Row = dict[str, Any]

INVARIANTS = ("all_terminal", "guarded_effect_exactly_once", "guarded_body_once_across_restart", "single_completion",
              "stale_writes_fenced", "no_early_reap", "recovery_bounded", "cancel_sticks", "pause_respected",
              "timeout_retried", "success_not_rerun", "held_within_capacity", "flow_within_limit",
              "rate_within_limit", "keys_served")
KILL_KINDS = ("kill_before_effect", "kill_after_effect", "kill_during_ack")
HELD_KINDS = ("sigstop", "partition_drop", "partition_blackhole")
"""Faults that hold one worker process away from the database for longer than its lease."""
SLOW = "slow_completions"
"""The fault that holds every completion back (``job_history`` locked), and the reap cause it gives."""
EPSILON = 0.002
"""Seconds of float rounding tolerated when comparing DB timestamps converted to epochs."""
REJECTION_SETTLE = 7.0
"""Seconds (plus two heartbeats) a surviving process gets to record the rejection of its stale attempt:
the worker's reconnect backoff (up to 5 s after a restart or partition) plus 2 s. A process that exits
sooner is not asked for evidence (the 30-minute soak flagged 6 attempts of a worker restarted 5 s
after a PostgreSQL restart, when this was 2 s)."""


@dataclass(frozen=True)
class Timing:
    """The timing settings the bounds are computed from."""

    lease: float
    grace: float
    reaper_interval: float
    heartbeat: float
    max_lease_total: float
    margin: float

    @property
    def recovery_bound(self) -> float:
        return self.lease + self.heartbeat + self.grace + self.reaper_interval + self.margin

    @property
    def hang_bound(self) -> float:
        return self.max_lease_total + self.heartbeat + self.grace + self.reaper_interval + self.margin


@dataclass
class Verdict:
    """Violations per invariant plus the figures of the run."""

    violations: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in INVARIANTS})
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value).timestamp()
    return None


def check_jobs(verdict: Verdict, jobs: Sequence[Row], planned: int) -> None:
    v = verdict.violations
    seen = Counter(int(j["n"]) for j in jobs if j["n"] is not None)
    missing = sorted(set(range(planned)) - set(seen))
    duplicated = sorted(n for n, c in seen.items() if c > 1)
    if missing:
        v["all_terminal"].append(f"{len(missing)} planned job(s) never stored, e.g. n={missing[:5]}")
    if duplicated:
        v["all_terminal"].append(f"{len(duplicated)} job(s) stored twice, e.g. n={duplicated[:5]}")
    status = Counter(str(j["status"]) for j in jobs)
    dlq_causes = Counter(str(j["last_error_code"]) for j in jobs if j["status"] == "failed")
    unguarded_dups = 0
    jobs_with_unguarded_dups = 0
    provider_dedups = 0
    for j in jobs:
        jid, st = j["id"], j["status"]
        if st not in ("completed", "failed", "cancelled"):
            v["all_terminal"].append(f"job {jid} (n={j['n']}) stuck in {st} after {j['attempt_count']} attempt(s)")
        if st == "failed" and not j["last_error_code"]:
            v["all_terminal"].append(f"job {jid} dead-lettered without a cause")
        if j["completions"] > 1:
            v["single_completion"].append(f"job {jid} has {j['completions']} accepted completions")
        if st == "completed" and j["completions"] != 1:
            v["single_completion"].append(f"job {jid} is completed with {j['completions']} completion events")
        if st != "completed" and j["completions"]:
            v["single_completion"].append(f"job {jid} is {st} but has a completion event")
        final = j["final_claim_token"]
        for token in j.get("unrecorded_tokens") or []:
            v["stale_writes_fenced"].append(
                f"job {jid}: a write by token {str(token)[:8]} was rejected but no attempt record has that token")
        for token in j["completion_tokens"] or []:
            if token != final:
                v["stale_writes_fenced"].append(
                    f"job {jid}: completion by token {str(token)[:8]} is not the final claim's {str(final)[:8]}")
        if st == "completed":
            if j["guarded"] != 1:
                v["guarded_effect_exactly_once"].append(f"completed job {jid} applied its guarded effect "
                                                        f"{j['guarded']} times")
            if not j["execution_succeeded"]:
                v["guarded_effect_exactly_once"].append(f"completed job {jid}: execution store not succeeded")
        elif j["guarded"] > 1:
            v["guarded_effect_exactly_once"].append(f"job {jid} applied its guarded effect {j['guarded']} times")
        body_runs = int(j["guarded"]) + int(j["provider_dedups"])
        if j["planned_fault"] == "restart_in_gap" and body_runs > 1:
            v["guarded_body_once_across_restart"].append(
                f"job {jid}: PostgreSQL restarted between its guarded body and success, and the body ran {body_runs} times")
        if j["unguarded"] > 1:
            unguarded_dups += j["unguarded"] - 1
            jobs_with_unguarded_dups += 1
        provider_dedups += j["provider_dedups"]
    verdict.figures.update({
        "jobs_planned": planned,
        "jobs_stored": len(jobs),
        "jobs_completed": status.get("completed", 0),
        "jobs_dead_lettered": status.get("failed", 0),
        "jobs_cancelled": status.get("cancelled", 0),
        "dead_letter_causes": dict(sorted(dlq_causes.items())),
        "attempts": sum(int(j["claims"]) for j in jobs),
        "redelivered_jobs": sum(1 for j in jobs if j["claims"] > 1),
        "guarded_effects_applied": sum(int(j["guarded"]) for j in jobs),
        "guarded_provider_dedups": provider_dedups,
        "unguarded_effects": sum(int(j["unguarded"]) for j in jobs),
        "unguarded_duplicates": unguarded_dups,
        "jobs_with_unguarded_duplicates": jobs_with_unguarded_dups,
    })


@dataclass(frozen=True)
class _Window:
    kind: str
    pid: int | None
    start: float
    end: float


class FaultWindows(NamedTuple):
    """The journaled faults as the reap checks read them."""

    windows: list[_Window]
    """Process-level windows (kills, stops, partitions, restarts, failovers)."""
    exits: dict[int, float]
    """First exit time per pid."""
    hangs: dict[str, Row]
    """Hang fault per lock token."""


def _database_wide(kind: str) -> bool:
    """A fault that took the database away from every process (a restart, a failover)."""
    return kind == "pg_restart" or kind.startswith("failover_")


def _fault_windows(faults: Iterable[Row]) -> FaultWindows:
    windows: list[_Window] = []
    exits: dict[int, float] = {}
    hangs: dict[str, Row] = {}
    for f in faults:
        kind, start = str(f["kind"]), float(f["started_at"])
        end = float(f["ended_at"]) if f["ended_at"] is not None else start
        pid = int(f["pid"]) if f["pid"] is not None else None
        if kind in KILL_KINDS:
            windows.append(_Window("kill", pid, start, start))
        elif kind == "process_exit" and pid is not None:
            exits[pid] = min(exits.get(pid, start), start)
            windows.append(_Window("kill", pid, start, start))
        elif kind == "worker_recycled" and pid is not None:  # a graceful restart: gone, not killed
            exits[pid] = min(exits.get(pid, start), start)
        elif kind == "hang" and f["lock_token"] is not None:
            hangs[str(f["lock_token"])] = f
        elif kind in HELD_KINDS:
            windows.append(_Window(kind, pid, start, end))
        elif _database_wide(kind) or kind == SLOW:  # the database went away, or stopped taking completions
            windows.append(_Window(kind, None, start, end))
    return FaultWindows(windows, exits, hangs)


class Attribution(NamedTuple):
    """Which fault a reap is blamed on, and the recovery bound it is held to."""

    cause: str
    """``kill``, ``hang``, a window's kind, or ``unexplained``."""
    since: float | None
    """When recovery started counting (None: not measured)."""
    bound: float
    fault_end: float
    """When the fault was over (the survivor's rejection is expected after it)."""


def _no_early_reap(r: Row, timing: Timing) -> str | None:
    """The violation when ``r`` was reaped before its lease expiry plus the grace (or cannot be placed)."""
    jid, token, reaped_at = r["job_id"], str(r["lock_token"]), float(r["reaped_at"])
    claimed_at = float(r["claimed_at"]) if r["claimed_at"] is not None else None
    known = [float(x) for x in (
        (claimed_at + timing.lease) if claimed_at is not None else None,
        r["sampled_lease_expires_at"],
        _epoch((r["detail"] or {}).get("lease_expires_at")),
    ) if x is not None]
    if not known:
        return f"job {jid}: reap of token {token[:8]} with no claim event"
    if reaped_at - max(known) < timing.grace - EPSILON:
        return (f"job {jid}: token {token[:8]} reaped {reaped_at - max(known):.3f}s after its lease expiry "
                f"(grace {timing.grace:g}s)")
    return None


def _attribute(r: Row, faults: FaultWindows, timing: Timing) -> Attribution:
    """Blame a reap on a hang of its token, else a kill or a hold of its process, else a database outage."""
    token, reaped_at = str(r["lock_token"]), float(r["reaped_at"])
    claimed_at = float(r["claimed_at"]) if r["claimed_at"] is not None else None
    pid = int(r["pid"]) if r["pid"] is not None else None
    if token in faults.hangs:
        return Attribution("hang", claimed_at, timing.hang_bound, reaped_at)
    own = [w for w in faults.windows if w.pid is not None and w.pid == pid
           and (claimed_at is None or w.end >= claimed_at - EPSILON) and w.start <= reaped_at + EPSILON]
    kills = [w for w in own if w.kind == "kill"]
    held = [w for w in own if w.kind != "kill"]
    restarts = [w for w in faults.windows if _database_wide(w.kind) and w.start <= reaped_at
                and reaped_at <= w.end + timing.recovery_bound + 10]
    slow = [w for w in faults.windows if w.kind == SLOW and w.start <= reaped_at <= w.end + timing.recovery_bound]
    if kills:
        return Attribution("kill", min(w.start for w in kills), timing.recovery_bound, reaped_at)
    if held:
        w = held[0]
        return Attribution(w.kind, max(w.start, claimed_at or w.start), timing.recovery_bound, max(w.end, reaped_at))
    if restarts:
        w = restarts[-1]
        return Attribution(w.kind, w.start, (w.end - w.start) + timing.recovery_bound + 10, max(w.end, reaped_at))
    if slow:  # not a recovery from anything: a lease the worker failed to keep while completions waited
        w = slow[-1]
        return Attribution(w.kind, w.start, (w.end - w.start) + timing.recovery_bound, max(w.end, reaped_at))
    return Attribution("unexplained", None, timing.recovery_bound, reaped_at)


def _excuses_rerun(cause: str) -> bool:
    """Whether a reap's cause lets a finished attempt be run again: its process died, was held
    away from the database past its lease, or the database itself went away."""
    return cause == "kill" or cause in HELD_KINDS or _database_wide(cause)


def _unbounded(cause: str) -> bool:
    """Reap causes reported but not held to the recovery bound (the reapers were cut off too, or
    nothing was to be recovered from)."""
    return _database_wide(cause) or cause == SLOW


def _fence_outcome(r: Row) -> str:
    """How a surviving worker's reaped attempt shows it was fenced; ``missing`` when nothing does.

    ``self_fenced``: stopped on check_lease() before writing anything, nothing to reject.
    ``effect_succeed_rejected``: rejected by the execution store; job_events lacks it (core gap).
    ``claim_never_delivered`` (HA runs): the claim committed (and replicated) but the primary failed
    before the worker read the reply, so no handler ever ran under this token (ledger).
    """
    if r["rejections_recorded"]:
        return "recorded"
    fence = r.get("worker_fence")
    if fence in ("self_fenced", "effect_succeed_rejected", "claim_never_delivered"):
        return str(fence)
    return "missing"


def check_reaps(verdict: Verdict, reaps: Sequence[Row], faults: Sequence[Row], timing: Timing,
                run_end: float) -> None:
    v = verdict.violations
    windows = _fault_windows(faults)
    recovery: dict[str, list[float]] = defaultdict(list)
    unexplained: list[str] = []
    fenced: Counter[str] = Counter()
    rerun: Counter[str] = Counter()
    for r in reaps:
        jid, token = r["job_id"], str(r["lock_token"])
        reaped_at = float(r["reaped_at"])
        pid = int(r["pid"]) if r["pid"] is not None else None
        early = _no_early_reap(r, timing)
        if early is not None:
            v["no_early_reap"].append(early)
        if r["accepted_after"]:
            v["stale_writes_fenced"].append(f"job {jid}: {r['accepted_after']} write(s) by reaped token "
                                            f"{token[:8]} accepted after the reap")
        blame = _attribute(r, windows, timing)
        if blame.cause == "unexplained":
            unexplained.append(f"job {jid} token {token[:8]} (pid {pid})")
        elif blame.since is not None:
            took = reaped_at - blame.since
            recovery[blame.cause].append(took)
            if not _unbounded(blame.cause) and took > blame.bound + EPSILON:
                v["recovery_bounded"].append(f"job {jid}: {blame.cause} recovered after {took:.2f}s "
                                             f"(bound {blame.bound:.2f}s)")
        # -- a finished attempt must keep its lease until its outcome is written (issue 40) -----
        returned_at = r.get("returned_at")
        if returned_at is not None and float(returned_at) <= reaped_at + EPSILON:
            if _excuses_rerun(blame.cause):
                rerun[blame.cause] += 1
            else:
                rerun["violations"] += 1
                then = "dead-lettered" if r["event"] == "reaped_to_dead_letter" else "queued to run again"
                v["success_not_rerun"].append(
                    f"job {jid}: attempt {token[:8]} (pid {pid}) returned success, its outcome was not written, "
                    f"and it was reaped {reaped_at - float(returned_at):.2f}s later and {then} "
                    f"(cause: {blame.cause})")
        # -- the survivor must have recorded its rejection ----------------------------------
        if pid is not None and blame.cause != "kill":
            alive_until = windows.exits.get(pid, run_end)
            if alive_until >= max(reaped_at, blame.fault_end) + 2 * timing.heartbeat + REJECTION_SETTLE:
                fenced["checked"] += 1
                outcome = _fence_outcome(r)
                fenced[outcome] += 1
                if outcome == "missing":
                    v["stale_writes_fenced"].append(
                        f"job {jid}: reaped token {token[:8]} of surviving pid {pid} ({blame.cause}) left no "
                        f"recorded rejection")
    killed = recovery.get("kill", [])
    all_faulted = [x for kind, xs in recovery.items() if not _unbounded(kind) for x in xs]
    verdict.figures.update({
        "reaps": len(reaps),
        "reaps_by_cause": {k: len(xs) for k, xs in sorted(recovery.items())} | (
            {"unexplained": len(unexplained)} if unexplained else {}),
        "unexplained_reaps": unexplained[:20],
        "recovery_seconds_killed": _stats(killed),
        "recovery_seconds_all_faults": _stats(all_faulted),
        "recovery_seconds_by_cause": {k: _stats(xs) for k, xs in sorted(recovery.items())},
        "recovery_bound_seconds": round(timing.recovery_bound, 3),
        "hang_recovery_bound_seconds": round(timing.hang_bound, 3),
        "fenced_attempts_checked": fenced["checked"],
        "fenced_attempts_with_recorded_rejection": fenced["recorded"],
        "fenced_attempts_self_fenced_before_writing": fenced["self_fenced"],
        "fenced_attempts_effect_succeed_rejected_unrecorded": fenced["effect_succeed_rejected"],
        "fenced_attempts_claim_never_delivered": fenced["claim_never_delivered"],
        "returned_attempts_reaped": {"excused": sum(n for k, n in rerun.items() if k != "violations"),
                                     "violations": rerun["violations"],
                                     "excused_by": {k: n for k, n in sorted(rerun.items()) if k != "violations"}},
    })


def _excuses_capacity(w: _Window, pid: int | None, at: float, timing: Timing) -> bool:
    """Whether fault window ``w`` explains a sample of worker ``pid`` at ``at`` above its concurrency:
    the worker was held away from the database (its own SIGSTOP or partition) or the database went
    away, and the sample falls within the fault or the recovery bound after it. A lease renewed in
    the database whose answer never reached the worker makes it give the job up (and claim again)
    while the row still looks held."""
    if not (w.start - EPSILON <= at <= w.end + timing.recovery_bound):
        return False
    return (w.kind in HELD_KINDS and w.pid is not None and w.pid == pid) or _database_wide(w.kind)


def check_capacity(verdict: Verdict, samples: Sequence[Row], faults: Sequence[Row], timing: Timing) -> None:
    """``held_within_capacity`` over the harness's samples (``chaos_capacity_samples``: one row per
    worker holding any running job under an unexpired lease, per sample; tokens when above)."""
    windows = _fault_windows(faults)
    slow = [w for w in windows.windows if w.kind == SLOW]
    excused: Counter[str] = Counter()
    above: dict[str, list[Row]] = defaultdict(list)
    for s in samples:
        held, cap, at = int(s["held"]), int(s["concurrency"]), float(s["sampled_at"])
        if held <= cap:
            continue
        pid = int(s["pid"]) if s["pid"] is not None else None
        hung = sum(1 for t in s["tokens"] or [] if str(t) in windows.hangs)
        cover = next((w for w in windows.windows if _excuses_capacity(w, pid, at, timing)), None)
        if held - hung <= cap:
            excused["hang"] += 1
        elif cover is not None:
            excused[cover.kind] += 1
        else:
            above[str(s["worker_id"])].append(s)
    for worker, rows in above.items():
        peak = max(rows, key=lambda r: int(r["held"]))
        verdict.violations["held_within_capacity"].append(
            f"worker {worker} (pid {peak['pid']}, concurrency {peak['concurrency']}) held up to {peak['held']} "
            f"running jobs under unexpired leases, in {len(rows)} sample(s) from {float(rows[0]['sampled_at']):.1f} "
            f"to {float(rows[-1]['sampled_at']):.1f}" + (" (while completions were held back)" if any(
                w.start <= float(r["sampled_at"]) <= w.end for r in rows for w in slow) else ""))
    during = [int(s["held"]) for s in samples if any(w.start <= float(s["sampled_at"]) <= w.end for w in slow)]
    verdict.figures["capacity"] = {
        "samples": len(samples),
        "peak_held": max((int(s["held"]) for s in samples), default=None),
        "concurrency": max((int(s["concurrency"]) for s in samples), default=None),
        "samples_above": sum(excused.values()) + sum(len(rows) for rows in above.values()),
        "excused": dict(sorted(excused.items())),
        "samples_during_slow_completions": len(during),
        "peak_held_during_slow_completions": max(during, default=None),
    }


def _stats(values: Sequence[float]) -> dict[str, float | int | None]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)
    return {"n": len(values), "p50": r(quantile(values, 0.5)), "p99": r(quantile(values, 0.99)),
            "max": r(max(values) if values else None)}


def check_all(*, jobs: Sequence[Row], reaps: Sequence[Row], faults: Sequence[Row], events: dict[str, int],
              planned: int, timing: Timing, run_end: float, capacity: Sequence[Row] = ()) -> Verdict:
    """Every invariant but the job-control ones (:func:`check_job_control`); ``capacity`` is the
    harness's held-job samples (none: ``held_within_capacity`` holds vacuously, with 0 samples)."""
    verdict = Verdict()
    check_jobs(verdict, jobs, planned)
    check_reaps(verdict, reaps, faults, timing, run_end)
    check_capacity(verdict, capacity, faults, timing)
    kinds = Counter(str(f["kind"]) for f in faults)
    during_ack = [f for f in faults if f["kind"] == "kill_during_ack"]
    completed_tokens = {str(t) for j in jobs for t in (j["completion_tokens"] or [])}
    verdict.figures.update({
        "faults_injected": dict(sorted(kinds.items())),
        "kill_during_ack_outcomes": {
            "ack_committed_first": sum(1 for f in during_ack if str(f["lock_token"]) in completed_tokens),
            "killed_first": sum(1 for f in during_ack if str(f["lock_token"]) not in completed_tokens)},
        "stale_writes_rejected": {k: events.get(k, 0) for k in REJECTED_WRITE_EVENTS},
        "stale_writes_rejected_total": sum(events.get(k, 0) for k in REJECTED_WRITE_EVENTS),
        "events": dict(sorted(events.items())),
        "restart_in_gap_fired": kinds.get("restart_in_gap", 0),
        "guarded_body_reruns_by_planned_fault": dict(sorted(Counter(
            str(j["planned_fault"]) for j in jobs for _ in range(int(j["provider_dedups"]))).items())),
    })
    return verdict

