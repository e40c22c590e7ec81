"""Where a `tenure sqs` or `tenure ui` process is in its stop (issue 36), shared by the
service, its app and the server loop (:func:`tenure.cli.common.serve_asgi`).

On SIGTERM (or SIGINT) the process first *stops*: ``/healthz`` answers 503 and every response
says ``Connection: close``, so that load balancers and keep-alive clients move to another
replica, while everything is still served. After the shutdown delay (``--shutdown-delay``) it
*drains*: the hooks run once, answering each SQS long poll in flight at once (no messages) and
ending each server-sent-events stream with a ``retry:`` hint, and the server closes its
listener, lets the requests in flight finish and exits.

Limits: one event loop owns the object: :meth:`stop`, :meth:`drain` and the hooks run on its
thread (the server's tick, not the signal handler), and nothing here locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("tenure.shutdown")

SHUTDOWN_DELAY_DEFAULT = 0.0
"""Seconds between SIGTERM and the drain in which ``/healthz`` fails but everything is served.
0 (the command's default) drains at once; the Helm chart sets 5 s so that the Service's
endpoints drop the pod before the long polls and streams are ended."""
SHUTDOWN_DELAY_MAX = 300.0
"""A longer delay is refused (exit 2): it would outlast any sensible termination grace period."""


class Shutdown:
    """The stop state of one server process: serving, then :attr:`stopping`, then
    :attr:`draining` (never back)."""

    def __init__(self) -> None:
        self.stopping = False
        """``/healthz`` answers 503 and every response closes its connection."""
        self.draining = False
        """The drain hooks have run: long polls and event streams end as soon as they look."""
        self._hooks: list[Callable[[], None]] = []

    def on_drain(self, hook: Callable[[], None]) -> None:
        """Run ``hook()`` (on the event loop) when the drain begins."""
        self._hooks.append(hook)

    def stop(self) -> None:
        """Fail readiness and close connections after their response; serve on."""
        self.stopping = True

    def drain(self) -> None:
        """Stop (if not yet) and run the drain hooks, once; a hook that fails is logged and the
        others still run."""
        self.stopping = True
        if self.draining:
            return
        self.draining = True
        for hook in self._hooks:
            try:
                hook()
            except Exception:
                log.exception("shutdown: a drain hook failed")
