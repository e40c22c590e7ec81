"""The flow-control invariants of a chaos run (issue 38 under faults).

- ``flow_within_limit``: no flow key ever has more running jobs than the queue's per-key limit,
  across SIGKILL, SIGSTOP, partitions and PostgreSQL restarts. The claim counts running rows, not
  live leases, so a frozen worker's job keeps its key's slot until the reaper takes it, and the
  bound holds with no fault excused.
- ``rate_within_limit``: the attempts of the jobs naming the run's rate limit never start more
  units in one second than its rate plus its burst, with no fault excused.
- ``keys_served``: no key with a runnable job and room under its running limit waits longer than
  :attr:`Service.bound` for its next start, beyond the time faults excuse.

The last two read every attempt (``chaos_attempts``): an attempt starts at its claim's ``now()``
(``started_at``, the clock the bucket is refilled by) and ends at the record that ended it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tenure.chaos.invariants import HELD_KINDS, SLOW, Row, Timing, Verdict, quantile

WINDOW = 1.0
"""Seconds of the sliding window ``rate_within_limit`` counts starts in."""
REQUEUED = frozenset({"reaped_due_to_expired_lease", "retry_scheduled", "released", "deferred", "rate_limited"})
"""Records that end an attempt and put its job back in the queue, runnable after their delay
(``delay_seconds`` or ``retry_after`` in ``detail``). A release or deferral records none, so its
job counts as runnable at once: a deferral waits 1 s (the chaos task's ``defer_seconds``), which
overstates that one wait by 1 s at most, inside the margin."""
EPSILON = 0.002
"""Seconds of float rounding tolerated on database times converted to epochs."""
_END, _GONE, _AVAILABLE, _START = range(4)
"""Order of a key's events at one instant: a slot frees and a cancelled job leaves before a job
becomes runnable, and a job is runnable before its start."""


def check_flow(verdict: Verdict, samples: Sequence[Row], *, per_key_running: int) -> None:
    """``flow_within_limit`` over the harness's samples (``chaos_flow_samples``: per sample, the
    key with the most running rows, and how many of those hold an unexpired lease)."""
    if per_key_running <= 0:
        verdict.figures["flow"] = {"per_key_running": None, "samples": len(samples)}
        return
    above = [s for s in samples if int(s["running"]) > per_key_running]
    if above:
        peak = max(above, key=lambda s: int(s["running"]))
        verdict.violations["flow_within_limit"].append(
            f"flow key {peak['flow_key']!r} had {peak['running']} running jobs ({peak['live']} under live leases) "
            f"against a limit of {per_key_running}, in {len(above)} sample(s) from "
            f"{float(above[0]['sampled_at']):.1f} to {float(above[-1]['sampled_at']):.1f}")
    verdict.figures["flow"] = {
        "per_key_running": per_key_running,
        "samples": len(samples),
        "peak_running_per_key": max((int(s["running"]) for s in samples), default=None),
        "peak_live_per_key": max((int(s["live"]) for s in samples), default=None),
        "samples_at_limit": sum(1 for s in samples if int(s["running"]) == per_key_running),
        "samples_above": len(above),
    }


# -- rate_within_limit ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RateLimit:
    """The run's rate limit: one shared bucket of ``burst`` tokens refilled at ``per_second``."""

    name: str
    per_second: float
    burst: int

    @property
    def allowed(self) -> float:
        """Units that may start in one closed window of :data:`WINDOW` seconds: a full bucket at its
        start plus the refill during it."""
        return self.burst + self.per_second * WINDOW


def check_rate(verdict: Verdict, attempts: Sequence[Row], *, limit: RateLimit | None, every_job: bool = False) -> None:
    """``rate_within_limit``: sliding a closed :data:`WINDOW` over the sorted start times of every
    attempt of a job naming ``limit`` (a reaped or refused attempt too: its claim took the tokens),
    the units started in it never exceed ``burst + per_second``. Figures also replay the bucket
    over the starts: how many left it below one unit (the limit was binding then), and its lowest
    level (below 0 would mean more was taken over some longer interval than the bucket allows).

    ``every_job``: the producer enqueued every job naming ``limit``, so each one counts, and a job
    whose stored row names no such limit (``jobs.rate_limit``, ``job_history.rate_limit`` once it
    completed) is a violation too: the claim would not have held it back."""
    if limit is None:
        verdict.figures["rate"] = {"limit": None}
        return
    unnamed = sorted({int(a["job_id"]) for a in attempts if a["rate_limit"] != limit.name})
    if every_job and unnamed:
        verdict.violations["rate_within_limit"].append(
            f"{len(unnamed)} job(s) enqueued naming rate limit {limit.name!r} are stored naming none, e.g. ids "
            f"{unnamed[:5]}")
    starts = sorted((float(a["started_at"]), int(a["rate_units"] or 1), str(a["event"] or "running"))
                    for a in attempts if a["started_at"] is not None and (every_job or a["rate_limit"] == limit.name))
    peak, lo, in_window = 0, 0, 0
    above: list[tuple[float, int]] = []
    tokens, last, lowest, dry = float(limit.burst), None, float(limit.burst), 0
    for t, units, _ in starts:
        in_window += units
        while t - starts[lo][0] > WINDOW:
            in_window -= starts[lo][1]
            lo += 1
        peak = max(peak, in_window)
        if in_window > limit.allowed + 1e-9:
            above.append((t, in_window))
        if last is not None:
            tokens = min(float(limit.burst), tokens + limit.per_second * (t - last))
        tokens, last = tokens - units, t
        lowest = min(lowest, tokens)
        dry += tokens < 1
    if above:
        worst = max(above, key=lambda a: a[1])
        verdict.violations["rate_within_limit"].append(
            f"rate limit {limit.name!r} ({limit.per_second:g}/s, burst {limit.burst}) started {worst[1]} units in "
            f"the second up to {worst[0]:.3f} (at most {limit.allowed:g}); {len(above)} window(s) above, from "
            f"{above[0][0]:.1f} to {above[-1][0]:.1f}")
    verdict.figures["rate"] = {
        "limit": limit.name, "per_second": limit.per_second, "burst": limit.burst,
        "allowed_per_window": limit.allowed, "starts": len(starts), "jobs_stored_without_it": len(unnamed),
        "reaped_starts": sum(1 for _, _, event in starts if event.startswith("reaped")),
        "peak_units_in_window": peak, "windows_above": len(above),
        "starts_leaving_bucket_dry": dry, "replayed_lowest_tokens": round(lowest, 3) if starts else None,
    }


# -- keys_served ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Service:
    """What ``keys_served``'s bound is made of (the run's settings)."""

    keys: int
    """Positions of the claim's ring: the flow keys (jobs without a key are one more; 1 without keys)."""
    per_key_running: int
    """The queue's running limit per key (0: none)."""
    slots: int
    """Handler slots of the fleet: workers x concurrency."""
    work_max: float
    """Seconds of the longest simulated job."""
    poll: float
    """Seconds an idle worker may wait before it claims again."""
    margin: float
    """Slack for a noisy host (``--recovery-margin``)."""
    per_second: float = 0.0
    """The rate limit's rate (0: none)."""
    units: int = 1
    """Units each job takes from the bucket."""

    @property
    def turn(self) -> float:
        """Seconds one job of the ring may take to claim while other keys are served: a handler slot
        frees at least every ``work_max / slots`` while all are busy, and the bucket refills one
        job's units every ``units / per_second``."""
        rate = self.units / self.per_second if self.per_second else 0.0
        return max(self.work_max / self.slots, rate)

    @property
    def bound(self) -> float:
        """The longest wait allowed: the claim visits the keys round-robin, one job per visit (weight
        1), so a key with a runnable job and room is reached within ``keys`` claimed jobs; they take at
        most ``keys x turn``, plus ``work_max`` for the first busy slot to free, two poll intervals (the
        worker that may claim is idle, or was told to retry when the bucket refills) and the margin."""
        return self.keys * self.turn + self.work_max + 2 * self.poll + self.margin


def _stall_windows(faults: Iterable[Row], timing: Timing) -> list[tuple[float, float]]:
    """Times no key can be expected to be served, merged: a queue pause; slow completions (every
    handler slot holds a finished job whose outcome waits); a SIGSTOP or partition of a worker (it
    may hold the queue's claim gate or the bucket's row in an open transaction until it is back);
    and a database restart or failover plus the recovery bound (the workers reconnect with a
    backoff). Nothing else is excused: a killed worker's session ends with it, and the other
    workers go on claiming meanwhile (its jobs hold their keys' slots until reaped, and a key at
    its limit is not waiting); hangs and overruns take one slot each, which the bound absorbs."""
    spans: list[tuple[float, float]] = []
    for f in faults:
        kind, start = str(f["kind"]), float(f["started_at"])
        end = float(f["ended_at"]) if f["ended_at"] is not None else start
        if kind in HELD_KINDS or kind in (SLOW, "queue_pause"):
            spans.append((start, end))
        elif kind == "pg_restart" or kind.startswith("failover_"):  # database-wide, as in invariants
            spans.append((start, end + timing.recovery_bound))
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(start: float, end: float, windows: Sequence[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, w_end) - max(start, w_start)) for w_start, w_end in windows)


def _key_events(attempts: Sequence[Row]) -> tuple[dict[str, list[tuple[float, int]]], list[float]]:
    """Per key ('' for jobs without one), its events: a job runnable (enqueued, or back in the queue
    after its record's delay), started, ended, or cancelled while pending. Also every attempt's wait
    from runnable to start."""
    by_job: dict[int, list[Row]] = defaultdict(list)
    for a in attempts:
        by_job[int(a["job_id"])].append(a)
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    waits: list[float] = []
    for rows in by_job.values():
        first = rows[0]
        key = str(first["flow_key"] or "")
        available: float | None = float(first["created_at"])
        for a in sorted((r for r in rows if r["started_at"] is not None), key=lambda r: float(r["started_at"])):
            start = float(a["started_at"])
            if available is not None:
                events[key].append((min(available, start), _AVAILABLE))
                waits.append(max(0.0, start - available))
            events[key].append((start, _START))
            if a["ended_at"] is None:
                available = None
                break
            events[key].append((float(a["ended_at"]), _END))
            available = float(a["ended_at"]) + float(a["delay"] or 0) if a["event"] in REQUEUED else None
        if available is not None:  # runnable after its last attempt, or never claimed
            events[key].append((available, _AVAILABLE))
            if first["cancelled_pending_at"] is not None:
                events[key].append((max(available, float(first["cancelled_pending_at"])), _GONE))
    return events, waits


def _gaps(events: list[tuple[float, int]], limit: int, run_end: float) -> list[tuple[float, float]]:
    """The key's waits: from the moment it has a runnable job and room under ``limit`` (0: none)
    to its next start, or to ``run_end`` when none came."""
    runnable = running = 0
    since: float | None = None
    gaps: list[tuple[float, float]] = []
    for t, kind in sorted(events):
        if kind == _END:
            running -= 1
        elif kind == _GONE:
            runnable -= 1
        elif kind == _AVAILABLE:
            runnable += 1
        else:
            runnable, running = runnable - 1, running + 1
            if since is not None:
                gaps.append((since, t))
                since = None
        if runnable <= 0 or (limit and running >= limit):
            since = None
        elif since is None:
            since = t
    if since is not None:
        gaps.append((since, max(since, run_end)))
    return gaps


def check_keys_served(verdict: Verdict, attempts: Sequence[Row], faults: Sequence[Row], *, service: Service,
                      timing: Timing, run_end: float) -> None:
    """``keys_served``, computed exactly from the attempts rather than sampled: per key, every
    interval in which it had a runnable job (pending, available, not cancelled) and fewer running
    jobs than its limit, up to its next start (counted from the run's first claim: the workers
    start with the producer); that wait, less the part inside :func:`_stall_windows`, must stay
    within :attr:`Service.bound`. The figures add the simpler per job wait (start minus the time
    it became runnable), which a backlog makes long legitimately."""
    events, waits = _key_events(attempts)
    stalls = _stall_windows(faults, timing)
    # The workers start as the producer does: waits count from the first claim of the run.
    opened = min((float(a["started_at"]) for a in attempts if a["started_at"] is not None), default=run_end)
    bound = service.bound
    nets: list[float] = []
    per_key: dict[str, float] = {}
    raw_max = excused_total = 0.0
    for key, key_events in sorted(events.items()):
        limit = service.per_key_running if key else 0
        worst: tuple[float, float, float, float] | None = None
        late = 0
        for start, end in ((max(start, opened), end) for start, end in _gaps(key_events, limit, run_end)):
            excused = _overlap(start, end, stalls)
            net = end - start - excused
            nets.append(net)
            raw_max, excused_total = max(raw_max, end - start), excused_total + excused
            per_key[key] = max(per_key.get(key, 0.0), net)
            if net > bound + EPSILON:
                late += 1
                if worst is None or net > worst[0]:
                    worst = (net, excused, start, end)
        if worst is not None:
            net, excused, start, end = worst
            verdict.violations["keys_served"].append(
                f"flow key {key!r} had a runnable job and room under its limit for {net:.2f}s without a start "
                f"(bound {bound:.2f}s; {end - start:.2f}s from {start:.1f} to {end:.1f}, {excused:.2f}s of it "
                f"excused by faults); {late} wait(s) over the bound")
    worst_key = max(per_key, key=lambda k: per_key[k]) if per_key else None
    verdict.figures["keys_served"] = {
        "keys": len(events), "bound_seconds": round(bound, 3), "waits": len(nets),
        "wait_seconds": {"p50": _round(quantile(nets, 0.5)), "p99": _round(quantile(nets, 0.99)),
                         "max": _round(max(nets, default=None))},
        "max_wait_before_excuses": round(raw_max, 3), "excused_seconds": round(excused_total, 3),
        "worst_key": worst_key, "per_key_max_wait": {k: round(v, 3) for k, v in sorted(per_key.items())},
        "job_wait_seconds": {"p50": _round(quantile(waits, 0.5)), "p99": _round(quantile(waits, 0.99)),
                             "max": _round(max(waits, default=None))},
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
