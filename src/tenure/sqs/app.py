"""The ASGI app of `tenure sqs`: one endpoint, ``POST /`` (and the queue URLs' paths), speaking
AWS JSON 1.0 (``X-Amz-Target: AmazonSQS.<Action>``) or the query protocol (form-encoded
``Action=...``, XML replies). Every refusal is an SQS error shape; an unexpected failure is
logged and answered ``InternalFailure`` (500), never with a traceback."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenure.sqs import messages, moves, queries_protocol, queues
from tenure.sqs.auth import verify
from tenure.sqs.errors import SqsError
from tenure.sqs.service import Call, SqsService

log = logging.getLogger("tenure.sqs")
JSON_TYPE = "application/x-amz-json-1.0"
BODY_MAX = 2 * 1024 * 1024
Action = Callable[[Call, dict[str, Any]], dict[str, Any]]

ACTIONS: dict[str, Action] = {
    "CreateQueue": queues.create_queue, "GetQueueUrl": queues.get_queue_url, "ListQueues": queues.list_queues,
    "DeleteQueue": queues.delete_queue, "PurgeQueue": queues.purge_queue,
    "GetQueueAttributes": queues.get_queue_attributes, "SetQueueAttributes": queues.set_queue_attributes,
    "TagQueue": queues.tag_queue, "UntagQueue": queues.untag_queue, "ListQueueTags": queues.list_queue_tags,
    "ListDeadLetterSourceQueues": queues.list_dead_letter_source_queues,
    "SendMessage": messages.send_message, "SendMessageBatch": messages.send_message_batch,
    "DeleteMessage": messages.delete_message, "DeleteMessageBatch": messages.delete_message_batch,
    "ChangeMessageVisibility": messages.change_message_visibility,
    "ChangeMessageVisibilityBatch": messages.change_message_visibility_batch,
    "StartMessageMoveTask": moves.start_message_move_task, "ListMessageMoveTasks": moves.list_message_move_tasks,
    "CancelMessageMoveTask": moves.cancel_message_move_task,
}
UNSUPPORTED = frozenset({"AddPermission", "RemovePermission"})


async def receive_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Claim until a message arrives or WaitTimeSeconds pass, waking on the queue's NOTIFY (and
    re-checking every ``long_poll_recheck`` seconds for delays and visibility timeouts that end)."""
    req, found = await run_in_threadpool(messages.receive_first, call, params)
    deadline = time.monotonic() + req.wait
    while True:
        left = deadline - time.monotonic()
        if found or left <= 0:
            return {"Messages": found} if found else {}
        await call.service.wakeups.wait(req.queue["name"], min(left, call.config.long_poll_recheck))
        found = await run_in_threadpool(messages.receive_once, call, req)


def _error_response(exc: SqsError, request_id: str, *, json_protocol: bool) -> Response:
    headers = {"x-amzn-RequestId": request_id}
    if json_protocol:
        headers["x-amzn-query-error"] = f"{exc.code};{exc.fault}"
        body = json.dumps({"__type": f"com.amazonaws.sqs#{exc.shape}", "message": exc.message})
        return Response(body, status_code=exc.status, media_type=JSON_TYPE, headers=headers)
    return Response(queries_protocol.error_xml(exc, request_id), status_code=exc.status, media_type="text/xml",
                    headers=headers)


def _authenticate(call: Call, request: Request, body: bytes) -> None:
    creds = call.config.credentials
    if creds is None:
        return
    call.credential = verify(creds, method=request.method, path=request.scope.get("raw_path", b"/").decode(),
                             query=request.scope.get("query_string", b"").decode(),
                             headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]],
                             body=body, region=call.config.region)


async def _dispatch(call: Call, action: str, params: dict[str, Any]) -> dict[str, Any]:
    if action == "ReceiveMessage":
        return await receive_message(call, params)
    handler = ACTIONS.get(action)
    if handler is None:
        if action in UNSUPPORTED:
            raise SqsError("UnsupportedOperation", f"{action} is not supported by tenure sqs.")
        raise SqsError("UnknownOperationException", f"The action {action} is not valid for this endpoint.")
    return await run_in_threadpool(handler, call, params)


def _base_url(request: Request) -> str:
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return f"{request.url.scheme}://{host}"


def _path_queue(request: Request) -> str | None:
    parts = [s for s in request.url.path.split("/") if s]
    return parts[-1] if len(parts) >= 2 else None


async def endpoint(request: Request) -> Response:
    service: SqsService = request.app.state.service
    request_id = str(uuid.uuid4())
    target = request.headers.get("x-amz-target", "")
    json_protocol = target.startswith("AmazonSQS.")
    started = time.monotonic()
    action = target.removeprefix("AmazonSQS.") if json_protocol else "unknown"
    try:
        body = await request.body()
        if len(body) > BODY_MAX:
            raise SqsError("InvalidParameterValue", "The request is too large.", status=413)
        call = Call(service, _base_url(request), None, _path_queue(request))
        _authenticate(call, request, body)
        if json_protocol:
            params = _json_params(body)
        else:
            form = queries_protocol.form_of(body, request.scope.get("query_string", b""))
            action = form.get("Action", "")
            if not action:
                raise SqsError("MissingAction", "The request must contain the parameter Action.")
            params = queries_protocol.params_of(action, form)
        result = await _dispatch(call, action, params)
    except SqsError as exc:
        log.debug("sqs %s refused: %s %s", action, exc.shape, exc.message)
        service.metrics.observe(action, exc.shape, time.monotonic() - started)
        return _error_response(exc, request_id, json_protocol=json_protocol)
    except Exception:  # one line to the client, the traceback to the log
        log.exception("sqs %s failed", action)
        service.metrics.observe(action, "InternalFailure", time.monotonic() - started)
        return _error_response(SqsError("InternalFailure", "The request processing has failed."), request_id,
                               json_protocol=json_protocol)
    service.metrics.observe(action, "ok", time.monotonic() - started)
    headers = {"x-amzn-RequestId": request_id}
    if json_protocol:
        return Response(json.dumps(result), media_type=JSON_TYPE, headers=headers)
    return Response(queries_protocol.result_xml(action, result, request_id), media_type="text/xml", headers=headers)


def _json_params(body: bytes) -> dict[str, Any]:
    try:
        params = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return params


async def health(request: Request) -> Response:
    return Response("ok\n", media_type="text/plain")


async def metrics(request: Request) -> Response:
    service: SqsService = request.app.state.service
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def build_app(service: SqsService) -> Starlette:
    """The app; its lifespan opens the service (pool, key, LISTEN) and closes it."""
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not service.key:
            await run_in_threadpool(service.open)
        service.wakeups.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            await run_in_threadpool(service.close)

    app = Starlette(routes=[Route("/healthz", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"]),
                            Route("/{path:path}", endpoint, methods=["GET", "POST"])], lifespan=lifespan)
    app.state.service = service
    return app
