"""The Celery app of the kind suite's rolling restart of tenure-sqs (e2e/kind/test_kind.py).

Kombu's SQS transport to ``$SQS_ENDPOINT`` (the tenure-sqs Service) with a key of the chart's
credentials Secret; queue names get the prefix ``kind-`` (the key's glob is ``kind-*``), so the
default queue ``$CELERY_QUEUE`` is ``kind-$CELERY_QUEUE`` on the server. ``acks_late``: each message
is deleted after its task returned. The test sends the tasks from its own process with this app
(``send_task``); the worker pod runs ``celery -A roll_tasks worker``. Each run of ``roll.record``
takes ``$CELERY_PACE`` seconds and writes ``done TASK_ID N UNIX_TIME`` straight to the container's
stdout (fd 1, past Celery's redirection of ``sys.stdout``), which the test reads from the pod's log.
"""

from __future__ import annotations

import os
import time
from urllib.parse import quote, urlsplit

from celery import Celery

_endpoint = urlsplit(os.environ.get("SQS_ENDPOINT", "http://127.0.0.1:9324"))
BROKER = (f"sqs://{os.environ.get('SQS_KEY', '')}:{quote(os.environ.get('SQS_SECRET', ''), safe='')}"
          f"@{_endpoint.netloc}")
PACE = float(os.environ.get("CELERY_PACE", "0.2"))

app = Celery("roll_tasks", broker=BROKER)
app.conf.update(
    broker_transport_options={
        "region": os.environ.get("SQS_REGION", "us-east-1"),
        "visibility_timeout": 120,
        "wait_time_seconds": 10,
        "polling_interval": 0.1,
        "queue_name_prefix": "kind-",
    },
    broker_connection_retry_on_startup=True,
    task_default_queue=os.environ.get("CELERY_QUEUE", "celery"),
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
)


@app.task(bind=True, name="roll.record")
def record(self: object, n: int) -> int:
    time.sleep(PACE)
    os.write(1, f"done {self.request.id} {n} {time.time():.3f}\n".encode())  # type: ignore[attr-defined]
    return n
