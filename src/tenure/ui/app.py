"""The ASGI app of `tenure ui`: pages, assets, the JSON API and its event stream, all under
the prefix.

Prefix handling (:class:`PrefixMiddleware`): with ``--prefix /tenure`` requests arrive as
``/tenure/...``; behind a proxy that strips the prefix and sends ``X-Forwarded-Prefix:
/tenure`` they arrive as ``/...``. Either way the app routes the path below the prefix and
every link, asset and API URL it writes starts with the prefix the browser sees (the
forwarded one when given, else ``--prefix``).

Every refusal of the API is one JSON message ``{"error": "..."}`` with a 4xx status; an
unexpected failure is logged and answered 500 without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from importlib import resources
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tenure import control
from tenure.core.errors import ConfigError, UniqueKeyHeldError, first_line
from tenure.ui import api, flow_api, openapi, pages
from tenure.ui.auth import AuthError, Identity
from tenure.ui.filters import FilterError
from tenure.ui.service import END, UiService

log = logging.getLogger("tenure.ui")
BODY_MAX = 1024 * 1024
EVENT_PING_SECONDS = 15.0
DRAIN_RETRY_MS = 1000
"""The reconnection delay an event stream ends with when the server drains (its ``retry:`` field)."""
_FORWARDED_PREFIX = re.compile(r"^(/[A-Za-z0-9._~-]+)+/?$")
ASSETS = {"app.js": "text/javascript; charset=utf-8", "flow.js": "text/javascript; charset=utf-8",
          "workflows.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}


class PrefixMiddleware:
    """Routes ``{prefix}/x`` (or, with ``X-Forwarded-Prefix``, ``/x``) to ``/x``, recording the
    prefix the browser sees in ``scope["state"]["prefix"]``."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        forwarded = ""
        for name, value in scope.get("headers", []):
            if name == b"x-forwarded-prefix":
                text = value.decode("latin-1").strip()
                forwarded = text.rstrip("/") if _FORWARDED_PREFIX.match(text) else ""
        path: str = scope["path"]
        inner = None
        if self.prefix and (path == self.prefix or path.startswith(self.prefix + "/")):
            inner = path[len(self.prefix):]
            if not inner:  # /tenure -> /tenure/
                await RedirectResponse(f"{forwarded or self.prefix}/", status_code=308)(scope, receive, send)
                return
        elif not self.prefix or forwarded:
            inner = path
        if inner is None:
            await JSONResponse({"error": f"not found: this UI lives under {self.prefix}/"}, status_code=404)(
                scope, receive, send)
            return
        state = dict(scope.get("state") or {})
        state["prefix"] = forwarded or self.prefix
        await self.app({**scope, "path": inner, "raw_path": inner.encode(), "state": state}, receive, send)


def _prefix(request: Request) -> str:
    return str(getattr(request.state, "prefix", ""))


def _own_origins(request: Request) -> set[str]:
    hosts = {request.headers.get("host", "")}
    forwarded = request.headers.get("x-forwarded-host")
    if forwarded:
        hosts.add(forwarded.split(",")[0].strip())
    return {f"{scheme}://{h}" for h in hosts if h for scheme in ("http", "https")}


def _error(status: int, message: str, service: UiService | None = None) -> JSONResponse:
    headers = {}
    if status == 401 and service is not None and service.auth.challenge:
        headers["WWW-Authenticate"] = service.auth.challenge
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _identify(request: Request) -> Identity:
    service: UiService = request.app.state.service
    return service.auth.identify(request.headers)


def _api_endpoint(handler: api.Handler, mutates: bool) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        service: UiService = request.app.state.service
        try:
            identity = _identify(request)
            body: dict[str, Any] = {}
            if mutates:
                service.auth.check_mutation(identity, request.headers, own_origins=_own_origins(request))
                raw = await request.body()
                if len(raw) > BODY_MAX:
                    raise api.ApiError(413, "the body is too large")
                body = api.parse_body(raw)
            call = api.Call(service, identity, dict(request.query_params), body, dict(request.path_params))
            result = await run_in_threadpool(handler, call)
        except AuthError as exc:
            return _error(exc.status, exc.message, service)
        except api.ApiError as exc:
            return _error(exc.status, exc.message)
        except (control.SetChangedError, UniqueKeyHeldError) as exc:
            return _error(409, first_line(exc))
        except (FilterError, ConfigError) as exc:
            return _error(400, first_line(exc))
        except psycopg.errors.QueryCanceled:
            return _error(503, "the query took too long and was cancelled: narrow the filter")
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.warning("ui: database unavailable: %s", first_line(exc))
            return _error(503, "the database is unavailable; try again")
        except Exception:
            log.exception("ui: %s %s failed", request.method, request.url.path)
            return _error(500, "internal error (see the server log)")
        return TimestampJSONResponse(result)
    return endpoint


class TimestampJSONResponse(JSONResponse):
    """JSON with timestamps as ISO-8601 text (and anything else non-JSON, such as UUIDs, as text)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o)).encode()


async def events(request: Request) -> Response:
    """``GET api/v1/events``: server-sent events, one ``change`` per batch of new or changed jobs.
    When the server drains (SIGTERM) the stream ends with ``retry:`` :data:`DRAIN_RETRY_MS`: the
    browser's EventSource reconnects that much later, to another replica."""
    service: UiService = request.app.state.service
    try:
        _identify(request)
    except AuthError as exc:
        return _error(exc.status, exc.message, service)
    queue = service.feed.subscribe()

    async def stream() -> AsyncIterator[str]:
        try:
            yield "retry: 2000\nevent: hello\ndata: {}\n\n"
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), EVENT_PING_SECONDS)
                except TimeoutError:
                    yield ": ping\n\n"
                    continue
                if message is END:
                    yield f": the server is shutting down: reconnect\nretry: {DRAIN_RETRY_MS}\n\n"
                    return
                yield f"event: change\ndata: {message}\n\n"
        finally:
            service.feed.unsubscribe(queue)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def openapi_document(request: Request) -> Response:
    return JSONResponse(openapi.document(_prefix(request)))


async def api_not_found(request: Request) -> Response:
    return _error(404, f"no such API endpoint: {request.method} {request.url.path}")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return PlainTextResponse("not found\n", status_code=404)
    text = resources.files("tenure.ui").joinpath("static", name).read_text(encoding="utf-8")
    return Response(text, media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})


async def health(request: Request) -> Response:
    """200 while serving; 503 from SIGTERM on (readiness fails before the drain)."""
    service: UiService = request.app.state.service
    status, text = service.health()
    return PlainTextResponse(text, status_code=status)


def _page(name: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        service: UiService = request.app.state.service
        try:
            identity = _identify(request)
        except AuthError as exc:
            headers = {"WWW-Authenticate": service.auth.challenge} if exc.status == 401 and service.auth.challenge else {}
            return HTMLResponse(pages.error_page(_prefix(request), exc.message), status_code=exc.status,
                                headers=headers)
        job_id = request.path_params.get("id")
        if job_id is not None and (not job_id.isdigit() or int(job_id) < 1):
            return HTMLResponse(pages.error_page(_prefix(request), f"invalid {name} id {job_id!r}"), status_code=404)
        queue = request.path_params.get("name")
        return HTMLResponse(pages.render(name, prefix=_prefix(request), identity=identity,
                                         csrf=service.auth.csrf_token(identity), job_id=job_id, queue=queue),
                            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                     "Content-Security-Policy": pages.CSP, "Referrer-Policy": "same-origin"})
    return endpoint


def build_app(service: UiService) -> ASGIApp:
    """The app (under the prefix); its lifespan opens the service and starts the change feed."""
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(service.open)
        service.feed.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            await run_in_threadpool(service.close)

    routes = [Route("/healthz", health, methods=["GET"]),
              Route("/static/{name}", asset, methods=["GET"]),
              Route("/api/v1/openapi.json", openapi_document, methods=["GET"]),
              Route("/api/v1/events", events, methods=["GET"])]
    routes += [Route(f"/api/v1/{path}", _api_endpoint(handler, mutates), methods=[method])
               for method, path, handler, mutates in api.ROUTES + flow_api.ROUTES]
    routes.append(Route("/api/{rest:path}", api_not_found, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]))
    routes += [Route(path, _page(name), methods=["GET"]) for name, path in pages.PAGES.items()]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return PrefixMiddleware(app, service.config.prefix)
