"""One validator for every enqueue path: flags, ``--from-file`` and the Python API (issue 12, defect 4).

Bad input exits 2 with one line on stderr and writes nothing; for ``--from-file`` the whole file
is refused, valid lines included. The Python API raises ``JobSpecError`` (a ``ValueError``)
before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tenure
from support.processes import run_cli
from tenure.core.db import Connection
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.acceptance


def _jobs(repo: Repository) -> int:
    return sum(s.ready + s.scheduled + s.running + s.completed + s.failed for s in repo.queue_stats())


def _refused(result: Any) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("tenure: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, says", [
    (["enqueue", "t", "--queue", ""], "queue"),
    (["enqueue", "t", "--queue", "   "], "queue"),
    (["enqueue", ""], "task"),
    (["enqueue", "t", "--delay", "-5"], "duration"),
    (["enqueue", "t", "--max-attempts", "0"], ">= 1"),
    (["enqueue", "t", "--idempotency-key", ""], "idempotency key"),
    (["enqueue", "t", "--delay", "1000000000d"], "delay"),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(repo: Repository, cli_env: dict[str, str],
                                                         args: list[str], says: str) -> None:
    result = run_cli(cli_env, *args)
    _refused(result)
    assert says in result.stderr, result.stderr
    assert _jobs(repo) == 0


GOOD = {"task": "t", "payload": {"n": 1}}


@pytest.mark.parametrize("bad, says", [
    ('{"task": "t", "delay": -5}', "delay"),
    ('{"task": "", "payload": {}}', "task"),
    ('{"task": "t", "queue": ""}', "queue"),
    ('{"task": "t", "max_attempts": 0}', "max_attempts"),
    ('{"task": "t", "max_attempts": "many"}', "max_attempts"),
    ('{"task": "t", "max_attempts": 2.5}', "max_attempts"),
    ('{"task": "t", "delay": "soon"}', "delay"),
    ('{"task": "t", "delay": 1e999}', "delay"),
    ('{"task": "t", "idempotency_key": ""}', "idempotency"),
    ('{"task": "t", "idempotency_key": 7}', "idempotency"),
    ('{"task": 5}', "task"),
    ('{"payload": {}}', "task"),
    ('{"task": "t", "idempotencyKey": "k"}', "idempotencyKey"),
    ('["t"]', "object"),
    ('{"task": "t", "payload": {"a": NaN}}', "JSON"),
])
def test_a_bad_line_refuses_the_whole_file(repo: Repository, cli_env: dict[str, str], tmp_path: Path,
                                          bad: str, says: str) -> None:
    lines = [json.dumps({**GOOD, "idempotency_key": f"k{i}"}) for i in range(3)]
    lines += [bad, json.dumps(GOOD)]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli(cli_env, "enqueue", "--from-file", str(path))
    _refused(result)
    assert f"{path}:4:" in result.stderr and says in result.stderr, result.stderr
    assert _jobs(repo) == 0


def test_file_defaults_come_from_the_flags_and_are_validated_too(repo: Repository, cli_env: dict[str, str],
                                                               tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"task": "t"}) + "\n" + json.dumps({"task": "t", "queue": "q2"}) + "\n")
    _refused(run_cli(cli_env, "enqueue", "--from-file", str(path), "--queue", ""))
    assert _jobs(repo) == 0
    ok = run_cli(cli_env, "enqueue", "--from-file", str(path), "--queue", "q1", "--delay", "1h")
    assert ok.returncode == 0, ok.stderr
    assert {s.queue: s.scheduled for s in repo.queue_stats()} == {"q1": 1, "q2": 1}


def test_task_and_from_file_together_are_refused(repo: Repository, cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    _refused(run_cli(cli_env, "enqueue", "t", "--from-file", str(path)))
    _refused(run_cli(cli_env, "enqueue", "--from-file", str(tmp_path / "missing.jsonl")))
    assert _jobs(repo) == 0


@pytest.mark.parametrize("kwargs, says", [
    ({"task": ""}, "task"),
    ({"task": "t", "queue": ""}, "queue"),
    ({"task": "t", "delay": -5}, "delay"),
    ({"task": "t", "delay": float("nan")}, "delay"),
    ({"task": "t", "max_attempts": 0}, "max_attempts"),
    ({"task": "t", "max_attempts": True}, "max_attempts"),
    ({"task": "t", "idempotency_key": ""}, "idempotency"),
    ({"task": "t\x00"}, "NUL"),
])
def test_the_python_api_uses_the_same_validator(conn: Connection, repo: Repository, schema: str,
                                                kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        tenure.enqueue(conn, schema=schema, **kwargs)
    with pytest.raises(ValueError, match=says):
        repo.enqueue_many([JobSpec(**{"task": "ok"}), JobSpec(**kwargs)])
    conn.rollback()
    assert _jobs(repo) == 0
    assert tenure.enqueue(conn, "t", {"n": 1}, schema=schema).created
