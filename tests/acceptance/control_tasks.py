"""Tasks for the job-control acceptance tests (run by subprocess workers)."""

from __future__ import annotations

import asyncio
import time

from tenure import App, JobContext

app = App("control")


@app.task("hold")
def hold(ctx: JobContext) -> None:
    """Runs ``seconds`` unless told its lease is lost (cancel) first."""
    ctx.lease_lost.wait(float(ctx.payload.get("seconds", 0.2)))


@app.task("hang_async", timeout=1.0, max_attempts=1)
async def hang_async(ctx: JobContext) -> None:
    await asyncio.sleep(60)


@app.task("busy")
def busy(ctx: JobContext) -> None:
    time.sleep(float(ctx.payload.get("seconds", 0.05)))


periodic_app = App("periodic")


@periodic_app.periodic("* * * * * */2", name="tick", payload={"source": "cron"})
def tick(ctx: JobContext) -> None:
    return None
