"""Issue 38 (item 4) with a real worker process: back-pressure from a handler.

`tenure flow rate api --per-second 100` creates a rate limit; `tenure enqueue --rate-limit api
--max-attempts 1` enqueues job A, whose handler calls ``ctx.rate_limited(retry_after=2,
limit="api")`` on its first run, then job B, which names the same limit and never hits a 429,
and job C, whose handler names a limit that does not exist. One `tenure worker` (concurrency 1)
runs them. A is handed back without using its only attempt and completes on its second run
(a counted attempt would have left it none); the bucket of `api` is paused for the 2 seconds,
so B, claimable at once otherwise, starts only after the pause; C's handler gets a clear error
and, with its one attempt used, is dead-lettered, pausing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from subprocess import Popen

import pytest

from support.processes import run_cli, wait_for
from tenure.core.db import Connection
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

RETRY_AFTER = 2.0
WORKER = ["worker", "--app", "backpressure_tasks:app", "--concurrency", "1", "--poll-interval", "0.1"]


def _enqueue(env: dict[str, str], payload: dict[str, object], *options: str) -> int:
    done = run_cli(env, "enqueue", "call_api", "--payload", json.dumps(payload), "--max-attempts", "1", *options)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_a_rate_limited_attempt_is_not_counted_and_pauses_its_limit(
        repo: Repository, conn: Connection, schema: str, cli_env: dict[str, str],
        spawn: Callable[..., Popen[bytes]], tmp_path: Path) -> None:
    env = {**cli_env, "BACKPRESSURE_RUNS": str(tmp_path)}
    made = run_cli(env, "flow", "rate", "api", "--per-second", "100")
    assert made.returncode == 0, made.stderr
    a = _enqueue(env, {"retry_after": RETRY_AFTER, "limit": "api"}, "--rate-limit", "api")
    b = _enqueue(env, {"plain": True}, "--rate-limit", "api")
    c = _enqueue(env, {"retry_after": RETRY_AFTER, "limit": "nope"})
    spawn(*WORKER, env_override=env)

    def settled() -> bool:
        return all((repo.get_job(j) or {}).get("status") in ("completed", "failed") for j in (a, b, c))

    wait_for(settled, 60, "the three jobs to complete or fail")
    job_a, job_b, job_c = (repo.get_job(j) for j in (a, b, c))
    assert job_a is not None and job_b is not None and job_c is not None

    # A: handed back once without using its only attempt, then completed on its second run.
    assert job_a["status"] == "completed" and job_a["attempt_count"] == 1
    assert (tmp_path / f"done-{a}").read_text() == f"{a} 1\n", "the second run is attempt 1 again"
    events_a = repo.job_events(a)
    assert [e["event"] for e in events_a] == ["rate_limited", "completed"]
    limited = events_a[0]
    assert limited["detail"]["retry_after"] == RETRY_AFTER and limited["detail"]["limit"] == "api"
    assert limited["reason"] == "retry after 2s, limit api"

    # B: claimable at once, but the bucket it consumes was paused by A's handler until then.
    assert job_b["status"] == "completed" and job_b["attempt_count"] == 1
    [b_done] = [e for e in repo.job_events(b) if e["event"] == "completed"]
    b_started = conn.execute("SELECT %s::timestamptz AS t", (b_done["detail"]["started_at"],)).fetchone()
    assert b_started is not None
    assert b_started["t"] - limited["created_at"] >= timedelta(seconds=RETRY_AFTER), (b_started, limited)

    # C: an unknown limit is a clear error in the handler, and nothing was paused for it.
    assert job_c["status"] == "failed" and job_c["last_error_code"] == "handler_error"
    assert "no rate limit named 'nope'" in job_c["last_error"]
    assert "rate_limited" not in [e["event"] for e in repo.job_events(c)]
    limits = conn.execute(f'SELECT limit_name FROM "{schema}".rate_buckets').fetchall()
    assert [r["limit_name"] for r in limits] == ["api"]
