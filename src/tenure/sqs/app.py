"""The ASGI app of `tenure sqs`: one endpoint, ``POST /`` (and the queue URLs' paths), speaking
AWS JSON 1.0 (``X-Amz-Target: AmazonSQS.<Action>``) or the query protocol (form-encoded
``Action=...``, XML replies). Every refusal is an SQS error shape; an unexpected failure is
logged and answered ``InternalFailure`` (500), never with a traceback.

The API requests take a raw ASGI path (:func:`endpoint`: the scope's headers as they come, one
response message) rather than Starlette's routing, middleware and Request objects: with the
service's own thread pool, a fifth less server CPU per request (``bench.experiments.sqs_server_cost``,
docs/sqs.md). Starlette serves the lifespan, ``/healthz`` and ``/metrics``. A method other
than GET and POST gets 405 with an SQS error body. On SIGTERM ``/healthz`` fails, and once the
server drains every long poll is answered with no messages (:mod:`tenure.core.shutdown`)."""

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
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tenure.sqs import messages, moves, queries_protocol, queues
from tenure.sqs.auth import verify
from tenure.sqs.errors import SqsError
from tenure.sqs.service import Call, SqsService

log = logging.getLogger("tenure.sqs")
JSON_TYPE = "application/x-amz-json-1.0"
BODY_MAX = 4 * 1024 * 1024
"""A request's body limit: a batch of 1 MiB of messages, escaped (JSON ``\\u`` escapes, form
percent-encoding: up to 3 bytes a byte), fits."""
Action = Callable[[Call, dict[str, Any]], dict[str, Any]]
Headers = list[tuple[bytes, bytes]]

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
    "AddPermission": queues.add_permission, "RemovePermission": queues.remove_permission,
}
UNSUPPORTED: frozenset[str] = frozenset()
"""Actions of the SQS API answered UnsupportedOperation (none today)."""


async def receive_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Claim until a message arrives or WaitTimeSeconds pass, waking on the queue's NOTIFY (and
    re-checking every ``long_poll_recheck`` seconds for delays and visibility timeouts that end).
    Once the server drains (SIGTERM), a long poll is answered at once with no messages, as SQS
    answers one whose wait ran out: the client polls again, through another replica. A long poll
    whose client has gone claims nothing more: a message it took would stay invisible, its
    receipt read by nobody, until its visibility timeout ended."""
    service = call.service
    since = service.wakeups.notified
    req, found = await service.run(messages.receive_first, call, params)
    if found or req.wait <= 0:
        return {"Messages": found} if found else {}
    deadline = time.monotonic() + req.wait
    # After the body, the next ASGI message of a request is its disconnect.
    gone = asyncio.ensure_future(call.receive()) if call.receive else None
    try:
        with service.wakeups.subscribe(req.queue["name"], since) as wakeups:
            while not found and not service.shutdown.draining:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await wakeups.wait(min(left, call.config.long_poll_recheck))
                if service.shutdown.draining or (gone is not None and gone.done()):
                    break
                found = await service.run(messages.receive_once, call, req)
    finally:
        if gone is not None and not gone.done():
            gone.cancel()
    return {"Messages": found} if found else {}


def _error_reply(exc: SqsError, request_id: str, *, json_protocol: bool) -> tuple[int, bytes, bytes, Headers]:
    if json_protocol:
        body = json.dumps({"__type": f"com.amazonaws.sqs#{exc.shape}", "message": exc.message}).encode()
        return exc.status, body, JSON_TYPE.encode(), [(b"x-amzn-query-error", f"{exc.code};{exc.fault}".encode())]
    return exc.status, queries_protocol.error_xml(exc, request_id).encode(), b"text/xml", []


def _authenticate(call: Call, scope: Scope, body: bytes) -> None:
    creds = call.config.credentials
    if creds is None:
        return
    call.credential = verify(creds, method=scope["method"], path=scope.get("raw_path", b"/").decode(),
                             query=scope.get("query_string", b"").decode(),
                             headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
                             body=body, region=call.config.region)


async def _dispatch(call: Call, action: str, params: dict[str, Any]) -> dict[str, Any]:
    if action == "ReceiveMessage":
        return await receive_message(call, params)
    handler = ACTIONS.get(action)
    if handler is None:
        if action in UNSUPPORTED:
            raise SqsError("UnsupportedOperation", f"{action} is not supported by tenure sqs.")
        raise SqsError("UnknownOperationException", f"The action {action} is not valid for this endpoint.")
    return await call.service.run(handler, call, params)


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _base_url(scope: Scope) -> str:
    host = _header(scope, b"host")
    if not host:
        server = scope.get("server") or ("localhost", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def _path_queue(scope: Scope) -> str | None:
    parts = [s for s in str(scope.get("path", "/")).split("/") if s]
    return parts[-1] if len(parts) >= 2 else None


async def _body(receive: Receive) -> bytes:
    """The request body; SqsError 413 as soon as it passes :data:`BODY_MAX` (the rest unread)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > BODY_MAX:
            raise SqsError("InvalidParameterValue", "The request is too large.", status=413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(service: SqsService, scope: Scope, receive: Receive) -> tuple[int, bytes, bytes, Headers]:
    """Status, body, content type and extra headers of one API request."""
    request_id = str(uuid.uuid4())
    target = _header(scope, b"x-amz-target")
    json_protocol = target.startswith("AmazonSQS.")
    started = time.monotonic()
    action = target.removeprefix("AmazonSQS.") if json_protocol else "unknown"
    try:
        body = await _body(receive)
        call = Call(service, _base_url(scope), None, _path_queue(scope), receive)
        _authenticate(call, scope, body)
        if json_protocol:
            params = _json_params(body)
        else:
            form = queries_protocol.form_of(body, scope.get("query_string", b""))
            action = form.get("Action", "")
            if not action:
                raise SqsError("MissingAction", "The request must contain the parameter Action.")
            params = queries_protocol.params_of(action, form)
        result = await _dispatch(call, action, params)
    except SqsError as exc:
        log.debug("sqs %s refused: %s %s", action, exc.shape, exc.message)
        service.metrics.observe(action, exc.shape, time.monotonic() - started)
        return _with_id(_error_reply(exc, request_id, json_protocol=json_protocol), request_id)
    except Exception:  # one line to the client, the traceback to the log
        log.exception("sqs %s failed", action)
        service.metrics.observe(action, "InternalFailure", time.monotonic() - started)
        return _with_id(_error_reply(SqsError("InternalFailure", "The request processing has failed."),
                                     request_id, json_protocol=json_protocol), request_id)
    service.metrics.observe(action, "ok", time.monotonic() - started)
    if json_protocol:
        return _with_id((200, json.dumps(result).encode(), JSON_TYPE.encode(), []), request_id)
    return _with_id((200, queries_protocol.result_xml(action, result, request_id).encode(), b"text/xml", []),
                    request_id)


def _with_id(reply: tuple[int, bytes, bytes, Headers], request_id: str) -> tuple[int, bytes, bytes, Headers]:
    status, body, media, headers = reply
    return status, body, media, [*headers, (b"x-amzn-requestid", request_id.encode())]


async def endpoint(service: SqsService, scope: Scope, receive: Receive, send: Send) -> None:
    """One API request, answered in one response message (405 for a method other than GET and POST)."""
    if scope["method"] in ("GET", "POST"):
        status, body, media, headers = await _answer(service, scope, receive)
    else:
        status, media, headers = 405, JSON_TYPE.encode(), [(b"allow", b"GET, POST")]
        body = json.dumps({"__type": "com.amazonaws.sqs#InvalidAction",
                           "message": f"The method {scope['method']} is not allowed: the API takes GET and POST."}
                          ).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", media), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def _json_params(body: bytes) -> dict[str, Any]:
    try:
        params = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return params


async def health(request: Request) -> Response:
    """200 while serving; 503 from SIGTERM on (readiness fails before the drain)."""
    service: SqsService = request.app.state.service
    status, text = service.health()
    return Response(text, status_code=status, media_type="text/plain")


async def metrics(request: Request) -> Response:
    service: SqsService = request.app.state.service
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def sweeper(service: SqsService) -> None:
    """This replica's periodic sweep, every ``sweep_interval`` seconds until the drain: delete
    the messages past their retention, then resume move tasks whose runner stopped. A failure
    is logged and the next sweep tries again."""
    while not service.shutdown.draining:
        try:
            expired = await service.run(service.sweep_retention)
            if expired:
                log.info("sqs retention: deleted %s", ", ".join(f"{n} from {q}" for q, n in sorted(expired.items())))
            await service.run(moves.adopt, service)
        except Exception:
            log.exception("sqs sweep failed")
        await asyncio.sleep(service.config.sweep_interval)


def build_app(service: SqsService) -> ASGIApp:
    """The app; its lifespan opens the service (pool, key, LISTEN) and closes it."""
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not service.key:
            await service.run(service.open)
        service.wakeups.start(asyncio.get_running_loop())
        sweeping = asyncio.create_task(sweeper(service))
        try:
            yield
        finally:
            for task in (sweeping, *service.move_runners):
                task.cancel()
            await asyncio.gather(sweeping, *service.move_runners, return_exceptions=True)
            await service.run(service.close)

    rest = Starlette(routes=[Route("/healthz", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])],
                     lifespan=lifespan)
    rest.state.service = service

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in ("/healthz", "/metrics"):
            await endpoint(service, scope, receive, send)
        else:
            await rest(scope, receive, send)
    return app
