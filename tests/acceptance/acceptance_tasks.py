"""Tasks run by subprocess workers in the acceptance tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tenure import App, JobContext

app = App("acceptance")


@app.task("sleepy")
def sleepy(ctx: JobContext) -> None:
    """Sleeps ``seconds`` (wall time passes even while the process is stopped), then records
    whether its lease was lost, waiting briefly for the heartbeat's verdict if asked to."""
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.05)
    if ctx.payload.get("wait_for_lost"):
        ctx.lease_lost.wait(float(ctx.payload["wait_for_lost"]))
    out = Path(ctx.payload["marker_dir"]) / f"{ctx.job_id}-{ctx.attempt}-{ctx.lock_token}.json"
    out.write_text(json.dumps({"lease_lost": ctx.lease_lost.is_set(), "reason": ctx.lease_lost_reason,
                               "worker": ctx.worker_id, "fence": ctx.fencing_token}))


@app.task("noop")
def noop(ctx: JobContext) -> None:
    return None
