"""Opt-in structured JSON logs: one object per line with job id, attempt, lock token and worker id,
and ``trace_id``/``span_id`` of the current span when traces are on (inside an attempt: its span)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from tenure.core import tracing

TRACE_FIELDS = ("job_id", "attempt", "lock_token", "fence", "worker_id", "queue", "task",
                "error_code", "event", "correlation_id")


class JsonFormatter(logging.Formatter):
    """Formats records as JSON, carrying the trace fields passed via ``extra=``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in TRACE_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                out[key] = str(value) if key == "lock_token" else value
        ids = tracing.current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(json_logs: bool, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
