"""The task of the flow-limits acceptance test (tests/acceptance/test_flow_limits_cli.py).

``keyed_sleep`` sleeps ``seconds`` (wall time: it also passes while its process is stopped), then
appends ``job_id attempt token`` to this process's file in ``$FLOW_RUNS`` as its last act before
returning, so the test can count the handlers that ran to the end, the frozen worker's included.
"""

from __future__ import annotations

import os
import threading
import time
from typing import IO

from tenure import App, JobContext

app = App("flow-limits")

_lock = threading.Lock()
_out: IO[str] | None = None


def _record(line: str) -> None:
    global _out
    with _lock:
        if _out is None:
            _out = open(os.path.join(os.environ["FLOW_RUNS"], f"runs-{os.getpid()}.txt"), "a", encoding="utf-8")
        _out.write(line)
        _out.flush()


@app.task("keyed_sleep")
def keyed_sleep(ctx: JobContext) -> None:
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.02)
    _record(f"{ctx.job_id} {ctx.attempt} {ctx.lock_token}\n")
