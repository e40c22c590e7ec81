"""Job control through the CLI and worker processes: priorities, cancel, retry, listing, pause,
the global running limit sampled from the database, timeouts, periodic jobs with three workers,
and bad input (exit 2, one line, nothing changed)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

import pytest

from support.processes import run_cli, wait_for
from tenure.core.db import connect
from tenure.core.repository import Repository

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

Spawn = Callable[..., "Popen[bytes]"]


def _ok(env: dict[str, str], *args: str) -> str:
    r = run_cli(env, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def _bad(env: dict[str, str], *args: str, match: str) -> None:
    r = run_cli(env, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], r.stderr


def _jobs(env: dict[str, str], *args: str) -> list[dict[str, object]]:
    return list(json.loads(_ok(env, "jobs", "list", "--json", "--limit", "1000", *args)))


def test_priority_cancel_retry_list_and_bad_input(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = cli_env
    low = int(_ok(env, "enqueue", "noop", "--priority", "-5"))
    high = int(_ok(env, "enqueue", "noop", "--priority", "100"))
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"task": "noop", "priority": 7}\n{"task": "noop", "queue": "other"}\n')
    _ok(env, "enqueue", "--from-file", str(lines))
    before = _jobs(env)
    assert {j["id"]: j["priority"] for j in before}[high] == 100 and len(before) == 4

    # Bad input: exit 2, one line, nothing changed.
    _bad(env, "enqueue", "noop", "--priority", "101", match="out of range")
    _bad(env, "enqueue", "noop", "--priority", "high", match="--priority")
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text('{"task": "noop"}\n{"task": "noop", "priority": -500}\n')
    _bad(env, "enqueue", "--from-file", str(bad_file), match="out of range")
    _bad(env, "jobs", "cancel", "999999", match="no job 999999")
    _bad(env, "jobs", "cancel", str(low), "999999", match="no job 999999")
    _bad(env, "jobs", "retry", str(low), match="is pending")
    _bad(env, "jobs", "list", "--status", "bogus", match="--status")
    _bad(env, "queues", "limit", "default", "--max-running", "-1", match="--max-running")
    assert _jobs(env) == before

    # Cancel a pending job, then the no-op on a cancelled one.
    assert "cancelled job" in _ok(env, "jobs", "cancel", str(low), "--by", "ops@example")
    _bad(env, "jobs", "cancel", str(low), match="is cancelled")
    listed = {j["id"]: j for j in _jobs(env, "--status", "cancelled")}
    assert list(listed) == [low] and listed[low]["status"] == "cancelled"
    show = json.loads(_ok(env, "jobs", "show", str(low), "--json"))
    cancel_event = next(e for e in show["events"] if e["event"] == "cancelled")
    assert cancel_event["detail"]["requested_by"] == "ops@example"

    # Retry it (cancelled -> pending with a fresh budget).
    assert "retrying job" in _ok(env, "jobs", "retry", str(low))
    assert {j["id"]: j["status"] for j in _jobs(env)}[low] == "pending"

    # A burst worker drains in priority order.
    _ok(env, "worker", "--app", "acceptance_tasks:app", "--queue", "default", "--burst", "--concurrency", "1",
        "--claim-batch", "1", "--heartbeat", "1s", "--lease", "5s")
    with connect(env["TENURE_DATABASE_URL"]) as conn:
        # A claim writes no audit row: the record that ends each attempt carries its start.
        claims = conn.execute(
            f"SELECT job_id FROM \"{env['TENURE_SCHEMA']}\".job_events WHERE detail ? 'started_at' "
            "ORDER BY (detail ->> 'started_at')::timestamptz, id").fetchall()
    order = [int(r["job_id"]) for r in claims]  # type: ignore[call-overload]
    assert order.index(high) < order.index(low)

    # Paging: two pages of two cover the four jobs once.
    page1 = run_cli(env, "jobs", "list", "--json", "--limit", "2")
    cursor = page1.stderr.strip().split()[-1]
    page2 = json.loads(_ok(env, "jobs", "list", "--json", "--limit", "2", "--cursor", cursor))
    ids = [j["id"] for j in json.loads(page1.stdout)] + [j["id"] for j in page2]
    assert sorted(ids) == sorted(j["id"] for j in before)
    completed = _jobs(env, "--status", "completed")
    _bad(env, "jobs", "cancel", str(completed[0]["id"]), match="is completed")


def test_flow_keys_in_jobs_list_and_show(cli_env: dict[str, str]) -> None:
    env = cli_env
    acme = int(_ok(env, "enqueue", "noop", "--flow-key", "tenant:acme"))
    other = int(_ok(env, "enqueue", "noop", "--flow-key", "tenant:acme-2"))
    _ok(env, "enqueue", "noop", "--queue", "plain")
    assert [(j["id"], j["flow_key"]) for j in _jobs(env, "--flow-key", "tenant:acme")] == [(acme, "tenant:acme")]
    listed = _ok(env, "jobs", "list", "--flow-key", "tenant:acme-2").splitlines()
    assert listed[0].split()[-1] == "flow_key" and listed[1].split()[0] == str(other)
    assert listed[1].split()[-1] == "tenant:acme-2"
    assert "flow_key" not in _ok(env, "jobs", "list", "--queue", "plain"), "the column only when a row has a key"
    shown = {line.split()[0]: line.split()[-1] for line in _ok(env, "jobs", "show", str(acme)).splitlines() if line}
    assert shown["flow_key"] == "tenant:acme"
    assert json.loads(_ok(env, "jobs", "show", str(acme), "--json"))["job"]["flow_key"] == "tenant:acme"
    _bad(env, "jobs", "list", "--flow-key", "", match="flow key must not be empty")
    _bad(env, "jobs", "list", "--flow-key", "x" * 201, match="at most 200 bytes")


def test_cancel_a_running_job_from_the_cli(cli_env: dict[str, str], spawn: Spawn) -> None:
    env = cli_env
    job = _ok(env, "enqueue", "hold", "--payload", '{"seconds": 60}').strip()
    spawn("worker", "--app", "control_tasks:app", "--lease", "3s", "--heartbeat", "1s")
    wait_for(lambda: _jobs(env, "--status", "running"), 30, "the job to run")
    out = _ok(env, "jobs", "cancel", job)
    assert "was running" in out
    show = wait_for(lambda: (s := json.loads(_ok(env, "jobs", "show", job, "--json")))
                    and any(e["event"] == "stale_completion_rejected" for e in s["events"]) and s, 30,
                    "the handler's late completion to be rejected")
    assert show["job"]["status"] == "cancelled"
    events = [e["event"] for e in show["events"]]
    assert events.index("cancelled") < events.index("heartbeat_lost")


def test_pause_and_resume_from_the_cli(cli_env: dict[str, str], spawn: Spawn) -> None:
    env = cli_env
    _ok(env, "queues", "pause", "default")
    assert "already paused" in _ok(env, "queues", "pause", "default")
    _ok(env, "enqueue", "noop")
    spawn("worker", "--app", "acceptance_tasks:app", "--poll-interval", "0.2")
    time.sleep(3)
    queues = {q["queue"]: q for q in json.loads(_ok(env, "queues", "list", "--json"))}
    assert queues["default"]["paused"] is True and queues["default"]["ready"] == 1
    stats = {s["queue"]: s for s in json.loads(_ok(env, "stats", "--json"))}
    assert stats["default"]["paused"] is True
    _ok(env, "queues", "resume", "default")
    wait_for(lambda: _jobs(env, "--status", "completed"), 30, "the job to run after resume")


def test_global_limit_holds_across_three_workers(cli_env: dict[str, str], spawn: Spawn) -> None:
    """3 worker processes x concurrency 20 against --max-running 5: sampled from the DB, the
    number running never exceeds 5 (and reaches it: the limit, not the load, holds it down)."""
    env = cli_env
    _ok(env, "queues", "limit", "default", "--max-running", "5")
    _ok(env, "enqueue", "--from-file", _write_busy(env, 300))
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with connect(env["TENURE_DATABASE_URL"]) as conn:
            while not stop.is_set():
                row = conn.execute(f"SELECT count(*) AS n FROM \"{env['TENURE_SCHEMA']}\".jobs "
                                   "WHERE status = 'running' AND queue_name = 'default'").fetchone()
                samples.append(int(row["n"]))  # type: ignore[call-overload,index]
                time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for _ in range(3):
            spawn("worker", "--app", "control_tasks:app", "--concurrency", "20", "--poll-interval", "0.2")
        wait_for(lambda: len(_jobs(env, "--status", "completed")) == 300, 120, "300 completions")
    finally:
        stop.set()
        sampler.join()
    assert max(samples) <= 5, Counter(samples)
    assert max(samples) == 5
    print(f"samples={len(samples)} max_running={max(samples)} distribution={sorted(Counter(samples).items())}")


def _write_busy(env: dict[str, str], n: int) -> str:
    path = Path(env.get("TMPDIR", "/tmp")) / f"busy-{env['TENURE_SCHEMA']}.jsonl"
    path.write_text("".join(json.dumps({"task": "busy", "payload": {"seconds": 0.05}}) + "\n" for _ in range(n)))
    return str(path)


def test_async_timeout_dead_letters_with_task_timeout(cli_env: dict[str, str], spawn: Spawn) -> None:
    env = cli_env
    job = _ok(env, "enqueue", "hang_async").strip()
    spawn("worker", "--app", "control_tasks:app", "--lease", "3s", "--heartbeat", "1s")
    failed = wait_for(lambda: _jobs(env, "--status", "failed"), 30, "the timeout to dead-letter")
    assert [j["id"] for j in failed] == [int(job)] and failed[0]["last_error_code"] == "task_timeout"


def test_periodic_with_three_workers_enqueues_each_slot_once(cli_env: dict[str, str], spawn: Spawn) -> None:
    env = cli_env
    for _ in range(3):
        spawn("worker", "--app", "control_tasks:periodic_app", "--poll-interval", "0.2")
    wait_for(lambda: len(_jobs(env, "--task", "tick", "--status", "completed")) >= 6, 60, "six ticks")
    with connect(env["TENURE_DATABASE_URL"]) as conn:
        keys = [str(j["idempotency_key"]) for j in Repository(conn, env["TENURE_SCHEMA"]).job_list(
            task="tick", limit=1000)]
    assert len(keys) == len(set(keys))
    # Consecutive slots are two seconds apart: none missed, none doubled.
    from datetime import datetime
    times = sorted(datetime.fromisoformat(k.split(":", 2)[2]) for k in keys)
    gaps = {(b - a).total_seconds() for a, b in zip(times, times[1:])}
    assert gaps == {2.0}, gaps


def test_invalid_cron_in_an_app_exits_2(cli_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "bad_cron_app.py").write_text(
        "from tenure import App\napp = App()\n\n@app.periodic('61 * * * *', name='bad')\n"
        "def bad(ctx):\n    pass\n")
    env = {**cli_env, "PYTHONPATH": f"{tmp_path}:{cli_env['PYTHONPATH']}"}
    r = run_cli(env, "worker", "--app", "bad_cron_app:app", "--burst")
    assert r.returncode == 2 and "invalid cron expression" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
