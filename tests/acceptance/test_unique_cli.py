"""`tenure enqueue --unique-by` (issue 39, item 3; docs/unique.md): a held key prints the holder's
id; bad unique input exits 2 with one line and writes nothing, for flags and --from-file alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.processes import run_cli
from tenure.core.db import Connection

pytestmark = pytest.mark.acceptance


def _count(conn: Connection, schema: str) -> int:
    return int(conn.execute(f'SELECT count(*) AS n FROM "{schema}".jobs').fetchone()["n"])  # type: ignore[index]


def _refused(result: Any, says: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("tenure: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr, result.stderr


@pytest.mark.parametrize("args, says", [
    (["--unique-by", ""], "at least one"),
    (["--unique-by", "a,,b"], "non-empty"),
    (["--unique-by", "customer_id", "--unique-period", "0"], "period"),
    (["--unique-by", "customer_id", "--unique-period", "1.5"], "period"),
    (["--unique-by", "customer_id", "--unique-period", "-5"], "period"),
    (["--unique-period", "60"], "needs unique by"),
    (["--unique-by", "missing"], "'missing' is missing from the payload"),
    (["--unique-by", "customer_id", "--unique-states", "pending"], "must include"),
    (["--unique-by", "customer_id", "--unique-states", "pending,running,completed"], "completed"),
    (["--unique-by", "customer_id", "--unique-on-conflict", "debounce"], "needs a period"),
    (["--unique-by", "customer_id", "--unique-on-conflict", "merge"], "invalid choice"),
])
def test_bad_unique_flags_exit_2_and_write_nothing(cli_env: dict[str, str], conn: Connection, schema: str,
                                                   args: list[str], says: str) -> None:
    _refused(run_cli(cli_env, "enqueue", "sync", "--payload", '{"customer_id": 1}', *args), says)
    assert _count(conn, schema) == 0


def test_a_held_key_prints_the_holder(cli_env: dict[str, str], conn: Connection, schema: str) -> None:
    first = run_cli(cli_env, "enqueue", "sync", "--payload", '{"customer_id": 1, "n": 1}', "--unique-by", "customer_id",
                    "--unique-period", "5m")
    assert first.returncode == 0, first.stderr
    again = run_cli(cli_env, "enqueue", "sync", "--payload", '{"customer_id": 1, "n": 2}', "--unique-by", "customer_id",
                    "--unique-period", "300", "--unique-on-conflict", "replace")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"{first.stdout.strip()} (existing job with this unique key, payload replaced)"
    assert _count(conn, schema) == 1


def test_from_file_honours_each_line_and_refuses_a_bad_one_whole(cli_env: dict[str, str], conn: Connection,
                                                                 schema: str, tmp_path: Path) -> None:
    lines = [{"task": "sync", "payload": {"customer_id": 1}}, {"task": "sync", "payload": {"customer_id": 1}},
             {"task": "sync", "payload": {"customer_id": 2}, "unique_period": "1h"},
             {"task": "sync", "payload": {"customer_id": 2, "v": 2}, "unique_by": None}]
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = run_cli(cli_env, "enqueue", "--from-file", str(path), "--unique-by", "customer_id")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("enqueued 3 of 4 jobs"), result.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "sync", "payload": {"customer_id": 3}}) + "\n"
                   + json.dumps({"task": "sync", "payload": {"customer_id": 4}, "unique_period": 0}) + "\n")
    _refused(run_cli(cli_env, "enqueue", "--from-file", str(bad), "--unique-by", "customer_id"), ":2: unique period")
    assert _count(conn, schema) == 3
