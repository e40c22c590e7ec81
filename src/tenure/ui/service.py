"""What one `tenure ui` process shares between requests: its config, the authenticator, a
connection pool, and the change feed behind ``GET api/v1/events`` (the pool, the stop state
and the LISTEN thread are :class:`~tenure.core.pooled.PooledService`'s)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, Protocol, TypeAlias

import psycopg

from tenure.core.pooled import LISTEN_JOIN_SECONDS, PooledService
from tenure.core.repository import (
    BrowseStore,
    ControlStore,
    ReadStore,
    RegistryStore,
    Repository,
    SchemaStore,
    SeriesStore,
    WorkflowStore,
)
from tenure.core.service import ListenLoop
from tenure.ui.auth import Authenticator, load_users
from tenure.ui.config import UiConfig

log = logging.getLogger("tenure.ui")


class UiStore(SchemaStore, BrowseStore, ReadStore, ControlStore, RegistryStore, SeriesStore, WorkflowStore,
              Protocol):
    """What `tenure ui`'s requests read on a pooled connection: the job browser (browse area),
    queue figures and running jobs (reads), queue controls (control), workers (registry), the
    charts' series (series), workflows and their steps (workflows); the schema check at open. Its writes go through :mod:`tenure.control`."""
SUBSCRIBER_BACKLOG = 100
"""Changes queued per event stream; a client that falls further behind gets a ``resync``."""
END = None
"""Queued to every event stream when the server drains: the stream ends (with a ``retry:`` hint)."""
Message: TypeAlias = str | None
"""One change (JSON text) for an event stream, or :data:`END`."""


class ChangeFeed:
    """New and changed jobs, pushed to every open event stream.

    One thread owns the feed's connection (a :class:`~tenure.core.service.ListenLoop` on the
    wake-up channel, which every enqueue, retry and requeue notifies; reopened with jittered
    backoff after an error). On each notification, and every ``feed_poll_seconds`` anyway,
    :meth:`run_once` reads the newest job id and the job events after the last one seen (both
    walks of a primary key), and publishes one change: the new jobs' range and the ids of jobs
    whose state changed. A claim writes no event: a job that only started running shows up on the
    next change of its page, or on the polling fallback.

    :meth:`drain` (SIGTERM) queues :data:`END` to every stream, and to every stream that
    subscribes later; nothing is published after it.
    """

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self.loop: asyncio.AbstractEventLoop | None = None
        self.subscribers: set[asyncio.Queue[Message]] = set()
        self.lock = threading.Lock()
        self.newest_job_id = 0
        self.last_event_id = 0
        self.started = False
        """Whether the feed has read where it starts (the first pass publishes nothing)."""
        self.draining = False
        """Set by :meth:`drain` (on the event loop)."""
        self.listen = ListenLoop(dsn=config.dsn, schema=config.schema, application_name="tenure-ui-feed", log=log,
                                 tick=self.run_once, wait_seconds=config.feed_poll_seconds)
        """The feed's thread: a pass (:meth:`run_once`) per notification, or per
        ``feed_poll_seconds`` without one."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.listen.start()

    def close(self) -> None:
        self.listen.stop_and_join(LISTEN_JOIN_SECONDS)

    def subscribe(self) -> asyncio.Queue[Message]:
        """A stream's queue (on the event loop); it holds :data:`END` at once if the server drains."""
        queue: asyncio.Queue[Message] = asyncio.Queue(SUBSCRIBER_BACKLOG)
        if self.draining:
            queue.put_nowait(END)
            return queue
        with self.lock:
            self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Message]) -> None:
        with self.lock:
            self.subscribers.discard(queue)

    def drain(self) -> None:
        """End every event stream: each queue gets :data:`END` (its backlog dropped if full).
        On the event loop."""
        self.draining = True
        with self.lock:
            queues = list(self.subscribers)
        for queue in queues:
            if queue.full():
                while not queue.empty():
                    queue.get_nowait()
            queue.put_nowait(END)

    def run_once(self, repo: BrowseStore) -> dict[str, Any] | None:
        """One look for changes since the last; the change published, or None."""
        newest = repo.job_newest_id()
        if not self.started:
            self.last_event_id = repo.job_events_last_id()
            self.newest_job_id = newest
            self.started = True
            return None
        events = repo.job_events_since(self.last_event_id)
        if newest == self.newest_job_id and not events:
            return None
        change = {"type": "change", "new_jobs": [self.newest_job_id + 1, newest] if newest > self.newest_job_id else None,
                  "changed_jobs": sorted({int(e["job_id"]) for e in events}),
                  "queues": sorted({str(e["queue_name"]) for e in events})}
        self.newest_job_id = max(self.newest_job_id, newest)
        if events:
            self.last_event_id = int(events[-1]["id"])
        self._publish(json.dumps(change))
        return change

    def _publish(self, message: str) -> None:
        if self.loop is None:
            return
        with self.lock:
            queues = list(self.subscribers)
        for queue in queues:
            self.loop.call_soon_threadsafe(self._offer, queue, message)

    def _offer(self, queue: asyncio.Queue[Message], message: str) -> None:
        if self.draining:  # the stream ends with END; nothing may push it out of a full queue
            return
        if queue.full():  # a slow client: drop its backlog, tell it to refetch
            while not queue.empty():
                queue.get_nowait()
            message = json.dumps({"type": "resync"})
        queue.put_nowait(message)


class UiService(PooledService[UiStore]):
    """The shared state of one process: config, authenticator, pool, change feed, and the stop
    state (its drain ends the event streams)."""

    def __init__(self, config: UiConfig) -> None:
        config.validate()
        super().__init__(dsn=config.dsn, schema=config.schema, application_name="tenure-ui",
                         pool_size=config.pool_size, statement_timeout_seconds=config.statement_timeout_seconds)
        self.config = config
        users = load_users(config.users_file) if config.users_file else None
        self.auth = Authenticator(users=users, trusted_header=config.trusted_user_header, read_only=config.read_only)
        self.feed = ChangeFeed(config)
        self.listener = self.feed.listen
        self.shutdown.on_drain(self.feed.drain)

    def store(self, conn: psycopg.Connection[Any]) -> UiStore:
        return Repository(conn, self.schema)
