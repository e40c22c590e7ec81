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


class DemoEmailProvider:
    """A stand-in for an email provider that deduplicates on the idempotency key (as providers
    with idempotency keys do): sending twice under one key sends one email. It remembers what
    this process sent; a new process (the pod that re-runs a killed pod's job) knows nothing, so
    :meth:`find_by_key` returns None and the handler re-sends under the same key, which such a
    provider answers with the first message id. A provider without idempotency keys needs a
    real lookup here (docs/idempotency.md)."""

    def __init__(self) -> None:
        self._sent: dict[str, str] = {}

    def send(self, invoice_id: int, *, idempotency_key: str, seconds: float) -> str:
        time.sleep(seconds)  # the provider call
        return self._sent.setdefault(idempotency_key, f"msg-{invoice_id}")

    def find_by_key(self, idempotency_key: str) -> str | None:
        return self._sent.get(idempotency_key)


provider = DemoEmailProvider()


@app.task("send_invoice_email", validate=_invoice_payload)
def send_invoice_email(ctx: JobContext) -> None:
    """Sends one invoice email as a guarded effect (the README's "Writing tasks" handler).
    ``payload["provider_seconds"]`` (default 0.05) is how long the provider call takes: e2e/kind
    uses longer calls so that jobs are running when it kills a pod or freezes a node. An effect
    left in doubt by a killed attempt is reconciled with the provider, not dead-lettered."""
    invoice = ctx.payload["invoice_id"]
    key = f"invoice:{invoice}:email:v1"
    with ctx.effect(key, reconcile=provider.find_by_key) as effect:
        if effect.already_succeeded:
            return
        ctx.check_lease()  # never start the provider call on a lost lease
        message_id = provider.send(invoice, idempotency_key=key,
                                   seconds=float(ctx.payload.get("provider_seconds", 0.05)))
        effect.succeeded(message_id)


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
