"""Structured JSON logs carry the trace fields of one attempt."""

from __future__ import annotations

import json
import logging
import uuid

from tenure.observability.logs import JsonFormatter


def test_json_log_carries_job_attempt_token_and_worker() -> None:
    token = uuid.uuid4()
    record = logging.LogRecord("tenure.worker", logging.WARNING, __file__, 1, "lease lost (%s)", ("x",), None)
    record.__dict__.update(job_id=7, attempt=2, lock_token=token, worker_id="w-1", queue="q", task="t")
    out = json.loads(JsonFormatter().format(record))
    assert out["msg"] == "lease lost (x)" and out["level"] == "warning"
    assert (out["job_id"], out["attempt"], out["lock_token"], out["worker_id"]) == (7, 2, str(token), "w-1")
    assert "fence" not in out
