"""The flow-control invariant of a chaos run (issue 38 under faults): no flow key ever has more
running jobs than the queue's per-key limit, across SIGKILL, SIGSTOP, partitions and PostgreSQL
restarts. The claim counts running rows, not live leases, so a frozen worker's job keeps its
key's slot until the reaper takes it, and the bound holds with no fault excused."""

from __future__ import annotations

from collections.abc import Sequence

from tenure.chaos.invariants import Row, Verdict


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
