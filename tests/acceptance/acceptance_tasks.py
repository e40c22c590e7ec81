"""Tasks run by subprocess workers in the acceptance tests."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tenure import App, JobContext
from tenure.core.errors import LeaseLost

app = App("acceptance")


@app.task("sleepy")
def sleepy(ctx: JobContext) -> None:
    """Sleeps ``seconds`` (wall time passes even while the process is stopped), then records
    whether its lease was lost, waiting briefly for the heartbeat's verdict if asked to."""
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.05)
    # What a handler that watches the flag sees first thing after a freeze, and whether
    # check_lease() would have raised at that moment.
    lost_at_resume = ctx.lease_lost.is_set()
    try:
        ctx.check_lease()
        check_raised = False
    except LeaseLost:
        check_raised = True
    if ctx.payload.get("wait_for_lost"):
        ctx.lease_lost.wait(float(ctx.payload["wait_for_lost"]))
    out = Path(ctx.payload["marker_dir"]) / f"{ctx.job_id}-{ctx.attempt}-{ctx.lock_token}.json"
    out.write_text(json.dumps({"lease_lost": ctx.lease_lost.is_set(), "reason": ctx.lease_lost_reason,
                               "lost_at_resume": lost_at_resume, "check_raised_at_resume": check_raised,
                               "worker": ctx.worker_id, "fence": ctx.fencing_token}))


@app.task("noop")
def noop(ctx: JobContext) -> None:
    return None


def _post(url: str, body: dict[str, object], key: str) -> str:
    import urllib.request
    req = urllib.request.Request(f"{url}/send", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Idempotency-Key": key})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(json.loads(resp.read())["message_id"])


def _lookup(url: str, key: str) -> str | None:
    import urllib.parse
    import urllib.request
    with urllib.request.urlopen(f"{url}/lookup?{urllib.parse.urlencode({'key': key})}", timeout=5) as resp:
        found = json.loads(resp.read())["message_id"]
    return None if found is None else str(found)


@app.task("send_invoice_email")
def send_invoice_email(ctx: JobContext) -> None:
    """Seed 001's flow: the effect store guards the send; the provider gets the same key.

    With ``crash_after_send`` the first attempt dies after the provider accepted the email and
    before success is recorded: the worst moment for duplicates. The retry finds the effect in
    doubt; ``reconcile`` says what the handler does then: ``lookup`` asks the provider,
    ``resend`` sends again with the same key (safe only if the provider honours it), and none
    leaves the job to be dead-lettered as ambiguous.
    """
    invoice = ctx.payload["invoice_id"]
    provider = ctx.payload["provider"]
    key = f"invoice:{invoice}:email:v1"
    how = ctx.payload.get("reconcile")
    reconcile = {"lookup": lambda k: _lookup(provider, k), "resend": lambda k: None}.get(how or "")
    with ctx.effect(key, reconcile=reconcile) as effect:
        if effect.already_succeeded:
            return
        message_id = _post(ctx.payload["provider"], {"to": ctx.payload["to"], "invoice": invoice}, key)
        if ctx.payload.get("crash_after_send") and ctx.attempt == 1:
            os._exit(137)
        effect.succeeded(message_id)


@app.task("checkpointed")
def checkpointed(ctx: JobContext) -> None:
    """Three steps; dies after committing step 2 on the first attempt, resumes from it after."""
    log_path = Path(ctx.payload["log"])
    steps = ["reserve", "charge", "ship"]
    start = steps.index(ctx.checkpoint_step) + 1 if ctx.checkpoint_step else 0
    for step in steps[start:]:
        with log_path.open("a") as fh:
            fh.write(f"{ctx.attempt}:{step}\n")
        ctx.checkpoint(step, {"done": step})
        if step == "charge" and ctx.attempt == 1:
            os._exit(137)


@app.task("traced_flaky")
def traced_flaky(ctx: JobContext) -> None:
    """Fails its first attempt, then performs one guarded effect (the traces' end-to-end test)."""
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails on purpose")
    with ctx.effect(f"traced:{ctx.job_id}:effect") as eff:
        if not eff.already_succeeded:
            eff.succeeded("ref-1")
