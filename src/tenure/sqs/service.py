"""The state one `tenure sqs` process shares between requests: its config, a connection pool, the
receipt handles' key, and the long-poll wake-ups (one LISTEN connection; the pool, the stop
state and the LISTEN thread are :class:`~tenure.core.pooled.PooledService`'s). A request is a
:class:`Call`: the service, the URL base the client used, and the credential that signed it."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

import psycopg
from prometheus_client import CollectorRegistry

from tenure.core.pooled import LISTEN_JOIN_SECONDS, PooledService
from tenure.core.repository import ClaimStore, Connected, LeaseStore, Repository, SchemaStore, SqsStore
from tenure.core.repository.specs import Row
from tenure.core.service import ListenLoop
from tenure.core.shutdown import SHUTDOWN_DELAY_DEFAULT, SHUTDOWN_DELAY_MAX
from tenure.sqs.auth import Credential
from tenure.sqs.errors import SqsError, missing, no_queue
from tenure.sqs.metrics import SqsMetrics

log = logging.getLogger("tenure.sqs")
T = TypeVar("T")


class SqsMessageStore(Connected, SqsStore, ClaimStore, LeaseStore, Protocol):
    """What the message actions use: the sqs area, deletes through the lease area's
    ``complete_many`` (audited like a worker's), and the connection (a FIFO send's transaction)."""


class SqsServiceStore(SqsMessageStore, SchemaStore, Protocol):
    """A pooled repository of `tenure sqs`: the message actions' face and the schema check at open."""

WORKER_ID = "tenure-sqs"
"""The owner (``locked_by``) of every claim made over SQS, the same in every replica, so that a
receipt handle from one replica deletes through another."""
POOL_SIZE_DEFAULT = 8
BIND_DEFAULT = "127.0.0.1:9324"
ACCOUNT_DEFAULT = "000000000000"
REGION_DEFAULT = "us-east-1"
ACTION_NAMES = (
    "CreateQueue", "GetQueueUrl", "ListQueues", "DeleteQueue", "PurgeQueue", "GetQueueAttributes",
    "SetQueueAttributes", "TagQueue", "UntagQueue", "ListQueueTags", "ListDeadLetterSourceQueues", "SendMessage",
    "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch", "StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask",
    "AddPermission", "RemovePermission")
"""Every action of the API (the ``action`` label's values, with ``unknown``)."""
QUEUE_CACHE_SECONDS = 1.0
"""How long a queue's row (attributes) is reused by the message actions of one process; its own
changes invalidate it at once, another replica's show within this bound."""
SWEEP_INTERVAL_DEFAULT = 10.0
"""Seconds between two sweeps of one replica: messages past their retention, move tasks whose
runner stopped."""
RETENTION_DEFAULT = 345_600
"""SQS's default MessageRetentionPeriod: 4 days."""
RETENTION_BATCH = 1000
"""Messages one retention statement deletes at most; a sweep runs up to RETENTION_BATCHES of them."""
RETENTION_BATCHES = 10
SWEEP_QUEUES_SHOWN = 1000
"""The most queues whose expiry counter the retention sweep creates at 0 (the label's bound)."""
LONG_POLL_RECHECK_DEFAULT = 1.0
"""Seconds between re-checks of a long poll without a notification (delays and visibility
timeouts end without one)."""


@dataclass(frozen=True)
class SqsConfig:
    dsn: str
    schema: str
    bind: str = BIND_DEFAULT
    account_id: str = ACCOUNT_DEFAULT
    region: str = REGION_DEFAULT
    credentials: dict[str, Credential] | None = field(default=None, hash=False)
    """None: --no-auth (every request accepted, unsigned or not)."""
    pool_size: int = POOL_SIZE_DEFAULT
    long_poll_recheck: float = LONG_POLL_RECHECK_DEFAULT
    sweep_interval: float = SWEEP_INTERVAL_DEFAULT
    """Seconds between this replica's sweeps (retention, move tasks to resume); see docs/sqs.md."""
    shutdown_delay: float = SHUTDOWN_DELAY_DEFAULT
    """Seconds from SIGTERM to the drain, /healthz failing meanwhile (:mod:`tenure.core.shutdown`)."""

    def validate(self) -> None:
        from tenure.core.errors import ConfigError
        host, _, port = self.bind.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"--bind must be HOST:PORT, got {self.bind!r}")
        if len(self.account_id) != 12 or not self.account_id.isdigit():
            raise ConfigError(f"--account-id must be 12 digits, got {self.account_id!r}")
        if not self.region or not all(c.isalnum() or c == "-" for c in self.region):
            raise ConfigError(f"invalid --region {self.region!r}")
        if self.pool_size < 1:
            raise ConfigError("the pool size must be >= 1")
        if not 0.05 <= self.sweep_interval <= 3600:
            raise ConfigError(f"--sweep-interval must be 0.05 to 3600 seconds, got {self.sweep_interval:g}")
        if not 0 <= self.shutdown_delay <= SHUTDOWN_DELAY_MAX:
            raise ConfigError(f"--shutdown-delay must be 0 to {SHUTDOWN_DELAY_MAX:g} seconds, "
                              f"got {self.shutdown_delay:g}")


class Wakeups:
    """Long polls waiting per queue, woken when the database notifies the queue (enqueue,
    release, requeue), and all at once by :meth:`drain`. One thread holds the LISTEN connection
    (a :class:`~tenure.core.service.ListenLoop`: reopened with jittered backoff after an error).

    A long poll holds one :class:`Subscription` from its first claim to its answer, so a
    notification that arrives while it claims (between two waits) is kept, not lost: the next
    wait returns at once and claims again."""

    def __init__(self, config: SqsConfig) -> None:
        self.config = config
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiting: dict[str, set[asyncio.Event]] = {}
        self.draining = False
        """Set by :meth:`drain`: a wait returns at once."""
        self.notified = 0
        """How many notifications this process has had (any queue); a subscription's start."""
        self.last_notified: dict[str, int] = {}
        """Per queue, the value of :attr:`notified` at its latest notification (one entry per
        queue name notified, as bounded as the queues)."""
        self.listen = ListenLoop(dsn=config.dsn, schema=config.schema, application_name="tenure-sqs-listen",
                                 log=log, on_notify=self._notified)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.listen.start()

    def close(self) -> None:
        self.listen.stop_and_join(LISTEN_JOIN_SECONDS)

    def waiters(self) -> int:
        return sum(len(v) for v in self.waiting.values())

    def drain(self) -> None:
        """Wake every long poll waiting, and every later one at once (on the event loop)."""
        self.draining = True
        for events in self.waiting.values():
            for event in events:
                event.set()

    def subscribe(self, queue: str, since: int) -> Subscription:
        """Wake-ups of ``queue`` from now on, and at once if it was notified after ``since`` (a
        value of :attr:`notified` read before the poll's first claim). Use as a context manager."""
        return Subscription(self, queue, woken=self.last_notified.get(queue, 0) > since)

    def _wake(self, queue: str) -> None:
        self.notified += 1
        self.last_notified[queue] = self.notified
        for event in self.waiting.get(queue, ()):
            event.set()

    def _notified(self, queue: str) -> None:
        """On the LISTEN thread: wake the queue's long polls on the event loop."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._wake, queue)


class Subscription:
    """One long poll's interest in one queue, registered for its whole life (event loop only)."""

    def __init__(self, wakeups: Wakeups, queue: str, *, woken: bool) -> None:
        self.wakeups = wakeups
        self.queue = queue
        self.event = asyncio.Event()
        if woken or wakeups.draining:
            self.event.set()

    def __enter__(self) -> Subscription:
        self.wakeups.waiting.setdefault(self.queue, set()).add(self.event)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wakeups.waiting.get(self.queue, set()).discard(self.event)

    async def wait(self, timeout: float) -> None:
        """Until a notification since the last wait, ``timeout`` seconds, or the drain."""
        if not self.event.is_set():
            try:
                await asyncio.wait_for(self.event.wait(), timeout)
            except TimeoutError:
                pass
        if not self.wakeups.draining:
            self.event.clear()


class SqsService(PooledService[SqsServiceStore]):
    """The shared state: config, pool, HMAC key, wake-ups, and the stop state (its drain wakes
    the long polls)."""

    def __init__(self, config: SqsConfig) -> None:
        config.validate()
        super().__init__(dsn=config.dsn, schema=config.schema, application_name="tenure-sqs",
                         pool_size=config.pool_size)
        self.config = config
        self.key = b""
        self.wakeups = Wakeups(config)
        self.listener = self.wakeups.listen
        self.shutdown.on_drain(self.wakeups.drain)
        self.queue_cache: dict[str, tuple[float, Row]] = {}
        """Queue rows by name with their expiry (monotonic): :data:`QUEUE_CACHE_SECONDS`."""
        self.replica_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        """This process among the replicas: the runner of the move tasks it runs (:mod:`tenure.sqs.moves`)."""
        self.move_runners: set[asyncio.Task[None]] = set()
        """The move tasks running here (references kept until they end)."""
        self.metrics = SqsMetrics(CollectorRegistry(), ACTION_NAMES, self.wakeups.waiters)
        self.executor = ThreadPoolExecutor(max_workers=config.pool_size, thread_name_prefix="tenure-sqs-db")
        """The threads that run the database work of requests, as many as the pool has
        connections (a long poll waits on the event loop, not here)."""

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of :attr:`executor`'s threads (the blocking database calls), awaited:
        lighter per call than anyio's worker threads behind Starlette's ``run_in_threadpool``
        (no capacity limiter, no cancel scope)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def store(self, conn: psycopg.Connection[Any]) -> SqsServiceStore:
        return Repository(conn, self.schema)

    def on_open(self, repo: SqsStore) -> None:
        """Load (or create) the shared HMAC key."""
        self.key = repo.sqs_secret(secrets.token_bytes(32))

    def sweep_retention(self) -> dict[str, int]:
        """Delete the messages past their queue's MessageRetentionPeriod (a few bounded batches,
        by the database clock; replicas sweeping at once skip each other's rows), audited and
        counted in ``tenure_sqs_messages_expired_total``; how many per queue."""
        expired: dict[str, int] = {}
        with self.repo() as repo:
            # Every queue's counter exists from the first sweep, at 0 until a message expires,
            # so a rate over it reads 0 rather than no data (at most SWEEP_QUEUES_SHOWN queues).
            for name in repo.sqs_queue_list("", "", SWEEP_QUEUES_SHOWN):
                self.metrics.expired.labels(name)
            for _ in range(RETENTION_BATCHES):
                batch = repo.sqs_retention_expire(WORKER_ID, RETENTION_BATCH, RETENTION_DEFAULT)
                for queue, count in batch.items():
                    expired[queue] = expired.get(queue, 0) + count
                    self.metrics.expired.labels(queue).inc(count)
                if sum(batch.values()) < RETENTION_BATCH:
                    break
        return expired

    def close(self) -> None:
        super().close()
        self.executor.shutdown(wait=False)


@dataclass
class Call:
    """One request: the service, the URL base the client reached, the signing credential."""

    service: SqsService
    base_url: str
    credential: Credential | None
    path_queue: str | None = None
    """The queue named by the request path (query protocol: POST /ACCOUNT/QUEUE)."""
    receive: Any = None
    """The request's ASGI ``receive`` once its body is read (None outside a request): a long poll
    watches it for the client's disconnect."""

    @property
    def config(self) -> SqsConfig:
        return self.service.config

    def queue_url(self, name: str) -> str:
        return f"{self.base_url}/{self.config.account_id}/{name}"

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.config.region}:{self.config.account_id}:{name}"

    def check_access(self, name: str) -> None:
        if self.credential is not None and not self.credential.allows(name):
            raise SqsError("AccessDenied", f"Access to the queue {name} is denied for this key.", status=403)

    def queue_name_of(self, params: dict[str, Any]) -> str:
        """The queue a request names by QueueUrl (or the request path)."""
        url = params.get("QueueUrl")
        if url is None and self.path_queue:
            return self.path_queue
        if not isinstance(url, str) or not url:
            raise missing("QueueUrl")
        path = urlparse(url).path if "://" in url else url
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if not name:  # a URL without a queue's path names no queue, as SQS answers it
            raise no_queue()
        return name

    def queue(self, repo: SqsStore, params: dict[str, Any], *, cached: bool = False) -> Row:
        """The SQS queue the request names; QueueDoesNotExist, AccessDenied. ``cached``: a row
        read in the last :data:`QUEUE_CACHE_SECONDS` will do (the message actions)."""
        name = self.queue_name_of(params)
        self.check_access(name)
        cache = self.service.queue_cache
        hit = cache.get(name) if cached else None
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        row = repo.sqs_queue_get(name)
        if row is None:
            cache.pop(name, None)
            raise no_queue()
        cache[name] = (time.monotonic() + QUEUE_CACHE_SECONDS, row)
        return row

    def forget_queue(self, name: str) -> None:
        """Drop a queue's cached row after this process changed or deleted it."""
        self.service.queue_cache.pop(name, None)
