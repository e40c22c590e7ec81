"""`tenure workflows` (issue 39, docs/workflows.md) as a user runs it: a diamond enqueued from a
file is listed and shown with its waiting steps; a cycle, a dep on an unknown step, bad JSON and
(with --app) an unknown task exit 2 with one line and write nothing; `cancel` cancels the waiting
and pending steps; an unknown workflow id exits 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.processes import run_cli
from tenure.core.db import Connection

pytestmark = pytest.mark.acceptance

DIAMOND: dict[str, Any] = {"name": "order-42", "steps": [
    {"task": "noop", "name": "charge", "payload": {"order": 42}},
    {"task": "noop", "name": "reserve", "deps": ["charge"]},
    {"task": "noop", "name": "email", "deps": ["charge"], "ignore_failed": True},
    {"task": "noop", "name": "ship", "deps": ["reserve", "email"]},
]}
DIAMOND_NAMES = [s["name"] for s in DIAMOND["steps"]]


def _file(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def _ok(result: Any) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return str(result.stdout)


def _refused(result: Any, says: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("tenure: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr, result.stderr


def _jobs(conn: Connection, schema: str) -> int:
    row = conn.execute(f'SELECT count(*) AS n FROM "{schema}".jobs').fetchone()
    assert row is not None
    return int(row["n"])


def test_a_diamond_from_a_file_is_listed_and_shown(cli_env: dict[str, str], tmp_path: Path) -> None:
    enqueued = json.loads(_ok(run_cli(cli_env, "workflows", "enqueue", "--from-file",
                                      _file(tmp_path, "wf.json", DIAMOND), "--app", "acceptance_tasks:app", "--json")))
    steps = enqueued["steps"]
    assert list(steps) == ["charge", "reserve", "email", "ship"]
    [listed] = json.loads(_ok(run_cli(cli_env, "workflows", "list", "--json")))
    assert listed["id"] == enqueued["id"] and listed["name"] == "order-42" and listed["steps"] == 4
    assert listed["by_status"] == {"pending": 1, "waiting": 3} and listed["finished"] is False
    shown = json.loads(_ok(run_cli(cli_env, "workflows", "show", str(enqueued["id"]), "--json")))
    by_name = {s["name"]: s for s in shown["steps"]}
    assert {n: s["id"] for n, s in by_name.items()} == steps
    assert {n: s["status"] for n, s in by_name.items()} == {"charge": "pending", "reserve": "waiting",
                                                           "email": "waiting", "ship": "waiting"}
    assert by_name["ship"]["dep_names"] == ["reserve", "email"]
    assert by_name["ship"]["deps"] == [steps["reserve"], steps["email"]]
    assert by_name["email"]["ignore_failed"] is True and by_name["charge"]["task"] == "noop"
    table = _ok(run_cli(cli_env, "workflows", "show", str(enqueued["id"])))
    assert table.startswith(f"workflow {enqueued['id']}  order-42"), table
    assert any(line.split()[:5] == [str(steps["ship"]), "ship", "waiting", "noop", "reserve,email"]
               for line in table.splitlines()), table


def test_bad_workflows_exit_2_with_one_line_and_write_nothing(cli_env: dict[str, str], conn: Connection,
                                                            schema: str, tmp_path: Path) -> None:
    cycle = {"name": "loop", "steps": [{"task": "noop", "name": "a", "deps": ["b"]},
                                       {"task": "noop", "name": "b", "deps": ["a"]}]}
    unknown_dep = {"name": "lost", "steps": [{"task": "noop", "name": "a", "deps": ["nowhere"]}]}
    unknown_task = {"name": "typo", "steps": [{"task": "noop", "name": "a"},
                                              {"task": "nope", "name": "b", "deps": ["a"]}]}
    cases = [
        ([_file(tmp_path, "cycle.json", cycle)], "cycle"),
        ([_file(tmp_path, "dep.json", unknown_dep)], "'nowhere', which is no step"),
        ([_file(tmp_path, "bad.json", '{"name": "x", "steps": [')], "not JSON"),
        ([_file(tmp_path, "task.json", unknown_task), "--app", "acceptance_tasks:app"], "unknown task 'nope'"),
    ]
    for args, says in cases:
        _refused(run_cli(cli_env, "workflows", "enqueue", "--from-file", *args), says)
    assert json.loads(_ok(run_cli(cli_env, "workflows", "list", "--json"))) == []
    assert _jobs(conn, schema) == 0
    _refused(run_cli(cli_env, "workflows", "show", "999"), "no workflow 999")


def test_cancel_cancels_the_waiting_and_pending_steps(cli_env: dict[str, str], tmp_path: Path) -> None:
    workflow_id = _ok(run_cli(cli_env, "workflows", "enqueue", "--from-file", _file(tmp_path, "wf.json", DIAMOND)))
    workflow_id = workflow_id.strip()
    done = _ok(run_cli(cli_env, "workflows", "cancel", workflow_id, "--by", "test"))
    assert done.strip() == f"workflow {workflow_id}: cancelled 4 step(s)", done
    shown = json.loads(_ok(run_cli(cli_env, "workflows", "show", workflow_id, "--json")))
    assert {s["name"]: s["status"] for s in shown["steps"]} == dict.fromkeys(DIAMOND_NAMES, "cancelled")
    assert shown["cancelled_at"] is not None and shown["finished"] is True
    _refused(run_cli(cli_env, "workflows", "cancel", "999"), "no workflow 999")

