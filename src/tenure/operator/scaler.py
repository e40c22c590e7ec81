"""Pure replica decision for one JobQueue (no I/O; the kopf timer feeds it).

Demand: in-flight jobs fill ``running / concurrency`` pods and the ready backlog asks for
``ready / target_ready_per_replica`` more, so ``raw = ceil(running/concurrency +
ready/target_ready_per_replica)``, clamped to ``[floor, max_replicas]``.

* Up promptly: a recommendation above the current replicas is applied at once.
* Down only after the stabilisation window: like the HPA, the replicas applied are the
  *highest* recommendation seen within the last ``scale_down_stabilization_seconds``, so a
  backlog that oscillates faster than the window holds the peak instead of flapping.
* Zero only when ``allow_scale_to_zero`` and the queue is empty: nothing ready, running or
  scheduled (scheduled jobs count because a delayed job needs a worker when it comes due;
  the figures have no "due soon" split, so this is the conservative reading).
* Missing data is never a reason to scale: the caller does not call :func:`decide` without
  stats (see handlers: Degraded, replicas unchanged).

The history is a list of (time, replicas) recommendations. Entries older than the window are
dropped, and so is any entry whose value is not above a newer one (it can never be the max
of a window that also holds the newer entry), which bounds the list by ``max_replicas + 1``
and lets it live in the JobQueue status so that an operator restart keeps the window.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Sequence
from fractions import Fraction

from tenure.core.errors import ConfigError
from tenure.operator import spec as s

MIN_REPLICAS_DEFAULT = s.MIN_REPLICAS_DEFAULT
MAX_REPLICAS_DEFAULT = s.MAX_REPLICAS_DEFAULT
CONCURRENCY_DEFAULT = s.CONCURRENCY_DEFAULT
TARGET_READY_PER_REPLICA_DEFAULT = s.TARGET_READY_PER_REPLICA_DEFAULT
SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT = s.SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT
ALLOW_SCALE_TO_ZERO_DEFAULT = s.ALLOW_SCALE_TO_ZERO_DEFAULT


@dataclasses.dataclass(frozen=True)
class ScalerConfig:
    """Settings of the scaler for one queue (from JobQueue ``spec.scaling`` and concurrency)."""

    #: Floor of replicas while the queue has any work, or always without scale to zero.
    #: 0 is accepted only together with ``allow_scale_to_zero``.
    min_replicas: int = MIN_REPLICAS_DEFAULT
    #: Ceiling of replicas; the recommendation is clamped to it.
    max_replicas: int = MAX_REPLICAS_DEFAULT
    #: Jobs one pod runs at once (``tenure worker --concurrency``); in-flight jobs / this value
    #: is the number of pods the current work occupies.
    concurrency: int = CONCURRENCY_DEFAULT
    #: Ready (waiting) jobs one replica should face; backlog / this value is added on top.
    target_ready_per_replica: int = TARGET_READY_PER_REPLICA_DEFAULT
    #: Window (seconds) whose highest recommendation bounds a scale-down; 0 scales down at once.
    scale_down_stabilization_seconds: int = SCALE_DOWN_STABILIZATION_SECONDS_DEFAULT
    #: Whether 0 replicas is allowed when nothing is ready, running or scheduled.
    allow_scale_to_zero: bool = ALLOW_SCALE_TO_ZERO_DEFAULT

    def validate(self) -> None:
        """Raise ConfigError naming the first bad setting."""
        if self.max_replicas < 1:
            raise ConfigError(f"max_replicas must be >= 1, got {self.max_replicas}")
        if self.min_replicas < 0:
            raise ConfigError(f"min_replicas must be >= 0, got {self.min_replicas}")
        if self.min_replicas > self.max_replicas:
            raise ConfigError(
                f"min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})"
            )
        if self.min_replicas == 0 and not self.allow_scale_to_zero:
            raise ConfigError("min_replicas may be 0 only with allow_scale_to_zero")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.target_ready_per_replica < 1:
            raise ConfigError(
                f"target_ready_per_replica must be >= 1, got {self.target_ready_per_replica}"
            )
        if self.scale_down_stabilization_seconds < 0:
            raise ConfigError("scale_down_stabilization_seconds must be >= 0")

    @classmethod
    def from_spec(cls, spec: s.JobQueueSpec) -> ScalerConfig:
        return cls(
            min_replicas=spec.scaling.min_replicas,
            max_replicas=spec.scaling.max_replicas,
            concurrency=spec.concurrency,
            target_ready_per_replica=spec.scaling.target_ready_per_replica,
            scale_down_stabilization_seconds=spec.scaling.scale_down_stabilization_seconds,
            allow_scale_to_zero=spec.scaling.allow_scale_to_zero,
        )


@dataclasses.dataclass(frozen=True)
class QueueLoad:
    """The three figures the decision uses (taken from ``tenure.core.stats.QueueStats``)."""

    ready: int
    running: int
    scheduled: int


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """One past recommendation (already clamped)."""

    at: dt.datetime
    replicas: int


@dataclasses.dataclass(frozen=True)
class ScaleDecision:
    """Outcome of one :func:`decide` call."""

    #: Replicas to set on the Deployment.
    desired: int
    #: This cycle's clamped recommendation (before stabilisation).
    recommended: int
    #: Human-readable reason, used for status.lastScaleReason and the Event.
    reason: str
    #: History to store for the next call (pruned).
    history: tuple[Recommendation, ...]

    def changed(self, current: int | None) -> bool:
        return current is None or self.desired != current


def raw_demand(config: ScalerConfig, load: QueueLoad) -> int:
    """Unclamped replicas the load asks for (exact arithmetic, no float rounding)."""
    running = max(load.running, 0)
    ready = max(load.ready, 0)
    demand = Fraction(running, config.concurrency) + Fraction(ready, config.target_ready_per_replica)
    return math.ceil(demand)


def _prune(
    history: Sequence[Recommendation], now: dt.datetime, window: int
) -> list[Recommendation]:
    horizon = now - dt.timedelta(seconds=window)
    kept = sorted((r for r in history if r.at >= horizon and r.at <= now), key=lambda r: r.at)
    # Keep only entries strictly above every newer entry (the others are never a window max).
    out: list[Recommendation] = []
    for rec in kept:
        while out and out[-1].replicas <= rec.replicas:
            out.pop()
        out.append(rec)
    return out


def decide(
    config: ScalerConfig,
    load: QueueLoad,
    current: int | None,
    history: Sequence[Recommendation],
    now: dt.datetime,
) -> ScaleDecision:
    """Replicas for this cycle.

    ``current`` is the Deployment's ``spec.replicas`` (None when it does not exist yet);
    ``history`` the stored recommendations; ``now`` an aware datetime.
    """
    empty = load.ready <= 0 and load.running <= 0 and load.scheduled <= 0
    raw = raw_demand(config, load)
    if empty and config.allow_scale_to_zero:
        floor = 0
    else:
        floor = max(config.min_replicas, 1)
    recommended = min(max(raw, floor), config.max_replicas)

    window = config.scale_down_stabilization_seconds
    pruned = _prune([*history, Recommendation(now, recommended)], now, window)
    # Old entries may exceed a maxReplicas that was lowered since: clamp them too.
    stabilised = min(max(r.replicas for r in pruned), config.max_replicas)
    figures = f"ready={load.ready} running={load.running} scheduled={load.scheduled}"

    if current is None:
        desired = recommended
        reason = f"initial size {desired} ({figures})"
    elif recommended > current:
        desired = recommended
        reason = f"scale up {current}->{desired}: {figures} needs {raw}"
        if raw > config.max_replicas:
            reason += f", capped at maxReplicas={config.max_replicas}"
    elif recommended < current:
        # Never go below what the window still recommends, nor above what we have.
        desired = min(current, stabilised)
        if current > config.max_replicas:
            reason = f"clamp {current}->{desired}: above maxReplicas={config.max_replicas}"
        elif desired == current:
            reason = (
                f"hold {current}: highest recommendation in the last {window}s is {stabilised}"
                f" ({figures})"
            )
        elif desired == 0:
            reason = f"scale to zero {current}->0: queue empty for {window}s"
        else:
            reason = f"scale down {current}->{desired} after {window}s stabilisation ({figures})"
    else:
        desired = current
        reason = f"steady at {current} ({figures})"
    return ScaleDecision(
        desired=desired, recommended=recommended, reason=reason, history=tuple(pruned)
    )


def history_from_status(items: object) -> list[Recommendation]:
    """Parse ``status.recommendations``; malformed entries are ignored (they are only hints)."""
    out: list[Recommendation] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, dict):
            continue
        try:
            at = dt.datetime.fromisoformat(str(item["time"]).replace("Z", "+00:00"))
            replicas = int(item["replicas"])
        except (KeyError, TypeError, ValueError):
            continue
        if at.tzinfo is None:
            at = at.replace(tzinfo=dt.UTC)
        out.append(Recommendation(at, replicas))
    return out


def history_to_status(history: Sequence[Recommendation]) -> list[dict[str, object]]:
    return [{"time": format_time(r.at), "replicas": r.replicas} for r in history]


def format_time(at: dt.datetime) -> str:
    """RFC 3339 in UTC with a Z, second precision (what Kubernetes stores)."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
