"""Issue 38 (items 3 and 5) with real processes: a rate limit holds, and keys are served in turn,
while workers are killed and frozen.

`tenure flow rate api --per-second 8 --burst 4` creates the bucket; 64 jobs over a hot key (40,
enqueued first) and three small keys (8 each, enqueued after) name it, through `tenure enqueue
--from-file` (JSON lines with ``flow_key`` and ``rate_limit``). Three `tenure worker` processes
(30 slots: the bucket, not the slots, sets the pace) and `tenure reaper --interval 1` drain them;
one worker is SIGKILLed and another SIGSTOPped mid-run, then SIGCONTed once the reaper has taken
its jobs. Every attempt's start, by the database clock, is in the audit row that ended it
(``detail.started_at``): in no 1 s window may more attempts start than rate + burst (12), reaped
attempts included (they spent tokens too). The small keys' jobs all start before the hot key's
last 16 are first claimed (round-robin over keys, not first come, first served), and every job
completes once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest
from psycopg import sql

from support.processes import run_cli, wait_for, wait_registered
from tenure.core.db import Connection
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

RATE, BURST = 8, 4
HOT, SMALL = 40, 8
KEYS = ["s1", "s2", "s3"]
JOBS = HOT + SMALL * len(KEYS)
WORKER = ["worker", "--app", "flow_tasks:app", "--concurrency", "10", "--lease", "3s", "--heartbeat", "0.5s",
          "--poll-interval", "1"]
REAPER = ["reaper", "--interval", "1", "--grace", "1", "--backoff-base", "0", "--backoff-max", "0"]


def _rows(conn: Connection, query: str, schema: str) -> list[Any]:
    return conn.execute(sql.SQL(query).format(schema=sql.Identifier(schema))).fetchall()


def _completed(conn: Connection, schema: str) -> int:
    return int(_rows(conn, "SELECT count(*) AS n FROM {schema}.all_jobs WHERE status = 'completed'", schema)[0]["n"])


def _held(conn: Connection, schema: str, worker_id: str) -> int:
    return int(conn.execute(sql.SQL("SELECT count(*) AS n FROM {schema}.jobs WHERE status = 'running' AND locked_by = %s")
                            .format(schema=sql.Identifier(schema)), (worker_id,)).fetchone()["n"])  # type: ignore[index]


def _most_in_a_second(starts: list[float]) -> int:
    """The most attempts that started in any window of 1 s (sliding over the sorted starts)."""
    most, lo = 0, 0
    for hi, t in enumerate(starts):
        while t - starts[lo] >= 1.0:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def test_a_rate_limit_holds_and_keys_take_turns_across_killed_and_frozen_workers(
        dsn: str, schema: str, repo: Repository, conn: Connection, cli_env: dict[str, str],
        spawn: Callable[..., Popen[bytes]], tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    env = {**cli_env, "FLOW_RUNS": str(runs_dir)}
    out = run_cli(env, "flow", "rate", "api", "--per-second", str(RATE), "--burst", str(BURST))
    assert out.returncode == 0, out.stderr
    lines = [{"task": "keyed_sleep", "payload": {"seconds": 0.3}, "flow_key": "hot", "rate_limit": "api"}
             for _ in range(HOT)]
    lines += [{"task": "keyed_sleep", "payload": {"seconds": 0.3}, "flow_key": k, "rate_limit": "api:1"}
              for k in KEYS for _ in range(SMALL)]
    batch = tmp_path / "jobs.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"task": "keyed_sleep", "rate_limit": "nope"}) + "\n")
    out = run_cli(env, "enqueue", "--from-file", str(unknown))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (out.returncode, out.stderr)

    # The workers start first, so the whole drain (about 8 s at the bucket's pace) is theirs to
    # share even when a loaded machine starts Python processes slowly.
    spawn(*REAPER, env_override=env)
    workers = [spawn(*WORKER, env_override=env) for _ in range(3)]
    ids = wait_registered(repo, workers)
    started = time.monotonic()
    out = run_cli(env, "enqueue", "--from-file", str(batch))
    assert out.returncode == 0 and f"enqueued {JOBS} of {JOBS}" in out.stdout, (out.stdout, out.stderr)
    # The first two workers seen running jobs at the same moment are the ones killed and frozen.
    busy: list[Popen[bytes]] = wait_for(
        lambda: (lambda b: b if len(b) >= 2 else None)([w for w in workers if _held(conn, schema, ids[w.pid])]),
        30, "two workers to run jobs at once")
    killed, frozen = busy[0], busy[1]
    steady = next(w for w in workers if w not in (killed, frozen))
    killed.kill()
    killed.wait(10)
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not _held(conn, schema, ids[frozen.pid]), 40, "the reaper to take the frozen worker's jobs")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    wait_for(lambda: _completed(conn, schema) == JOBS, 90, f"all {JOBS} jobs to complete")
    elapsed = time.monotonic() - started

    # Every attempt's start (DB clock), from the audit row that ended it: completions, reaps,
    # anything that carries started_at.
    attempts = _rows(conn, "SELECT e.job_id, e.event, (e.detail->>'started_at')::timestamptz AS started_at, "
                           "j.flow_key FROM {schema}.job_events e JOIN {schema}.all_jobs j ON j.id = e.job_id "
                           "WHERE e.detail ? 'started_at'", schema)
    starts = sorted(datetime.timestamp(r["started_at"]) for r in attempts)
    reaped = [r for r in attempts if r["event"] == "reaped_due_to_expired_lease"]
    figures = {"attempts": len(attempts), "reaped": len(reaped), "most_in_1s": _most_in_a_second(starts),
               "span_s": round(starts[-1] - starts[0], 2), "elapsed_s": round(elapsed, 1)}
    print(figures)
    assert reaped, figures  # the faults cost attempts, and those attempts spent tokens
    # (1) Never more starts in a second than the bucket allows.
    assert figures["most_in_1s"] <= RATE + BURST, figures
    # (2) The bucket set the pace: the attempts could not start faster than the rate after the burst.
    assert starts[-1] - starts[0] >= (len(attempts) - BURST) / RATE - 0.5, figures
    # (3) Keys took turns: every small key's job was first claimed before the hot key's last 16
    # were (first attempts: a job the faults took was claimed again later, as it should be).
    first: dict[int, tuple[float, str]] = {}
    for r in attempts:
        t = datetime.timestamp(r["started_at"])
        if int(r["job_id"]) not in first or t < first[int(r["job_id"])][0]:
            first[int(r["job_id"])] = (t, r["flow_key"])
    hot_firsts = sorted(t for t, key in first.values() if key == "hot")
    small_last = max(t for t, key in first.values() if key != "hot")
    assert len(first) == JOBS and small_last < hot_firsts[-16], (small_last, hot_firsts[-16:])
    # (4) Every job completed exactly once.
    done = _rows(conn, "SELECT job_id, count(*)::int AS n FROM {schema}.job_events WHERE event = 'completed' "
                       "GROUP BY job_id", schema)
    assert len(done) == JOBS and {r["n"] for r in done} == {1}
    assert frozen.poll() is None and steady.poll() is None, "a surviving worker exited"
