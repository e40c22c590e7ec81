"""tenure.testing, used as a user would (the pytest plugin's `tenure` fixture), so the helpers
stay real: enqueue, run inline, drain in-process, assert on jobs."""

from __future__ import annotations

import pytest

from tenure import App, JobContext, PermanentError
from tenure.testing import TenureTester

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]

app = App("shop")
sent: list[int] = []


@app.task("send_receipt")
def send_receipt(ctx: JobContext) -> None:
    if ctx.payload["order"] < 0:
        raise PermanentError("no such order")
    sent.append(ctx.payload["order"])


@app.task("place_order")
def place_order(ctx: JobContext) -> None:
    import tenure
    with ctx._repo() as repo:
        tenure.enqueue(repo.conn, "send_receipt", {"order": ctx.payload["order"]}, schema=repo.schema,
                       idempotency_key=f"receipt:{ctx.payload['order']}")


def test_run_inline_returns_the_finished_job(tenure: TenureTester) -> None:
    job = tenure.run_inline(app, "send_receipt", {"order": 7})
    assert job["status"] == "completed" and 7 in sent
    failed = tenure.run_inline(app, "send_receipt", {"order": -1})
    assert failed["status"] == "failed" and failed["last_error_code"] == "permanent"


def test_drain_runs_follow_up_jobs_and_assertions_see_them(tenure: TenureTester) -> None:
    tenure.enqueue("place_order", {"order": 1})
    tenure.enqueue("place_order", {"order": 2}, priority=5)
    result = tenure.drain(app)
    assert result.by_status == {"completed": 4}
    tenure.assert_enqueued("send_receipt", {"order": 1}, status="completed", count=1)
    tenure.assert_not_enqueued("refund")
    with pytest.raises(AssertionError, match="expected 3 job"):
        tenure.assert_enqueued("send_receipt", count=3)
