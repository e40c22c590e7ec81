"""Seed 001's invoice email flow with a real worker killed at the worst moment (R13, R14, R16)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

import pytest

from support.fake_provider import FakeProvider
from support.processes import wait_for
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

WORKER = ["worker", "--app", "acceptance_tasks:app", "--lease", "1", "--heartbeat", "0.3", "--grace", "0.5",
          "--poll-interval", "0.1", "--backoff-base", "0", "--backoff-max", "0"]
REAPER = ["reaper", "--interval", "0.2", "--grace", "0.5", "--heartbeat", "0.3", "--backoff-base", "0",
          "--backoff-max", "0"]


def _run_crash_flow(repo: Repository, spawn: Callable[..., Popen[bytes]], provider: FakeProvider,
                    reconcile: str | None, final: str = "completed") -> int:
    job_id = repo.enqueue("send_invoice_email", {"invoice_id": 42, "to": "a@example.test", "provider": provider.url,
                                                 "crash_after_send": True, "reconcile": reconcile}).id
    first = spawn(*WORKER)
    assert first.wait(timeout=30) == 137, "the first attempt died after the provider accepted the send"
    spawn(*REAPER)
    spawn(*WORKER)
    wait_for(lambda: repo.get_job(job_id)["status"] == final, 30, f"the retry to end {final}")  # type: ignore[index]
    return job_id


def test_killed_after_send_resends_with_same_key_and_provider_sends_once(
        repo: Repository, spawn: Callable[..., Popen[bytes]]) -> None:
    with FakeProvider(honour_idempotency=True) as provider:
        job_id = _run_crash_flow(repo, spawn, provider, "resend")
        assert provider.requests == 2, "the retry re-sent (the handler chose to resend when in doubt)"
        assert len(provider.sent) == 1, "the provider recorded exactly one email"
        assert {s["key"] for s in provider.sent} == {"invoice:42:email:v1"}
    execution = repo.execution_get("invoice:42:email:v1")
    assert execution is not None and execution["status"] == "succeeded"
    assert execution["result_ref"] == provider.sent[0]["message_id"] and execution["attempt_count"] == 2
    assert repo.get_job(job_id)["attempt_count"] == 2  # type: ignore[index]


def test_killed_after_send_reconciles_with_the_provider_and_sends_once(
        repo: Repository, spawn: Callable[..., Popen[bytes]]) -> None:
    """Even a provider without idempotency keys: the in-doubt retry asks it instead of resending."""
    with FakeProvider(honour_idempotency=False) as provider:
        _run_crash_flow(repo, spawn, provider, "lookup")
        assert provider.requests == 1 and provider.lookups == 1 and len(provider.sent) == 1
    execution = repo.execution_get("invoice:42:email:v1")
    assert execution is not None and execution["status"] == "succeeded"
    assert execution["result_ref"] == provider.sent[0]["message_id"]


def test_killed_after_send_without_reconcile_is_dead_lettered_in_doubt(
        repo: Repository, spawn: Callable[..., Popen[bytes]]) -> None:
    """docs/idempotency.md: an unreconciled in-doubt effect is never re-run blindly."""
    with FakeProvider(honour_idempotency=False) as provider:
        job_id = _run_crash_flow(repo, spawn, provider, None, final="failed")
        assert len(provider.sent) == 1
    assert repo.get_job(job_id)["last_error_code"] == "effect_in_doubt"  # type: ignore[index]


def test_provider_without_idempotency_shows_the_documented_duplicate(
        repo: Repository, spawn: Callable[..., Popen[bytes]]) -> None:
    """docs/idempotency.md: a handler that chooses to resend when in doubt, to a provider without
    idempotency support, costs at most one duplicate per crash between send and record."""
    with FakeProvider(honour_idempotency=False) as provider:
        _run_crash_flow(repo, spawn, provider, "resend")
        assert len(provider.sent) == 2


def test_redelivery_resumes_from_the_last_checkpoint(repo: Repository, spawn: Callable[..., Popen[bytes]],
                                                     tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    job_id = repo.enqueue("checkpointed", {"log": str(log)}).id
    first = spawn(*WORKER)
    assert first.wait(timeout=30) == 137
    spawn(*REAPER)
    spawn(*WORKER)
    wait_for(lambda: repo.get_job(job_id)["status"] == "completed", 30, "completion")  # type: ignore[index]
    assert log.read_text().split() == ["1:reserve", "1:charge", "2:ship"]
    assert repo.get_job(job_id)["checkpoint_step"] == "ship"  # type: ignore[index]
