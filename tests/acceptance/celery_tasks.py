"""A Celery app on `tenure sqs` through Kombu's SQS transport, for tests/acceptance/test_sqs_celery.py.

The broker URL comes from ``$TENURE_CELERY_BROKER`` (the worker subprocesses; the test process
sets ``app.conf.broker_url`` itself). Every execution appends one ``TASK_ID HOSTNAME EVENT
UNIX_TIME`` line to ``$TENURE_CELERY_RECORD`` (O_APPEND: whole lines from concurrent workers), so
that the test sees each task's executions: lost, duplicated, run again by whom.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

REGION = "us-east-1"
VISIBILITY_TIMEOUT = 60
"""The transport option: the VisibilityTimeout of the queues Kombu creates (the lease per receive)."""
SLOW_QUEUE = "slow"
"""Created by the test with a short VisibilityTimeout before the workers start (Kombu then finds
it and does not create it), so a task of a killed worker is received again within seconds."""
SLOW_FIRST_RUN_SECONDS = 120.0
RECORD_SECONDS = 0.03
"""The work of one ``record`` task: it bounds the flow (4 threads a worker), so that a restart
of `tenure sqs` lands in the middle of 1,000 tasks on a fast machine too."""

app = Celery("celery_tasks", broker=os.environ.get("TENURE_CELERY_BROKER", "sqs://"))
app.conf.update(
    broker_transport_options={
        "region": REGION,
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "wait_time_seconds": 10,
        # The pause after an empty receive, and also while the worker's prefetch is full: Kombu's
        # default 1 s caps a worker at its prefetch count (here 16) of tasks per second.
        "polling_interval": 0.1,
    },
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
)


def _record(task_id: str | None, hostname: str | None, event: str) -> None:
    fd = os.open(os.environ["TENURE_CELERY_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id} {hostname} {event} {time.time():.3f}\n".encode())
    finally:
        os.close(fd)


@app.task(bind=True, name="record")
def record(self: Any, n: int) -> int:
    time.sleep(RECORD_SECONDS)
    _record(self.request.id, self.request.hostname, "done")
    return n


@app.task(bind=True, name="slow")
def slow(self: Any) -> None:
    """Long on its first run (the test kills the worker running it), instant when run again."""
    path = Path(os.environ["TENURE_CELERY_RECORD"])
    first = f"{self.request.id} " not in (path.read_text() if path.exists() else "")
    _record(self.request.id, self.request.hostname, "start")
    if first:
        time.sleep(SLOW_FIRST_RUN_SECONDS)
    _record(self.request.id, self.request.hostname, "done")
