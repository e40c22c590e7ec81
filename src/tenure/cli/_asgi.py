"""The server loop behind :func:`tenure.cli.common.serve_asgi` (`tenure sqs`, `tenure ui`): uvicorn
with tenure's stop on SIGTERM (issue 36, :mod:`tenure.core.shutdown`). Imported only by the
server commands (uvicorn costs every other command ~20 ms to import).

Why not uvicorn's own: on SIGTERM it closes the listener and waits for the requests in flight
(an SQS long poll for up to 20 s, an event stream for ever) until its graceful-shutdown timeout,
then cancels them and drops their connections, and finally re-raises the signal, so the process
dies of it. Here the signal stops the service first (``/healthz`` 503, ``Connection: close``),
drains it after the shutdown delay (long polls answered, streams ended), and only then lets
uvicorn's graceful shutdown run, which has nothing left to wait for; the process exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.core.shutdown import Shutdown

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, stopped in three steps: the first SIGTERM or SIGINT stops the service
    (readiness fails, every response closes its connection, everything is still served);
    ``delay`` seconds later (at once with 0, or at a second signal) it drains the service and
    exits through uvicorn's graceful shutdown (the listener and idle connections close, busy ones
    after their response, the app's lifespan closes the service). A signal during that shutdown
    stops waiting for the requests in flight. The signal is not re-raised afterwards.

    Limits: the signal is acted on at uvicorn's next tick (0.1 s); signals are caught on the
    main thread only (uvicorn's rule), elsewhere the server stops only when told."""

    def __init__(self, config: uvicorn.Config, label: str, shutdown: Shutdown, delay: float) -> None:
        super().__init__(config)
        self.label = label
        self.service_shutdown = shutdown
        self.delay = delay
        self.signals: list[int] = []
        """The stop signals received (the handler only records them; :meth:`on_tick` acts)."""
        self.drain_at: float | None = None
        """When (monotonic) the service drains; None until the first signal is acted on."""
        self.log = logging.getLogger(f"tenure.{label}")

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The signal handler: record the signal; during the final shutdown, stop waiting."""
        self.signals.append(sig)
        if self.should_exit:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.signals and self.drain_at is None:
            self.drain_at = time.monotonic() + self.delay
            self.service_shutdown.stop()
            if self.delay > 0:
                self.log.info("%s: %s: /healthz answers 503 from now, draining in %g s", self.label,
                              signal.Signals(self.signals[0]).name, self.delay)
        if self.drain_at is not None and not self.should_exit and (
                time.monotonic() >= self.drain_at or len(self.signals) > 1):
            self.log.info("%s: draining: long polls and event streams end, the requests in flight finish, "
                          "then the process exits", self.label)
            self.service_shutdown.drain()
            self.should_exit = True
        return await super().on_tick(counter)


def close_when_stopping(app: ASGIApp, shutdown: Shutdown) -> ASGIApp:
    """``app``, with ``Connection: close`` on every HTTP response started once ``shutdown`` is
    stopping, so that keep-alive clients reconnect (through the load balancer, to another
    replica) instead of sending their next request here."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and shutdown.stopping:
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, send_closing)
    return wrapped
