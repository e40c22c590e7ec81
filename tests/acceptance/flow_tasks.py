"""The task of the flow-limits acceptance test (tests/acceptance/test_flow_limits_cli.py).

``keyed_sleep`` sleeps ``seconds`` (wall time: it also passes while its process is stopped), then
appends ``job_id attempt token`` to this process's file in ``$FLOW_RUNS`` as its last act before
returning, so the test can count the handlers that ran to the end, the frozen worker's included.
"""

from __future__ import annotations

import time

from run_files import RunFile
from tenure import App, JobContext

app = App("flow-limits")

_record = RunFile("FLOW_RUNS").write


@app.task("keyed_sleep")
def keyed_sleep(ctx: JobContext) -> None:
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.02)
    _record(f"{ctx.job_id} {ctx.attempt} {ctx.lock_token}\n")
