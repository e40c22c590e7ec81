"""The JSON API of `tenure ui` under ``{prefix}/api/v1/`` (docs/ui.md; OpenAPI in
:mod:`tenure.ui.openapi`). Each handler is a plain function of one :class:`Call`, run in a
worker thread; it reads through the repository and changes through :mod:`tenure.control`,
the same code as the CLI, audited as ``ui:USER``.

Refusals raise :class:`ApiError` (or FilterError / ConfigError, answered 400); the app turns
them into one JSON message ``{"error": "..."}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from tenure import control
from tenure.core.errors import ConfigError
from tenure.core.redaction import Redaction
from tenure.core.repository import JobFilter
from tenure.job_document import job_document
from tenure.ui import charts as chart_svg
from tenure.ui import dag
from tenure.ui import series as chart_series
from tenure.ui.auth import Identity
from tenure.ui.config import PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, REPLAY_RATE_DEFAULT, REPLAY_RATE_MAX
from tenure.ui.filters import FilterError, parse_cursor, parse_filter, parse_limit
from tenure.ui.service import UiService


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Call:
    """One API request: the service, who asks, the query string, the JSON body, path parameters."""

    service: UiService
    identity: Identity
    query: Mapping[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    path: Mapping[str, str] = field(default_factory=dict)

    @property
    def who(self) -> str:
        return f"ui:{self.identity.user}"

    @property
    def schema(self) -> str:
        return self.service.config.schema


def session(call: Call) -> dict[str, Any]:
    return {"user": call.identity.user, "role": call.identity.role, "read_only": not call.identity.can_write,
            "csrf_token": call.service.auth.csrf_token(call.identity)}


def queues(call: Call) -> dict[str, Any]:
    """Per queue: counts by status, pause and limit, oldest ready job, the last hour's figures."""
    with call.service.repo() as repo:
        stats = {s.queue: s for s in repo.queue_stats()}
        controls = {r["queue"]: r for r in repo.queue_control_list()}
        hour = repo.queue_throughput_hour()
    out = []
    for name in sorted(stats.keys() | controls.keys() | hour.keys()):
        s, c, h = stats.get(name), controls.get(name, {}), hour.get(name, {})
        completed, failed = int(h.get("completed", 0)), int(h.get("failed_attempts", 0))
        out.append({
            "name": name, "paused": bool(s.paused if s else c.get("paused", False)),
            "max_running": s.max_running if s else c.get("max_running"),
            "counts": {"ready": s.ready if s else 0, "blocked": s.blocked if s else 0,
                       "scheduled": s.scheduled if s else 0,
                       "running": s.running if s else 0, "completed": s.completed if s else 0,
                       "failed": s.failed if s else 0, "cancelled": s.cancelled if s else 0},
            "running_expired": s.running_expired if s else 0,
            "oldest_ready_age_seconds": float(h.get("oldest_ready_age_seconds") or 0.0),
            "last_hour": {"completed": completed, "failed_attempts": failed,
                          "dead_lettered": int(h.get("dead_lettered", 0)),
                          "failure_rate": round(failed / (completed + failed), 4) if completed + failed else 0.0},
        })
    return {"queues": out}


def series(call: Call) -> dict[str, Any]:
    """``?queue=Q&window=1h|24h|7d`` (queue optional: every queue): one point per bucket
    (1 minute, 15 minutes, 1 hour) of jobs completed, failed attempts, dead letters, wait
    p50/p95 and depth (:mod:`tenure.ui.series`)."""
    unknown = sorted(set(call.query) - {"queue", "window"})
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: queue, window)")
    try:
        window = chart_series.parse_window(call.query.get("window"))
        queue = chart_series.parse_queue(call.query.get("queue"))
        with call.service.repo() as repo:
            return chart_series.read(repo, window, queue)
    except chart_series.SeriesError as exc:
        raise ApiError(400, str(exc)) from None


def charts(call: Call) -> dict[str, Any]:
    """The same parameters as :func:`series`: its window and totals, and the four charts as SVG
    text (:mod:`tenure.ui.charts`), which the pages show."""
    doc = series(call)
    return {**{k: v for k, v in doc.items() if k != "points"},
            "charts": chart_svg.render_all(doc["points"], doc["bucket_seconds"])}


def queue_pause(call: Call) -> dict[str, Any]:
    return _queue_set(call, paused=True)


def queue_resume(call: Call) -> dict[str, Any]:
    return _queue_set(call, paused=False)


def _queue_set(call: Call, *, paused: bool) -> dict[str, Any]:
    name = call.path["name"]
    with call.service.connection() as conn:
        row = control.set_paused(conn, name, paused, schema=call.schema, requested_by=call.who)
    return {"queue": name, "paused": paused, "changed": row["was_paused"] != paused}


def queue_limit(call: Call) -> dict[str, Any]:
    value = call.body.get("max_running")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, 'body must be {"max_running": N} with N an integer >= 0 (0 removes the limit)')
    with call.service.connection() as conn:
        row = control.set_max_running(conn, call.path["name"], value, schema=call.schema, requested_by=call.who)
    return {"queue": call.path["name"], "max_running": row["max_running"]}


PAGING = ("cursor", "limit")


def jobs(call: Call) -> dict[str, Any]:
    """One page, newest first, and the cursor of the next (null on the last)."""
    flt = parse_filter(call.query, extra=PAGING)
    limit = parse_limit(call.query.get("limit"), PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX)
    cursor = parse_cursor(call.query.get("cursor"))
    with call.service.repo() as repo:
        rows = repo.job_browse(flt, before_id=cursor, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    redaction = Redaction()
    for r in rows:
        r["payload"] = redaction.payload(r.get("payload"))
    return {"jobs": rows, "next_cursor": str(rows[-1]["id"]) if more and rows else None}


def jobs_count(call: Call) -> dict[str, Any]:
    flt = parse_filter(call.query, extra=PAGING)
    with call.service.repo() as repo:
        counted = repo.job_count(flt)
    return asdict(counted)


def job(call: Call) -> dict[str, Any]:
    job_id = _job_id(call)
    with call.service.connection() as conn:
        document = job_document(conn, job_id, schema=call.schema)
    if document is None:
        raise ApiError(404, f"no job {job_id}")
    if document["job"].get("workflow_id") is not None:
        with call.service.repo() as repo:
            document["workflow"] = repo.workflow_step_get(job_id)
    return document


def job_cancel(call: Call) -> dict[str, Any]:
    job_id = _job_id(call)
    with call.service.connection() as conn:
        report = control.cancel(conn, [job_id], schema=call.schema, requested_by=call.who, strict=True)
    return {"id": job_id, "cancelled": True, "was": "running" if report.revoked else "pending"}


def job_retry(call: Call) -> dict[str, Any]:
    job_id = _job_id(call)
    with call.service.connection() as conn:
        control.retry(conn, [job_id], schema=call.schema, requested_by=call.who)
    return {"id": job_id, "retried": True}


def jobs_bulk(call: Call) -> dict[str, Any]:
    """``{"action": "retry"|"cancel", "filter": {...}}`` or ``{"action", "ids": [...]}``, with
    ``dry_run``, and ``expected`` + ``newest_id`` from the preview to act on exactly that set."""
    action = call.body.get("action")
    if action not in control.BULK_ACTIONS:
        raise ApiError(400, 'action must be "retry" or "cancel"')
    flt, ids = _target(call.body)
    dry_run = _bool(call.body, "dry_run")
    expected, newest = _opt_int(call.body, "expected"), _opt_int(call.body, "newest_id")
    with call.service.connection() as conn:
        report = control.bulk_matching(conn, action, flt, schema=call.schema, requested_by=call.who, dry_run=dry_run,
                                       expected=expected, newest_id=newest, ids=ids)
    if report.skipped and not report.changed:
        raise ApiError(409, control.held_message(report.skipped, "retried"))
    return {"matched": report.matched, "changed": report.changed, "newest_id": report.newest_id, "dry_run": dry_run,
            "skipped": [{"id": i, "why": why} for i, why in sorted(report.skipped.items())[:1000]]}


def dlq_replay(call: Call) -> dict[str, Any]:
    """``{"filter": {...}, "dry_run": bool, "rate": R}`` (or ``"ids"``): replay dead letters."""
    flt, ids = _target(call.body)
    rate = call.body.get("rate", REPLAY_RATE_DEFAULT)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= REPLAY_RATE_MAX:
        raise ApiError(400, f"rate must be a number of jobs per second, above 0 and at most {REPLAY_RATE_MAX:g}")
    dry_run = _bool(call.body, "dry_run")
    with call.service.connection() as conn:
        report = control.replay_matching(conn, flt, schema=call.schema, rate=float(rate), dry_run=dry_run,
                                         requested_by=call.who, ids=ids)
    if control.held_only(report) and not dry_run:
        raise ApiError(409, control.held_message(dict(report.skipped), "replayed"))
    return {"matched": report.matched, "replayed": len(report.replayed), "replayed_ids": report.replayed[:1000],
            "skipped": [{"id": i, "why": why} for i, why in report.skipped[:1000]], "dry_run": dry_run}


def periodic(call: Call) -> dict[str, Any]:
    """Each schedule with its next slot (its cron in its timezone, after the last slot) and the
    slots it skipped."""
    with call.service.repo() as repo:
        rows = repo.periodic_list()
    for r in rows:
        r["next_slot"] = next_slot(r["cron"], r["timezone"], r["last_slot"])
    return {"schedules": rows}


def next_slot(cron: str, zone: str, last: datetime) -> datetime | None:
    try:
        return croniter(cron, last.astimezone(ZoneInfo(zone))).get_next(datetime)
    except (ValueError, KeyError, ZoneInfoNotFoundError):
        return None


def workers(call: Call) -> dict[str, Any]:
    """Live and recently stopped workers, with heartbeat age, abandoned handler threads (as of
    their last heartbeat) and the jobs each holds."""
    with call.service.repo() as repo:
        rows = repo.worker_list()
        running = repo.running_jobs(limit=10_000)
    held: dict[str, list[dict[str, Any]]] = {}
    for j in running:
        held.setdefault(str(j["locked_by"]), []).append(
            {"id": j["id"], "queue": j["queue_name"], "task": j["task"], "attempt": j["attempt_count"],
             "lease_remaining_seconds": j["lease_remaining_seconds"]})
    for w in rows:
        w["held_jobs"] = held.get(str(w["id"]), [])
    return {"workers": rows}


WORKFLOW_STEPS_SHOWN = 500
"""Steps a workflow's document lists (with their outputs) at most; its counts and graph cover all."""

def workflows(call: Call) -> dict[str, Any]:
    """Workflows newest first (``?limit=&cursor=``), each with its steps counted by status."""
    unknown = sorted(set(call.query) - set(PAGING))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: cursor, limit)")
    limit = parse_limit(call.query.get("limit"), PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX)
    cursor = parse_cursor(call.query.get("cursor"))
    with call.service.repo() as repo:
        rows = repo.workflow_list(limit=limit + 1, before_id=cursor)
    more = len(rows) > limit
    rows = rows[:limit]
    return {"workflows": rows, "next_cursor": str(rows[-1]["id"]) if more and rows else None}


def workflow(call: Call) -> dict[str, Any]:
    """One workflow: its header, ``by_status`` and ``steps_total`` over all its steps, its first
    :data:`WORKFLOW_STEPS_SHOWN` steps (status, deps, output...) and ``graph``, the whole DAG as
    SVG text (:mod:`tenure.ui.dag`, which caps wide layers), which the workflow page shows."""
    workflow_id = _id(call, "workflow")
    with call.service.repo() as repo:
        shown = repo.workflow_show(workflow_id, outputs=WORKFLOW_STEPS_SHOWN)
    if shown is None:
        raise ApiError(404, f"no workflow {workflow_id}")
    steps = shown["steps"]
    by_status: dict[str, int] = {}
    for step in steps:
        by_status[step["status"]] = by_status.get(step["status"], 0) + 1
    return {**shown, "steps": steps[:WORKFLOW_STEPS_SHOWN], "steps_total": len(steps), "by_status": by_status,
            "graph": dag.render(dag.steps_of(steps))}


def _job_id(call: Call) -> int:
    return _id(call, "job")


def _id(call: Call, what: str) -> int:
    text = call.path.get("id", "")
    if not text.isdigit() or not 0 < int(text) < 2**63:
        raise ApiError(400, f"invalid {what} id {text!r}")
    return int(text)


def _target(body: dict[str, Any]) -> tuple[JobFilter, list[int] | None]:
    if "ids" in body:
        ids = body["ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0
                                                           for i in ids) or len(ids) > control.BULK_BATCH:
            raise ApiError(400, f"ids must be a list of 1 to {control.BULK_BATCH} job ids")
        return JobFilter(), sorted(set(ids))
    raw = body.get("filter")
    if not isinstance(raw, dict):
        raise ApiError(400, 'give "filter": {...} (the job browser\'s filter, {} for every job) or "ids": [...]')
    return parse_filter(raw), None


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false")
    return value


def _opt_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ApiError(400, f"{name} must be an integer >= 0")
    return value


Handler = Callable[[Call], dict[str, Any]]
ROUTES: list[tuple[str, str, Handler, bool]] = [
    ("GET", "session", session, False),
    ("GET", "queues", queues, False),
    ("GET", "series", series, False),
    ("GET", "charts", charts, False),
    ("POST", "queues/{name}/pause", queue_pause, True),
    ("POST", "queues/{name}/resume", queue_resume, True),
    ("POST", "queues/{name}/limit", queue_limit, True),
    ("GET", "jobs", jobs, False),
    ("GET", "jobs/count", jobs_count, False),
    ("POST", "jobs/bulk", jobs_bulk, True),
    ("GET", "jobs/{id}", job, False),
    ("POST", "jobs/{id}/cancel", job_cancel, True),
    ("POST", "jobs/{id}/retry", job_retry, True),
    ("POST", "dlq/replay", dlq_replay, True),
    ("GET", "periodic", periodic, False),
    ("GET", "workers", workers, False),
    ("GET", "workflows", workflows, False),
    ("GET", "workflows/{id}", workflow, False),
]
"""(method, path under api/v1/, handler, mutates). ``GET events`` is the app's (a stream)."""


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


__all__ = ["ROUTES", "ApiError", "Call", "ConfigError", "FilterError", "parse_body"]
