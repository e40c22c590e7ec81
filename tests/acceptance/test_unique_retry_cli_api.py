"""A failed job whose unique key another live job holds, put back through the CLI (`tenure jobs
retry`, `tenure dlq replay`: exit 2, one line naming both jobs, nothing changed) and `tenure
ui`'s API (409 with one JSON message; a bulk retry reports the held jobs beside the others)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import run_cli
from tenure.core.repository import Repository
from tenure.core.unique import Unique
from ui_server import call, ui_process

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

BY_CUSTOMER = Unique(by=["customer_id"])


@pytest.fixture
def ui(cli_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        yield url


def _dead(repo: Repository, customer: int) -> int:
    job = repo.enqueue("sync", {"customer_id": customer}, max_attempts=1, unique=BY_CUSTOMER).id
    [claimed] = repo.claim("w", ["default"], 1, 30)
    assert repo.dead_letter("w", job, claimed.lock_token, error="x", error_code="x")
    return job


def test_cli_exits_2_with_one_line(cli_env: dict[str, str], repo: Repository) -> None:
    job = _dead(repo, 1)
    holder = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
    line = f"job {job} not retried: its unique key held by job {holder} (pending)"
    r = run_cli(cli_env, "jobs", "retry", str(job))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [f"tenure: error: {line}; cancel or finish the holder first"]
    r = run_cli(cli_env, "dlq", "replay", "--rate", "100")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"job {job} not replayed: its unique key held by job {holder} (pending)" in r.stderr.strip().splitlines()[-1]
    assert repo.get_job(job)["status"] == "failed"  # type: ignore[index]


def test_api_answers_409_and_bulk_reports_the_held(ui: str, repo: Repository) -> None:
    job, free = _dead(repo, 1), _dead(repo, 2)
    holder = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
    why = f"unique key held by job {holder} (pending)"
    status, body, _ = call(f"{ui}/api/v1/jobs/{job}/retry", "POST", {})
    assert (status, body) == (409, {"error": f"job {job} not retried: its {why}; cancel or finish the holder first"})
    status, body, _ = call(f"{ui}/api/v1/dlq/replay", "POST", {"ids": [job], "rate": 100})
    assert status == 409 and body == {"error": f"job {job} not replayed: its {why}; cancel or finish the holder first"}
    status, body, _ = call(f"{ui}/api/v1/jobs/bulk", "POST", {"action": "retry", "ids": [job, free]})
    assert status == 200 and (body["matched"], body["changed"]) == (2, 1)
    assert body["skipped"] == [{"id": job, "why": why}]
    status, body, _ = call(f"{ui}/api/v1/jobs/bulk", "POST", {"action": "retry", "ids": [job]})
    assert status == 409 and body == {"error": f"job {job} not retried: its {why}; cancel or finish the holder first"}
