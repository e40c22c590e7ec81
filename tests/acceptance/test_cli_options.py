"""CLI behaviour the docs promise (issue 16): global options in either place, the reaper's floor
from the registry (issue 22), and the `stats --queue Q` table."""

from __future__ import annotations

import os

import pytest

from support.processes import run_cli
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.acceptance


def _bare_env(cli_env: dict[str, str]) -> dict[str, str]:
    """The test's environment without the database and schema variables, so only flags can name them."""
    env = dict(cli_env)
    env.pop("TENURE_DATABASE_URL")
    env.pop("TENURE_SCHEMA")
    return env


@pytest.mark.parametrize("where", ["before", "after"])
def test_database_url_and_schema_are_accepted_before_and_after_the_subcommand(
        repo: Repository, cli_env: dict[str, str], dsn: str, schema: str, where: str) -> None:
    repo.enqueue("t", queue="where")
    options = ["--database-url", dsn, "--schema", schema]
    for command in (["stats", "--queue", "where"], ["dlq", "list"], ["jobs", "show", "1"]):
        argv = [*options, *command] if where == "before" else [*command, *options]
        result = run_cli(_bare_env(cli_env), *argv)
        assert result.returncode == 0, (argv, result.stderr)
    stats = run_cli(_bare_env(cli_env), *(["stats", *options] if where == "after" else [*options, "stats"]))
    assert "where" in stats.stdout, stats.stdout


def test_an_option_after_the_subcommand_wins_over_the_environment(repo: Repository, cli_env: dict[str, str]) -> None:
    repo.enqueue("t", queue="mine")
    env = {**cli_env, "TENURE_SCHEMA": "no_such_schema"}
    result = run_cli(env, "stats", "--schema", cli_env["TENURE_SCHEMA"])
    assert result.returncode == 0 and "mine" in result.stdout, result.stderr


@pytest.mark.parametrize("args", [["--once", "--heartbeat", "0"], ["--interval", "0"], ["--once", "--batch", "0"]])
def test_a_genuinely_invalid_reaper_setting_exits_2_with_one_line(repo: Repository, cli_env: dict[str, str],
                                                                  args: list[str]) -> None:
    result = run_cli(cli_env, "reaper", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("tenure: error: ") and result.stderr.count("\n") == 1, result.stderr


def test_the_reaper_takes_each_owners_heartbeat_from_the_registry_instead_of_refusing(
        repo: Repository, cli_env: dict[str, str]) -> None:
    """Issue 22 item 5: a grace below a heartbeat (given or registered) is no longer an exit 2; a
    registered owner's job waits its own heartbeat instead."""
    assert run_cli(cli_env, "reaper", "--once", "--grace", "0.5").returncode == 0
    repo.worker_register("w-slow", host="h", pid=os.getpid(), queues=["default"], concurrency=1,
                         heartbeat_seconds=8.0, version="test", lease_seconds=30.0)
    job_id = repo.enqueue("t").id
    repo.claim("w-slow", ["default"], 1, 30)
    repo.conn.execute(f'UPDATE "{repo.schema}".jobs SET lease_expires_at = now() - interval \'5 seconds\' '
                      "WHERE id = %s", (job_id,))
    kept = run_cli(cli_env, "reaper", "--once", "--grace", "1", "--heartbeat", "0.5")
    assert kept.returncode == 0 and "reaped 0 job(s)" in kept.stdout, (kept.stdout, kept.stderr)
    repo.conn.execute(f'UPDATE "{repo.schema}".jobs SET lease_expires_at = now() - interval \'10 seconds\' '
                      "WHERE id = %s", (job_id,))
    reaped = run_cli(cli_env, "reaper", "--once", "--grace", "1", "--heartbeat", "0.5")
    assert reaped.returncode == 0 and "reaped 1 job(s)" in reaped.stdout, (reaped.stdout, reaped.stderr)


def test_stats_for_one_queue_shows_in_flight_p95_lag_and_redelivered(repo: Repository,
                                                                    cli_env: dict[str, str]) -> None:
    repo.enqueue_many([JobSpec("t", {}, queue="q") for _ in range(3)])
    repo.worker_register("w-alive", host="h", pid=os.getpid(), queues=["q"], concurrency=2,
                         heartbeat_seconds=5.0, version="test", lease_seconds=30.0)
    claimed = repo.claim("w-alive", ["q"], 1, 30)
    claimed += repo.claim("w-gone", ["q"], 1, 30)  # an owner the registry does not know: not in flight
    assert len(claimed) == 2
    table = run_cli(cli_env, "stats", "--queue", "q")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    values = dict(zip(header.split(), row.split()))
    assert values["running"] == "2" and values["in_flight"] == "1", table.stdout
    assert "hb_lag_p95" in values and "hb_lag_max" in values and "redelivered" in values, table.stdout
