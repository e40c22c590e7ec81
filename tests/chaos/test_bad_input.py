"""Bad input and load: malformed and oversized payloads, invalid payloads, unknown tasks, a 100k burst.

Bad input gets a clear error and loses nothing: a rejected enqueue writes nothing; a payload
that fails its task's validator and a job for an unknown task are dead-lettered with a cause
(invalid_payload, unknown_task) instead of failing silently; a 100k-job burst lands whole while
a worker keeps serving another queue, and the counts add up afterwards. Four tests here pinned
core bugs this suite found (docs/reliability.md, "Core bugs found"); they pass since the fixes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.cli import main
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.chaos

APP = "tenure.chaos.tasks:app"


def _count(repo: Repository, queue: str | None = None) -> int:
    return sum(s.ready + s.scheduled + s.running + s.completed + s.failed for s in repo.queue_stats(queue))


def _malformed(rng: random.Random) -> str:
    """A JSON-looking string that json.loads rejects."""
    good = json.dumps({"n": rng.randrange(10**6), "s": "text", "xs": [1, 2, {"k": None}]})
    mutations = [
        lambda s: s[:rng.randrange(1, len(s) - 1)],                      # truncated
        lambda s: s.replace('"', "'", 1 + rng.randrange(3)),              # single quotes
        lambda s: s[:-1] + ",}",                                          # trailing comma
        lambda s: s.replace(":", "", 1),                                  # missing colon
        lambda s: s + rng.choice(["}", "]", "x", "{", ",", "\x01"]),      # garbage after the value
        lambda s: s.replace('"n"', "n", 1),                               # unquoted key
        lambda s: s.replace("null", rng.choice(["nul", "None", "undefined"]), 1),
        lambda s: rng.choice(["", " ", "{", "[", "tru", "-", "{'a': 1}", "[1,,2]", "0x10", "01"]),
    ]
    while True:
        text = rng.choice(mutations)(good)
        try:
            json.loads(text)
        except ValueError:
            return text


def _cli(capsys: pytest.CaptureFixture[str], dsn: str, schema: str, *args: str) -> tuple[int, str]:
    code = main(["--database-url", dsn, "--schema", schema, *args])
    return code, capsys.readouterr().err


def test_a_thousand_malformed_json_payloads_are_refused_and_write_nothing(
        dsn: str, schema: str, repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(1000)
    for _ in range(1000):
        code, err = _cli(capsys, dsn, schema, "enqueue", "chaos.validated", f"--payload={_malformed(rng)}")
        assert code == 2, err
        assert err.startswith("tenure: error: --payload is not valid JSON") and err.count("\n") == 1, err
    assert _count(repo) == 0


@pytest.mark.parametrize("payload", ["NaN", '{"a": Infinity}', '{"a": -Infinity}', '"\\u0000"',
                                     '{"a": "x\\u0000y"}', "--"])
def test_payloads_jsonb_cannot_store_get_a_clear_error(
        dsn: str, schema: str, repo: Repository, capsys: pytest.CaptureFixture[str], payload: str) -> None:
    code, err = _cli(capsys, dsn, schema, "enqueue", "chaos.validated", f"--payload={payload}")
    assert code == 2 and err.startswith("tenure: error:") and err.count("\n") == 1, err
    assert _count(repo) == 0


def test_oversized_payload_is_refused_above_the_configured_limit(
        dsn: str, schema: str, repo: Repository, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_MAX_PAYLOAD_BYTES", "1024")
    big = json.dumps({"n": 1, "blob": "x" * 2000})
    code, err = _cli(capsys, dsn, schema, "enqueue", "chaos.validated", "--payload", big)
    assert code == 2 and "above the 1024-byte limit" in err and err.count("\n") == 1, err
    assert _count(repo) == 0
    fits = json.dumps({"n": 1, "blob": "x" * 900})
    code, err = _cli(capsys, dsn, schema, "enqueue", "chaos.validated", "--payload", fits)
    assert code == 0, err
    assert _count(repo) == 1


def test_from_file_enforces_the_payload_limit_and_writes_nothing(
        dsn: str, schema: str, repo: Repository, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TENURE_MAX_PAYLOAD_BYTES", "1024")
    lines = [json.dumps({"task": "chaos.validated", "payload": {"n": i}}) for i in range(10)]
    lines.append(json.dumps({"task": "chaos.validated", "payload": {"n": 10, "blob": "x" * 2000}}))
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, err = _cli(capsys, dsn, schema, "enqueue", "--from-file", str(path))
    assert code == 2 and "limit" in err, err
    assert _count(repo) == 0


def test_from_file_with_a_bad_value_late_in_the_file_writes_nothing(
        dsn: str, schema: str, repo: Repository, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = [json.dumps({"task": "chaos.validated", "payload": {"n": i}}) for i in range(5001)]
    lines.append('{"task": "chaos.validated", "payload": {"n": NaN}}')
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, err = _cli(capsys, dsn, schema, "enqueue", "--from-file", str(path))
    assert code == 2 and err.startswith("tenure: error:"), err
    assert _count(repo) == 0


def test_the_python_api_refuses_oversized_payloads(repo: Repository) -> None:
    with pytest.raises(ValueError, match="limit"):
        repo.enqueue("chaos.validated", {"n": 1, "blob": "x" * (300 * 1024)})
    with pytest.raises(ValueError, match="limit"):
        repo.enqueue_many([JobSpec("chaos.validated", {"n": 2, "blob": "x" * (300 * 1024)})])
    assert _count(repo) == 0


def _worker(dsn: str, schema: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    env.pop("TENURE_LOG_JSON", None)
    return subprocess.Popen([sys.executable, "-m", "tenure.cli", "worker", "--app", APP, "--lease", "5",
                             "--heartbeat", "1", "--grace", "2", "--poll-interval", "0.2", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_invalid_payloads_and_unknown_tasks_are_dead_lettered_with_their_cause(
        dsn: str, schema: str, repo: Repository) -> None:
    rng = random.Random(7)
    bad_payloads: list[object] = [{}, {"n": "1"}, {"n": 1.5}, [1, 2], "text", 42, {"m": 1}, {"n": None},
                                  {"n": [1]}, {"n": {"n": 1}}]
    invalid = [JobSpec("chaos.validated", rng.choice(bad_payloads), queue="chaos") for _ in range(1000)]
    unknown = [JobSpec(f"no.such.task.{i % 7}", {"n": i}, queue="chaos") for i in range(100)]
    valid = [JobSpec("chaos.validated", {"n": i}, queue="chaos") for i in range(50)]
    jobs = invalid + unknown + valid
    rng.shuffle(jobs)
    assert repo.enqueue_many(jobs) == 1150
    worker = _worker(dsn, schema, "--queue", "chaos", "--concurrency", "8", "--burst")
    assert worker.wait(timeout=180) == 0
    causes: dict[str | None, int] = {}
    for row in repo.dlq_list(limit=5000):
        causes[row["last_error_code"]] = causes.get(row["last_error_code"], 0) + 1
    assert causes == {"invalid_payload": 1000, "unknown_task": 100}
    (stats,) = repo.queue_stats("chaos")
    assert (stats.completed, stats.failed, stats.ready, stats.running) == (50, 1100, 0, 0)
    sample = repo.dlq_list(error_code="invalid_payload", limit=1)[0]
    assert "payload" in (sample["last_error"] or "") and sample["attempt_count"] == 1


@pytest.fixture
def live_worker(dsn: str, schema: str) -> Iterator[subprocess.Popen[bytes]]:
    worker = _worker(dsn, schema, "--queue", "live", "--concurrency", "4")
    yield worker
    worker.terminate()
    worker.wait(timeout=30)


def test_a_100k_burst_lands_whole_while_workers_keep_serving(
        dsn: str, schema: str, repo: Repository, live_worker: subprocess.Popen[bytes]) -> None:
    stop = threading.Event()
    live_ids: list[int] = []

    def trickle() -> None:
        with connect(dsn) as conn:
            producer = Repository(conn, schema)
            i = 0
            while not stop.is_set():
                live_ids.append(producer.enqueue("chaos.validated", {"n": i}, queue="live").id)
                i += 1
                stop.wait(0.05)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    time.sleep(1.0)
    burst_start = repo.db_now()["now"]
    inserted = 0
    for start in range(0, 100_000, 5_000):
        inserted += repo.enqueue_many([JobSpec("chaos.validated", {"n": i}, queue="bulk")
                                       for i in range(start, start + 5_000)])
    burst_end = repo.db_now()["now"]
    time.sleep(0.5)
    stop.set()
    thread.join(timeout=10)
    assert inserted == 100_000
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        (live,) = repo.queue_stats("live")
        if live.completed == len(live_ids):
            break
        time.sleep(0.2)
    assert live_worker.poll() is None, "the worker died under the burst"
    (live,) = repo.queue_stats("live")
    (bulk,) = repo.queue_stats("bulk")
    assert (live.completed, live.failed, live.ready, live.running) == (len(live_ids), 0, 0, 0)
    assert (bulk.ready, bulk.scheduled, bulk.running, bulk.completed, bulk.failed) == (100_000, 0, 0, 0, 0)
    assert _count(repo) == 100_000 + len(live_ids)
    served_during_burst = [j for j in (repo.get_job(i) for i in live_ids)
                           if j is not None and j["completed_at"] is not None
                           and burst_start <= j["completed_at"] <= burst_end]
    assert served_during_burst, "no live job completed while the burst was being inserted"
