"""Sample tasks for `tenure demo` and the tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tenure import App, JobContext, PermanentError, RetryableError

app = App("demo")


def _invoice_payload(payload: dict[str, object]) -> None:
    if not isinstance(payload.get("invoice_id"), int):
        raise ValueError("invoice_id must be an integer")


@app.task("send_invoice_email", validate=_invoice_payload)
def send_invoice_email(ctx: JobContext) -> None:
    """Sends one invoice email as a guarded effect. ``payload["provider_seconds"]`` (default
    0.05) is how long the provider call takes: e2e/kind uses longer calls so that jobs are
    running when it kills a pod or freezes a node."""
    invoice = ctx.payload["invoice_id"]
    with ctx.effect(f"invoice:{invoice}:email:v1") as effect:
        if not effect.already_succeeded:
            # the provider call, made with the effect's key
            time.sleep(float(ctx.payload.get("provider_seconds", 0.05)))
            effect.succeeded(f"msg-{invoice}")


@app.task("crash_once")
def crash_once(ctx: JobContext) -> None:
    """Kills its own worker mid-job on the first attempt (a node dying), then succeeds."""
    marker = Path(ctx.payload["marker"])
    if not marker.exists():
        marker.touch()
        time.sleep(0.3)
        os._exit(137)
    time.sleep(0.2)


@app.task("always_fails")
def always_fails(ctx: JobContext) -> None:
    raise PermanentError("this payload can never succeed", code="invalid_reference")


@app.task("flaky_once")
def flaky_once(ctx: JobContext) -> None:
    """Works ``payload["seconds"]`` (default 0), then fails retryably on its first attempt only.

    Exercises retries, backoff and lease extensions on a real cluster (e2e/kind); the second
    attempt succeeds.
    """
    time.sleep(float(ctx.payload.get("seconds", 0)))
    if ctx.attempt == 1:
        raise RetryableError("the first attempt always fails", code="flaky_first_attempt",
                             retry_after=1.0)
