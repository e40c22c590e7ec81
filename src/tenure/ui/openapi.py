"""The OpenAPI 3.1 document of the JSON API (``{prefix}/api/v1/openapi.json``); a unit test
checks that it lists exactly the routes the app serves."""

from __future__ import annotations

from typing import Any

from tenure.core.version import __version__
from tenure.ui.filters import FIELDS

_ERROR = {"description": "one JSON message", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_FILTER_DOC = {
    "id": "job id", "queue": "queue name", "status": "pending, running, completed, failed or cancelled",
    "task": "task name", "priority_min": "lowest priority (-100..100)", "priority_max": "highest priority",
    "created_since": "ISO-8601 time, or a duration back from now: 90s, 15m, 2h, 7d",
    "finished_since": "the same, for the time a job completed, failed or was cancelled",
    "idempotency_key": "exact key", "payload": 'JSON object the payload contains, e.g. {"invoice_id": 42}',
    "flow_key": "exact flow key, 1 to 200 bytes (docs/flow.md)",
}


def _filter_params() -> list[dict[str, Any]]:
    return [{"name": f, "in": "query", "required": False, "description": _FILTER_DOC[f],
             "schema": {"type": "integer" if f in ("id", "priority_min", "priority_max") else "string"}} for f in FIELDS]


def _series_params() -> list[dict[str, Any]]:
    return [{"name": "queue", "in": "query", "required": False, "schema": {"type": "string"},
             "description": "one queue (400 if it has no trace); left out: every queue"},
            {"name": "window", "in": "query", "required": False,
             "schema": {"type": "string", "enum": ["1h", "24h", "7d"], "default": "1h"}}]


def _op(summary: str, *, mutates: bool = False, params: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None, ok: str = "the result") -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "parameters": params or [],
                          "responses": {"200": {"description": ok, "content": {"application/json": {}}},
                                        "400": _ERROR, "401": _ERROR, "403": _ERROR}}
    if mutates:
        op["description"] = ("Mutating: 403 for a viewer or under --read-only; JSON or no body (never a form); a browser "
                             "request must be same-origin and carry X-CSRF-Token (from GET session).")
        op["requestBody"] = {"required": body is not None,
                             "content": {"application/json": {"schema": body or {"type": "object"}}}}
    return op


def _path(name: str, where: str = "path") -> dict[str, Any]:
    return {"name": name, "in": where, "required": True, "schema": {"type": "string"}}


def _flow_paths() -> dict[str, Any]:
    """The Flow page's endpoints (:mod:`tenure.ui.flow_api`, docs/flow.md)."""
    def body(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "required": required, "properties": props, "additionalProperties": False}
    return {
        "/flow": {"get": _op("per queue with flow settings its per-key running limit and busiest keys (running, limit, "
                             "weight, ready, blocked, oldest wait); every rate limit (per second, burst, per key, "
                             "buckets, tokens now, paused until); the latest changes",
                             params=[{"name": "keys", "in": "query", "required": False, "description": "keys per queue",
                                      "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}}])},
        "/flow/queues/{name}/per-key-running": {"post": _op(
            "cap the running jobs of every flow key of a queue (0: no cap); audited in flow_changes", mutates=True,
            params=[_path("name")], body=body(["per_key_running"], per_key_running={"type": "integer", "minimum": 0}))},
        "/flow/queues/{name}/key": {"post": _op(
            "one key's own running limit (0 removes it) and/or weight (1 is the default); audited in flow_changes",
            mutates=True, params=[_path("name")],
            body=body(["key"], key={"type": "string"}, running={"type": "integer", "minimum": 0},
                      weight={"type": "number", "exclusiveMinimum": 0, "maximum": 1000}))},
        "/flow/rate-limits/{name}": {"post": _op(
            "create or change a rate limit (a token bucket; burst left out: per_second rounded up); audited",
            mutates=True, params=[_path("name")],
            body=body(["per_second"], per_second={"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
                      burst={"type": "integer", "minimum": 1, "maximum": 1_000_000}, per_key={"type": "boolean"}))},
        "/flow/rate-limits/{name}/delete": {"post": _op("delete a rate limit (404 if there is none); audited",
                                                        mutates=True, params=[_path("name")])},
    }


def document(prefix: str) -> dict[str, Any]:
    filter_schema = {"type": "object", "properties": {f: {"type": "string"} for f in FIELDS},
                     "additionalProperties": False}
    paging = [{"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "next_cursor of the previous page"},
              {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}}]
    paths = {
        "/session": {"get": _op("who is signed in, their role, and the CSRF token for browser mutations")},
        "/queues": {"get": _op("every queue: counts by status, paused, running limit, oldest ready job, last hour")},
        "/series": {"get": _op("the points behind the charts: one per bucket (1h: 1 min, 24h: 15 min, 7d: 1 h) of jobs "
                               "completed, failed attempts, dead letters, wait p50/p95 and depth; "
                               "the completed points add up to every job completed in [from, to)", params=_series_params())},
        "/charts": {"get": _op("the four charts (throughput, failures, wait, depth) as SVG text, with the series' window "
                               "and totals", params=_series_params())},
        "/queues/{name}/pause": {"post": _op("pause a queue (workers stop claiming from it)", mutates=True,
                                             params=[_path("name")])},
        "/queues/{name}/resume": {"post": _op("resume a paused queue", mutates=True, params=[_path("name")])},
        "/queues/{name}/limit": {"post": _op("cap the jobs running in a queue across all workers (0: no cap)",
                                             mutates=True, params=[_path("name")],
                                             body={"type": "object", "required": ["max_running"],
                                                   "properties": {"max_running": {"type": "integer", "minimum": 0}}})},
        "/jobs": {"get": _op("one page of jobs, newest first: {jobs: [...], next_cursor}", params=_filter_params() + paging)},
        "/jobs/count": {"get": _op("how many jobs match: {count, estimated}; estimated above 10,000 or when slow",
                                   params=_filter_params())},
        "/jobs/{id}": {"get": _op("one job: the same document as `tenure jobs show ID --json`", params=[_path("id")])},
        "/jobs/{id}/cancel": {"post": _op("cancel a pending or running job", mutates=True, params=[_path("id")])},
        "/jobs/{id}/retry": {"post": _op("retry a failed or cancelled job", mutates=True, params=[_path("id")])},
        "/jobs/bulk": {"post": _op("retry or cancel every job matching a filter (or the given ids): {matched, changed}",
                                   mutates=True, body={"type": "object", "required": ["action"], "properties": {
                                       "action": {"enum": ["retry", "cancel"]}, "filter": filter_schema,
                                       "ids": {"type": "array", "items": {"type": "integer"}},
                                       "dry_run": {"type": "boolean"},
                                       "expected": {"type": "integer", "description": "the previewed count: 409 if the set changed"},
                                       "newest_id": {"type": "integer", "description": "the preview's newest_id: later jobs stay out"}}})},
        "/dlq/replay": {"post": _op("replay dead-lettered jobs matching a filter (or ids), rate limited",
                                    mutates=True, body={"type": "object", "properties": {
                                        "filter": filter_schema, "ids": {"type": "array", "items": {"type": "integer"}},
                                        "dry_run": {"type": "boolean"}, "rate": {"type": "number", "default": 50}}})},
        **_flow_paths(),
        "/periodic": {"get": _op("periodic schedules: cron, timezone, last and next slot, skipped slots")},
        "/workers": {"get": _op("workers from the registry: heartbeat age, held jobs")},
        "/workflows": {"get": _op("one page of workflows, newest first: {workflows: [{id, name, steps, by_status, "
                                  "finished, ...}], next_cursor}", params=paging)},
        "/workflows/{id}": {"get": _op("one workflow: header, by_status, steps (status, deps, output...) and graph, "
                                       "the DAG as SVG text; 404 for an unknown id", params=[_path("id")])},
        "/events": {"get": {"summary": "server-sent events: `change` with new_jobs [first, last] and changed_jobs ids",
                            "responses": {"200": {"description": "text/event-stream",
                                                  "content": {"text/event-stream": {}}}}}},
    }
    return {"openapi": "3.1.0",
            "info": {"title": "tenure ui API", "version": __version__,
                     "description": "The JSON API the job browser itself uses (docs/ui.md)."},
            "servers": [{"url": f"{prefix}/api/v1"}], "paths": paths,
            "components": {"schemas": {"Error": {"type": "object", "required": ["error"],
                                                 "properties": {"error": {"type": "string"}}}},
                           "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}}}
