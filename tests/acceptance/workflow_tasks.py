"""The tasks of the workflow acceptance test (tests/acceptance/test_workflows_workers.py).

``start`` does nothing; each ``mid`` sleeps ``seconds`` (wall time: it also passes while its
process is stopped), stores ``{"n": n}`` as its output, then appends ``mid job_id attempt
token`` to this process's file in ``$WORKFLOW_RUNS`` as its last act; ``join`` appends ``join
job_id sum`` (the sum of its deps' ``n``) and adds the step ``final`` after itself; ``final``
appends ``final job_id``.
"""

from __future__ import annotations

import time

from run_files import RunFile
from tenure import App, JobContext

app = App("workflow-workers")

_record = RunFile("WORKFLOW_RUNS").write


@app.task("start")
def start(ctx: JobContext) -> None:
    pass


@app.task("mid")
def mid(ctx: JobContext) -> None:
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.02)
    ctx.output({"n": int(ctx.payload["n"])})
    _record(f"mid {ctx.job_id} {ctx.attempt} {ctx.lock_token}\n")


@app.task("join")
def join(ctx: JobContext) -> None:
    outputs = ctx.dep_outputs
    total = sum(int(out["n"]) for out in outputs.values())
    workflow = ctx.workflow
    assert workflow is not None
    workflow.add("final", deps=[ctx.step])
    _record(f"join {ctx.job_id} {total} {len(outputs)}\n")


@app.task("final")
def final(ctx: JobContext) -> None:
    _record(f"final {ctx.job_id}\n")
