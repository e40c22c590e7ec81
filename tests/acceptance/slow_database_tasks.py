"""The task of the slow-database acceptance test (tests/acceptance/test_slow_database.py).

``recorded`` sleeps ``ms`` milliseconds, then appends ``job_id attempt token`` to this process's
file in ``$SLOW_DATABASE_RUNS`` as its last act before returning: one line per handler that
returned, so the test counts how often each job's handler ran to completion (a job re-run after
it succeeded shows up twice). One file per process, one line per write, flushed at once.
"""

from __future__ import annotations

import time

from run_files import RunFile
from tenure import App, JobContext

app = App("slow-database")

_record = RunFile("SLOW_DATABASE_RUNS").write


@app.task("recorded")
def recorded(ctx: JobContext) -> None:
    time.sleep(float(ctx.payload.get("ms", 0)) / 1000.0)
    _record(f"{ctx.job_id} {ctx.attempt} {ctx.lock_token}\n")
