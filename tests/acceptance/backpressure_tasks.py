"""The task of the back-pressure acceptance test (tests/acceptance/test_flow_backpressure_cli.py).

``call_api`` stands for a handler whose API answers 429 once: on its first run for a job (no
marker file in ``$BACKPRESSURE_RUNS`` yet) it calls ``ctx.rate_limited`` with the payload's
``retry_after`` and ``limit``; on the next run it records ``job_id attempt`` and returns. A
payload with ``"plain": true`` never hits the 429.
"""

from __future__ import annotations

import os
from pathlib import Path

from tenure import App, JobContext

app = App("backpressure")


@app.task("call_api")
def call_api(ctx: JobContext) -> None:
    runs = Path(os.environ["BACKPRESSURE_RUNS"])
    marker = runs / f"429-{ctx.job_id}"
    if not ctx.payload.get("plain") and not marker.exists():
        marker.write_text(str(ctx.attempt))
        ctx.rate_limited(retry_after=float(ctx.payload["retry_after"]), limit=ctx.payload.get("limit"))
    with open(runs / f"done-{ctx.job_id}", "w", encoding="utf-8") as out:
        out.write(f"{ctx.job_id} {ctx.attempt}\n")
