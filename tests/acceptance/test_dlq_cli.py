"""`tenure dlq`: list, controlled replay (validated, rate limited, idempotent), purge (R12)."""

from __future__ import annotations

import json
import time

import pytest

from support.processes import run_cli
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.acceptance


def _dead_letter_all(repo: Repository, n: int) -> None:
    jobs = repo.claim("w", ["default"], n, 30)
    for j in jobs:
        assert repo.dead_letter("w", j.id, j.lock_token, error="boom", error_code="upstream_5xx")


def test_replay_is_rate_limited_skips_invalid_and_never_replays_twice(repo: Repository,
                                                                      cli_env: dict[str, str]) -> None:
    repo.enqueue_many([JobSpec("send_invoice_email", {"invoice_id": "not-a-number"}) for _ in range(3)]
                      + [JobSpec("send_invoice_email", {"invoice_id": i}) for i in range(25)])
    _dead_letter_all(repo, 28)
    listed = json.loads(run_cli(cli_env, "dlq", "list", "--json", "--error-code", "upstream_5xx").stdout)
    assert len(listed) == 28 and listed[0]["last_error_code"] == "upstream_5xx"

    started = time.monotonic()
    first = run_cli(cli_env, "dlq", "replay", "--rate", "5", "--limit", "20", "--app", "tenure.demo.tasks:app")
    elapsed = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    assert "done: 20 replayed" in first.stdout
    assert elapsed >= 19 / 5 * 0.9, f"20 jobs at <= 5/s take >= ~3.8s, took {elapsed:.1f}s"
    assert first.stderr.count("skipped") == 3 and "invoice_id must be an integer" in first.stderr
    pending = [s for s in repo.queue_stats("default")][0]
    assert pending.ready == 20

    second = run_cli(cli_env, "dlq", "replay", "--rate", "50", "--limit", "100", "--app", "tenure.demo.tasks:app")
    assert "done: 5 replayed" in second.stdout, second.stdout  # only the rest, nothing twice
    third = run_cli(cli_env, "dlq", "replay", "--rate", "50", "--limit", "100", "--app", "tenure.demo.tasks:app")
    assert "done: 0 replayed" in third.stdout
    [s] = repo.queue_stats("default")
    assert (s.ready, s.failed) == (25, 3)
    invalid_id = min(r["id"] for r in listed)
    assert "replay_skipped_invalid" in [e["event"] for e in repo.job_events(invalid_id)]
    assert repo.get_job(invalid_id)["status"] == "failed"  # type: ignore[index]


def test_purge_deletes_only_old_dead_letters(repo: Repository, cli_env: dict[str, str]) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(3)])
    _dead_letter_all(repo, 3)
    assert "purged 0" in run_cli(cli_env, "dlq", "purge", "--older-than", "1h").stdout
    time.sleep(1.1)
    assert "purged 3" in run_cli(cli_env, "dlq", "purge", "--older-than", "1s").stdout


def test_dry_run_previews_exactly_what_the_real_run_replays_and_skips(repo: Repository,
                                                                     cli_env: dict[str, str]) -> None:
    """The preview validates against --app like the real run and walks the same jobs in the same
    order under the same --limit: its lists equal what the real run then replays and skips."""
    good = [JobSpec("send_invoice_email", {"invoice_id": i}) for i in range(7)]
    bad = [JobSpec("send_invoice_email", {"invoice_id": "bad"}), JobSpec("no_such_task", {})]
    repo.enqueue_many([good[0], bad[0], *good[1:4], bad[1], *good[4:]])
    _dead_letter_all(repo, 9)
    args = ("dlq", "replay", "--rate", "100", "--limit", "5", "--app", "tenure.demo.tasks:app")

    preview = run_cli(cli_env, *args, "--dry-run")
    assert preview.returncode == 0, preview.stderr
    would = [int(line.split()[2]) for line in preview.stdout.splitlines() if line.startswith("would replay ")]
    would_skip = [int(line.split()[2].rstrip(":")) for line in preview.stdout.splitlines()
                  if line.startswith("would skip ")]
    [s] = repo.queue_stats("default")
    assert (s.ready, s.failed) == (0, 9), "a dry run changes nothing"
    assert len(would) == 5 and len(would_skip) == 2, preview.stdout

    real = run_cli(cli_env, *args)
    assert real.returncode == 0, real.stderr
    skipped = [int(line.split()[1].rstrip(":")) for line in real.stderr.splitlines() if line.startswith("skipped ")]
    still_dead = {r["id"] for r in repo.dlq_list(limit=10)}
    replayed = [j for j in sorted(would + would_skip + list(still_dead)) if j not in still_dead]
    assert skipped == would_skip
    assert replayed == would
