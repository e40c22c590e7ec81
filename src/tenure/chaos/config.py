"""The configuration of one chaos run: every knob of :class:`ChaosConfig`, its default and its validation.

Fault counts left at None scale with the run's duration (:meth:`ChaosConfig.counts`). The HA run
(:mod:`tenure.chaos.ha`) reuses the worker settings and adds its own :class:`~tenure.chaos.ha.HaConfig`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenure.chaos.invariants import Timing
from tenure.core.errors import ConfigError
from tenure.flow import check_burst, check_per_second, default_burst

JOBS_DEFAULT = 300
DURATION_DEFAULT = 40.0
WORKERS_DEFAULT = 3
CONCURRENCY_DEFAULT = 4
REAPERS_DEFAULT = 2
LEASE_DEFAULT = 2.0
HEARTBEAT_DEFAULT = 0.5
GRACE_DEFAULT = 1.0
REAPER_INTERVAL_DEFAULT = 0.5
MAX_LEASE_TOTAL_DEFAULT = 6.0
MAX_LEASE_EXPIRIES_DEFAULT = 5
MAX_ATTEMPTS_DEFAULT = 10
SEED_DEFAULT = 1
SKEW_DEFAULT = 300.0
RECOVERY_MARGIN_DEFAULT = 3.0
WORK_MS_MIN_DEFAULT = 50.0
WORK_MS_MAX_DEFAULT = 300.0
SETTLE_TIMEOUT_DEFAULT = 180.0
FLOW_KEYS_DEFAULT = 6
"""Flow keys the run's jobs are spread over (job n gets key n mod this; issue 38)."""
PER_KEY_RUNNING_DEFAULT = 2
"""The run queue's running limit per flow key: 6 keys x 2 = the default fleet's 12 handler slots."""
WORKFLOWS_DEFAULT = 8
"""Random workflows (DAGs of 3-20 steps) enqueued over the first half of production (issue 39)."""
BATCHES_DEFAULT = 4
"""Batches of 3-10 jobs with all three callbacks, enqueued over the first half of production."""
UNIQUE_KEYS_DEFAULT = 5
"""Keys the unique jobs (``tenure.Unique(by=["k"])``) race over."""
RATE_LIMIT_NAME = "chaos-rate"
"""The rate limit every job of the run names when ``rate_per_second`` is set (one shared bucket)."""
POLL_INTERVAL = 0.2
"""The workers' ``--poll-interval``: how long an idle worker may wait before it claims again."""
FAULT_GAP = 1.0
"""Seconds of calm between two process-level faults, so each reap has one cause."""
HUNG_PER_WORKER_LIMIT = 2
AIM_WAIT = 5.0
"""Seconds a due SIGSTOP or partition waits for its target to hold a running job before firing anyway."""


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. Fault counts left at None scale with ``duration`` (see :meth:`counts`)."""

    jobs: int = JOBS_DEFAULT
    """Jobs the producer enqueues (each once, by idempotency key)."""
    duration: float = DURATION_DEFAULT
    """Seconds over which the producer spreads the jobs; process-level faults fall inside it."""
    workers: int = WORKERS_DEFAULT
    """Worker processes kept alive (dead ones are replaced)."""
    concurrency: int = CONCURRENCY_DEFAULT
    """Handlers per worker process."""
    reapers: int = REAPERS_DEFAULT
    """Reaper processes running at once."""
    lease: float = LEASE_DEFAULT
    """Seconds of lease per claim or renewal."""
    heartbeat: float = HEARTBEAT_DEFAULT
    """Seconds between renewals (at most lease/3)."""
    grace: float = GRACE_DEFAULT
    """Reaper grace after lease expiry (at least one heartbeat)."""
    reaper_interval: float = REAPER_INTERVAL_DEFAULT
    """Seconds between reaper cycles."""
    max_lease_total: float = MAX_LEASE_TOTAL_DEFAULT
    """Bounded extension (R4): what ends a hung handler."""
    max_lease_expiries: int = MAX_LEASE_EXPIRIES_DEFAULT
    """Lease expiries before the reaper dead-letters a job with lease_expired."""
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    """Attempts per job before handler failures dead-letter it."""
    seed: int = SEED_DEFAULT
    """Seed of every random choice (fault plan, targets, work times)."""
    kills_per_kind: int | None = None
    """Jobs per kill kind (before effect, after effect, during ack) that kill their worker."""
    hangs: int | None = None
    """Jobs whose handler hangs forever (once per job)."""
    sigstops: int | None = None
    """SIGSTOP/SIGCONT pauses of a random worker, each longer than the lease."""
    partitions: int | None = None
    """Partitions of worker 0 from the database, alternating drop and blackhole."""
    pg_restarts: int | None = None
    """PostgreSQL restarts (only with the harness's own embedded server)."""
    gap_restarts: int | None = None
    """Jobs that restart PostgreSQL between their guarded body and ``eff.succeeded()`` (own server only)."""
    cancels: int | None = None
    """`tenure jobs cancel` of a random running (else pending) job of the run (issue 14)."""
    queue_pauses: int | None = None
    """Pauses of the run's queue, each as long as a SIGSTOP, then resumed (issue 14)."""
    timeouts: int | None = None
    """Jobs whose first attempt overruns its task's timeout (chaos.timed), retried as task_timeout."""
    slow_completions: int | None = None
    """Locks of ``job_history`` (ACCESS EXCLUSIVE) that hold every completion back as long as a SIGSTOP (issue 40)."""
    skew: float = SKEW_DEFAULT
    """Seconds of wall-clock skew for workers 1 (+) and 2 (-); 0 disables."""
    recovery_margin: float = RECOVERY_MARGIN_DEFAULT
    """Seconds allowed beyond lease + grace + reaper interval for a recovery (a noisy host)."""
    work_ms_min: float = WORK_MS_MIN_DEFAULT
    """Shortest simulated work per job, in milliseconds."""
    work_ms_max: float = WORK_MS_MAX_DEFAULT
    """Longest simulated work per job, in milliseconds."""
    settle_timeout: float = SETTLE_TIMEOUT_DEFAULT
    """Seconds after the last job and fault for every job to become terminal."""
    flow_keys: int = FLOW_KEYS_DEFAULT
    """Flow keys of the jobs (0: none); checked by ``flow_within_limit``."""
    per_key_running: int = PER_KEY_RUNNING_DEFAULT
    """The queue's running limit per flow key (0: none)."""
    rate_per_second: float = 0.0
    """Tokens per second of the rate limit every job names (0: no rate limit); checked by
    ``rate_within_limit``."""
    rate_burst: int | None = None
    """The rate limit's burst (None: one second's tokens, at least 1)."""
    workflows: int = WORKFLOWS_DEFAULT
    """Random workflows enqueued on ``WF_QUEUE`` (0: none); checked by the workflow invariants."""
    batches: int = BATCHES_DEFAULT
    """Batches with all three callbacks enqueued on ``WF_QUEUE`` (0: none); checked by ``callbacks_once``."""
    unique_keys: int = UNIQUE_KEYS_DEFAULT
    """Keys of the racing unique jobs (0: none); checked by ``unique_keys_held_once``."""

    def validate(self) -> None:
        if self.jobs < 1:
            raise ConfigError("chaos needs at least one job")
        if self.duration <= 0:
            raise ConfigError("chaos duration must be positive")
        if self.workers < 1 or self.concurrency < 1:
            raise ConfigError("chaos needs at least one worker with concurrency >= 1")
        if self.reapers < 1:
            raise ConfigError("chaos needs at least one reaper")
        if self.heartbeat * 3 > self.lease + 1e-9:
            raise ConfigError(f"heartbeat {self.heartbeat:g}s must be at most lease/3")
        if self.grace < self.heartbeat:
            raise ConfigError(f"grace {self.grace:g}s must cover one heartbeat ({self.heartbeat:g}s)")
        if self.reaper_interval <= 0:
            raise ConfigError("reaper interval must be positive")
        if self.max_lease_total < self.lease:
            raise ConfigError("max total lease must be at least the lease")
        if self.max_lease_expiries < 1 or self.max_attempts < 1:
            raise ConfigError("max lease expiries and max attempts must be >= 1")
        if not 0 <= self.work_ms_min <= self.work_ms_max:
            raise ConfigError("work times must satisfy 0 <= min <= max")
        if self.workflows < 0 or self.batches < 0 or self.unique_keys < 0:
            raise ConfigError("workflows, batches and unique keys must be >= 0")
        if self.flow_keys < 0 or self.per_key_running < 0:
            raise ConfigError("flow keys and the per-key running limit must be >= 0")
        if self.rate_per_second:
            check_per_second(self.rate_per_second)
            if self.rate_burst is not None:
                check_burst(self.rate_burst)
        elif self.rate_burst is not None:
            raise ConfigError("a burst needs a rate limit: give its rate too, as --rate-limit RATE/BURST")
        if self.skew < 0 or self.recovery_margin < 0 or self.settle_timeout <= 0:
            raise ConfigError("skew and margin must be >= 0, settle timeout positive")
        for name in ("kills_per_kind", "hangs", "sigstops", "partitions", "pg_restarts", "gap_restarts",
                     "cancels", "queue_pauses", "timeouts", "slow_completions"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0")

    @property
    def pause_seconds(self) -> float:
        """How long a SIGSTOP, partition, queue pause or slow_completions lock lasts: past lease +
        grace + two reaper cycles (a lease nobody renews in that time is reaped)."""
        return self.lease + self.grace + 2 * self.reaper_interval + 1.0

    def counts(self) -> dict[str, int]:
        """Faults per kind: explicit values, else scaled by duration (minimums for short runs)."""
        minutes = self.duration / 60.0
        budget = max(3, int(0.75 * self.duration / (self.pause_seconds + FAULT_GAP + AIM_WAIT / 2)))

        def pick(value: int | None, auto: int) -> int:
            return auto if value is None else value

        return {
            "kills_per_kind": pick(self.kills_per_kind, max(3, round(2 * minutes))),
            "hangs": pick(self.hangs, max(2, round(minutes))),
            "sigstops": pick(self.sigstops, max(2, round(0.4 * budget))),
            "partitions": pick(self.partitions, max(2, round(0.4 * budget))),
            "pg_restarts": pick(self.pg_restarts, max(1, round(0.2 * budget))),
            "gap_restarts": pick(self.gap_restarts, max(2, round(2 * minutes))),
            "cancels": pick(self.cancels, max(3, round(4 * minutes))),
            "queue_pauses": pick(self.queue_pauses, max(1, round(0.2 * budget))),
            "timeouts": pick(self.timeouts, max(2, round(minutes))),
            "slow_completions": pick(self.slow_completions, max(1, round(0.2 * budget))),
        }

    @property
    def burst(self) -> int:
        """The rate limit's burst as created (0 without a rate limit)."""
        if not self.rate_per_second:
            return 0
        return self.rate_burst if self.rate_burst is not None else default_burst(self.rate_per_second)

    def timing(self) -> Timing:
        """The timing the invariants check recoveries against."""
        return Timing(lease=self.lease, grace=self.grace, reaper_interval=self.reaper_interval,
                      heartbeat=self.heartbeat, max_lease_total=self.max_lease_total, margin=self.recovery_margin)

    def rng(self) -> random.Random:
        """The run's one source of randomness, from the seed: the plan draws first, then every choice of target."""
        return random.Random(self.seed)
