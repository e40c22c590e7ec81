"""The short chaos run CI executes: fixed seed, real processes, every fault kind, all invariants,
flow keys under a per-key limit and a rate limit, and (by default) workflows, batches and unique jobs.

Runs `tenure chaos` as a subprocess (the same command users run) on its own embedded PostgreSQL,
so the PostgreSQL restart fault is exercised too. Fails on any violated invariant, and also when
a fault kind never fired (a run that injects nothing proves nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tenure.chaos.faults import find_libfaketime

pytestmark = pytest.mark.chaos

SEEDS = (7, 8)
"""Seed 8 runs only when seed 7's run checked no fenced attempt: that check needs a stale attempt's
process to outlive its reap by 2 heartbeats + 7 s, and on a loaded host a later planned kill
or recycle can end every such process first (all invariants still held). Every run must hold
every invariant; at least one must have checked a fenced attempt."""
COMMAND = ["chaos", "--jobs", "300", "--duration", "40", "--workers", "3", "--reapers", "2", "--lease", "2",
           "--heartbeat", "0.5", "--grace", "1", "--reaper-interval", "0.5", "--max-lease-total", "6",
           "--kills-per-kind", "3", "--hangs", "2", "--sigstops", "2", "--partitions", "2", "--pg-restarts", "1",
           "--gap-restarts", "2", "--slow-completions", "1", "--skew", "5m", "--rate-limit", "12/6", "--quiet"]


def _chaos_run(tmp_path: Path, seed: int) -> dict[str, Any]:
    """One `tenure chaos` run with ``seed``; its report, after checking every invariant held."""
    env = {k: v for k, v in os.environ.items() if k not in ("TENURE_DATABASE_URL", "TENURE_LOG_JSON")}
    env["TENURE_HOME"] = str(tmp_path / f"home-{seed}")
    report_path = tmp_path / f"report-{seed}.json"
    result = subprocess.run([sys.executable, "-m", "tenure.cli", *COMMAND, "--seed", str(seed),
                             "--report", str(report_path), "--log-dir", str(tmp_path / f"logs-{seed}")],
                            env=env, capture_output=True, text=True, timeout=280)
    print(result.stdout)
    print(result.stderr[-3000:])
    assert report_path.exists(), f"no report (exit {result.returncode})"
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["violations"] == {name: [] for name in report["violations"]}
    assert result.returncode == 0 and report["ok"]
    return report


def test_short_chaos_run_holds_every_invariant(tmp_path: Path) -> None:
    if find_libfaketime() is None and os.environ.get("CI"):
        pytest.fail("libfaketime missing: run scripts/tools/faketime.sh (the clock-skew fault needs it in CI)")
    for seed in SEEDS:
        report = _chaos_run(tmp_path, seed)
        if report["figures"]["fenced_attempts_checked"] >= 1:
            break

    figures = report["figures"]
    assert figures["jobs_planned"] == figures["jobs_stored"] == 300
    # Issue 14: the run cancels jobs too; exactly the ones it cancelled end cancelled.
    cancels = figures["cancels"]
    assert figures["jobs_cancelled"] == cancels["revoked_running"] + cancels["cancelled_pending"], cancels
    assert figures["jobs_completed"] + figures["jobs_dead_lettered"] + figures["jobs_cancelled"] == 300
    faults = figures["faults_injected"]
    for kind in ("kill_before_effect", "kill_after_effect", "kill_during_ack", "hang", "sigstop",
                 "partition_drop", "partition_blackhole", "pg_restart", "clock_skew", "process_exit",
                 "slow_completions"):
        assert faults.get(kind, 0) >= 1, f"fault {kind} never fired: {faults}"
    # Issue 12, defect 1: PostgreSQL restarted between guarded bodies and their success; no body ran twice.
    assert figures["restart_in_gap_fired"] >= 1, faults
    assert figures["guarded_body_reruns_by_planned_fault"].get("restart_in_gap", 0) == 0
    causes = figures["reaps_by_cause"]
    assert causes.get("kill", 0) >= 1 and causes.get("hang", 0) >= 1, causes
    assert causes.get("sigstop", 0) + causes.get("partition_drop", 0) + causes.get("partition_blackhole", 0) >= 1
    # The figure the guard saves: redeliveries re-ran the unguarded effect, never the guarded one.
    assert figures["unguarded_duplicates"] >= 1
    # Exactly once per completed job; a dead-lettered job may have applied it before it died.
    assert figures["jobs_completed"] <= figures["guarded_effects_applied"] <= 300
    assert figures["stale_writes_rejected_total"] >= 1
    assert figures["fenced_attempts_checked"] >= 1
    assert figures["recovery_seconds_killed"]["n"] >= 1
    assert figures["recovery_seconds_killed"]["max"] <= figures["recovery_bound_seconds"]
    # Issue 40: the harness sampled the workers while completions were held back (and every
    # sample stayed within concurrency: held_within_capacity held above).
    assert figures["capacity"]["samples_during_slow_completions"] >= 10, figures["capacity"]
    # Issue 38: 6 flow keys limited to 2 running each; the limit bound (samples at it) and held
    # in every sample (flow_within_limit above), by running rows, not only by live leases.
    flow = figures["flow"]
    assert flow["per_key_running"] == 2 and flow["peak_running_per_key"] == 2, flow
    assert flow["samples_at_limit"] >= 10, flow
    # Issue 38: every job names a rate limit of 12/s with a burst of 6, under the production's
    # 7.5 jobs/s, so it binds after each stall: the burst was spent and the bucket ran dry, and no
    # second started more than 18 (rate_within_limit above). Every attempt counts, reaped ones too.
    rate = figures["rate"]
    assert rate["starts"] == figures["attempts"] and rate["jobs_stored_without_it"] == 0, rate
    assert rate["peak_units_in_window"] > 12 and rate["starts_leaving_bucket_dry"] >= 10, rate
    # ...and every key with a runnable job and room was served within the bound (keys_served above).
    keys = figures["keys_served"]
    assert keys["keys"] == 6 and keys["waits"] >= 100 and keys["wait_seconds"]["max"] <= keys["bound_seconds"], keys
    # Issue 39: the default 8 workflows, 4 batches and unique jobs over 5 keys ran under the same
    # faults (their five invariants held above): steps were released and completed, every batch
    # fired finished (and one with a dead letter exhausted), and the keys were contended.
    wf, batches, unique = figures["workflows"], figures["batches"], figures["unique"]
    assert wf["workflows"] >= 8 and wf["released_events"] >= 1 and wf["by_status"].get("completed", 0) >= 1, wf
    assert batches["fired"].get("finished") == batches["batches"] >= 4 and batches["fired"].get("exhausted"), batches
    assert unique["samples_holding_a_key"] >= 1 and unique["unique_enqueues"] > unique["unique_created"] >= 5, unique
    offsets = report["clock_skew"]["observed_offsets_by_pid"].values()
    assert any(o > 290 for o in offsets) and any(o < -290 for o in offsets), report["clock_skew"]
