"""The second run of a guarded body in the seed-12 soak (issue 22, item 7).

The body's call to the provider is applied, but its answer is lost: the provider's server
commits and then ends the connection (``pg_terminate_backend`` of its own backend, what a fast
shutdown does to a statement that just committed). Before the fix, the exception marked the key
``retrying``, so the next attempt claimed it as fresh and ran the body again, without asking
``reconcile``: only the provider's key stopped a duplicate. Now such an exception leaves the key
in doubt. The "provider" is a real table on its own connection, so the lost answer is a real
``psycopg.OperationalError``.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from support.workers import run_burst_worker
from tenure import App, JobContext
from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.repository import Repository

pytestmark = pytest.mark.integration


class TableProvider:
    """An external provider that honours idempotency keys, backed by a real table."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.table = dsn, f'"{schema}".provider_calls'
        self.reconciled: list[str] = []
        with connect(dsn) as conn:
            conn.execute(f"CREATE TABLE {self.table} (id bigserial PRIMARY KEY, key text NOT NULL, "
                         f"applied boolean NOT NULL)")

    def send(self, key: str, *, lose_answer: bool) -> str:
        with connect(self.dsn) as conn:
            conn.execute(f"INSERT INTO {self.table} (key, applied) "
                         f"SELECT %s, NOT EXISTS (SELECT 1 FROM {self.table} WHERE key = %s AND applied)",
                         (key, key))
            if lose_answer:  # committed; now the connection dies before the caller hears back
                conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return f"msg-{key}"

    def lookup(self, key: str) -> str | None:
        self.reconciled.append(key)
        with connect(self.dsn) as conn:
            row = conn.execute(f"SELECT 1 FROM {self.table} WHERE key = %s AND applied", (key,)).fetchone()
        return f"msg-{key}" if row else None

    def calls(self, key: str) -> int:
        with connect(self.dsn) as conn:
            row = conn.execute(f"SELECT count(*) AS n FROM {self.table} WHERE key = %s", (key,)).fetchone()
        assert row is not None
        return int(row["n"])


def _app(provider: TableProvider, *, reconcile: bool, failure: str = "lost_answer") -> App:
    app = App(retry=RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=5))

    @app.task("send")
    def send(ctx: JobContext) -> None:
        key = str(ctx.payload["key"])
        options: dict[str, Any] = {"reconcile": provider.lookup} if reconcile else {}
        with ctx.effect(key, **options) as eff:
            if eff.already_succeeded:
                return
            if failure == "before_send" and ctx.attempt == 1:
                raise ValueError("payload rejected before anything was sent")
            eff.succeeded(provider.send(key, lose_answer=failure == "lost_answer" and ctx.attempt == 1))

    return app


def test_lost_answer_is_reconciled_not_rerun(dsn: str, schema: str, repo: Repository) -> None:
    provider = TableProvider(dsn, schema)
    key = "invoice:7:email:v1"
    job = repo.enqueue("send", {"key": key})
    run_burst_worker(_app(provider, reconcile=True), dsn, schema)
    assert repo.get_job(job.id)["status"] == "completed"  # type: ignore[index]
    assert provider.calls(key) == 1, "the body ran again after its provider call was applied"
    assert provider.reconciled == [key]
    execution = repo.execution_get(key)
    assert execution is not None and execution["status"] == "succeeded"
    assert execution["result_ref"] == f"msg-{key}"


def test_lost_answer_without_reconcile_is_dead_lettered_in_doubt(dsn: str, schema: str, repo: Repository) -> None:
    provider = TableProvider(dsn, schema)
    key = "invoice:8:email:v1"
    job = repo.enqueue("send", {"key": key})
    run_burst_worker(_app(provider, reconcile=False), dsn, schema)
    row = repo.get_job(job.id)
    assert row is not None and row["status"] == "failed" and row["last_error_code"] == "effect_in_doubt"
    assert provider.calls(key) == 1


def test_failure_before_send_is_still_retried_at_once(dsn: str, schema: str, repo: Repository) -> None:
    """Unchanged: an ordinary exception means the effect did not happen; the key is retried."""
    provider = TableProvider(dsn, schema)
    key = "invoice:9:email:v1"
    job = repo.enqueue("send", {"key": key})
    run_burst_worker(_app(provider, reconcile=False, failure="before_send"), dsn, schema)
    assert repo.get_job(job.id)["status"] == "completed"  # type: ignore[index]
    assert provider.calls(key) == 1 and provider.reconciled == []


def test_the_lost_answer_is_a_real_connection_error(dsn: str, schema: str) -> None:
    """The simulation is faithful: the caller gets psycopg's OperationalError, the row is there."""
    provider = TableProvider(dsn, schema)
    with pytest.raises(psycopg.OperationalError):
        provider.send("k", lose_answer=True)
    assert provider.calls("k") == 1
