"""Periodic (cron) jobs: ``@app.periodic("*/5 * * * *", name="report", payload={...})``.

Any number of processes may run the scheduler; each schedule slot is enqueued exactly once:
one statement advances the schedule's row (``periodic_schedules.last_slot``, a compare-and-set
``last_slot < slot``) and inserts the job with the idempotency key
``periodic:<name>:<slot in UTC, ISO 8601>``. A racing scheduler either loses the CAS or hits
the key; neither enqueues a copy.

Policy for slots missed while no scheduler ran (an outage, a deploy): at most ``catch_up``
of the most recent missed slots are enqueued (default 1: "run once for the outage"), oldest
first; older ones are skipped and counted (``skipped_total`` on the schedule row, the
``tenure_periodic_slots_skipped`` metric). A schedule seen for the first time starts with the
next slot after that moment; earlier slots are never back-filled.

Time: slots are computed in the schedule's time zone (UTC by default, any IANA name with
``timezone="Europe/Berlin"``), so DST moves a local 09:00 slot in UTC as expected; "now" is
the database clock. Cron syntax is croniter's: five fields, or six with a trailing seconds field
(``"* * * * * */10"`` = every 10 seconds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
from croniter import croniter

from tenure.core.db import Connection, connect
from tenure.core.errors import ConfigError, first_line
from tenure.core.repository import PeriodicStore, ReadStore, Repository, check_priority, encode_payload

log = logging.getLogger("tenure.periodic")


class ScheduleStore(PeriodicStore, ReadStore, Protocol):
    """What the scheduler uses: the periodic area, and the database clock (reads area)."""

INTERVAL_DEFAULT = 1.0
CATCH_UP_DEFAULT = 1
CATCH_UP_MAX = 100
SKIP_COUNT_SCAN_MAX = 100_000
"""Missed slots counted one by one at most (a seconds-level cron after a long outage)."""


def check_cron(expr: str) -> str:
    """The expression if croniter accepts it, else ConfigError (the CLI's exit 2)."""
    if not isinstance(expr, str) or not expr.strip() or not croniter.is_valid(expr):
        raise ConfigError(f"invalid cron expression {expr!r} (five fields, or six with trailing seconds)")
    return expr


def check_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r} (use an IANA name such as UTC or Europe/Berlin)") from None


@dataclass(frozen=True)
class Schedule:
    """One declared periodic job."""

    cron: str
    """croniter expression, evaluated in ``timezone``."""
    name: str
    """Schedule name (unique in the app); part of each slot's idempotency key."""
    task: str
    """Task enqueued at each slot."""
    payload: Any = None
    queue: str = "default"
    timezone: str = "UTC"
    """IANA zone the cron fields are read in."""
    priority: int = 0
    max_attempts: int = 5
    catch_up: int = CATCH_UP_DEFAULT
    """Most missed slots enqueued after an outage (the most recent ones)."""

    def validate(self) -> None:
        check_cron(self.cron)
        check_timezone(self.timezone)
        if not self.name or not self.task:
            raise ConfigError("a periodic job needs a name and a task")
        check_priority(self.priority)
        encode_payload(self.payload)
        if not 1 <= self.catch_up <= CATCH_UP_MAX:
            raise ConfigError(f"catch_up must be in [1, {CATCH_UP_MAX}], got {self.catch_up}")
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be >= 1")

    def slot_key(self, slot: datetime) -> str:
        return f"periodic:{self.name}:{slot.astimezone(timezone.utc).isoformat()}"

    def due(self, last: datetime, now: datetime) -> tuple[list[datetime], int]:
        """Slots in ``(last, now]`` to enqueue (oldest first, at most ``catch_up``, the most
        recent ones) and how many older missed slots are skipped."""
        zone = check_timezone(self.timezone)
        # get_prev is strictly before its start: start one microsecond after now so a slot
        # exactly at now is due.
        it = croniter(self.cron, (now + timedelta(microseconds=1)).astimezone(zone))
        latest: list[datetime] = []
        while len(latest) < self.catch_up:
            slot = it.get_prev(datetime)
            if slot <= last:
                break
            latest.append(slot)
        skipped = 0
        if len(latest) == self.catch_up:
            while skipped < SKIP_COUNT_SCAN_MAX:
                if it.get_prev(datetime) <= last:
                    break
                skipped += 1
        return list(reversed(latest)), skipped


@dataclass(frozen=True)
class SchedulerConfig:
    """How often the scheduler looks for due slots."""

    interval: float = INTERVAL_DEFAULT
    """Seconds between looks; a slot is enqueued at most this late (plus one statement)."""

    def validate(self) -> None:
        if not self.interval > 0:
            raise ConfigError("scheduler interval must be positive")


@dataclass
class Scheduler:
    """Enqueues the due slots of ``schedules``; safe to run in any number of processes."""

    schedules: Sequence[Schedule]
    dsn: str
    schema: str = "tenure"
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    enqueued: int = 0
    skipped: int = 0
    on_enqueue: Any = None
    """Optional ``callback(schedule, slot, job_id)`` (metrics)."""
    _conn: Connection | None = None

    def __post_init__(self) -> None:
        self.config.validate()
        names = [s.name for s in self.schedules]
        if len(set(names)) != len(names):
            raise ConfigError("periodic job names must be unique")
        for s in self.schedules:
            s.validate()

    def _repo(self) -> ScheduleStore:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.dsn, application_name="tenure-scheduler")
        return Repository(self._conn, self.schema)

    def run_once(self, now: datetime | None = None) -> list[int]:
        """Enqueue every due slot (``now``: the database clock unless given); returns new job ids."""
        repo = self._repo()
        if now is None:
            now = repo.db_now()["now"]
        assert now is not None
        rows = repo.periodic_get([s.name for s in self.schedules])
        created: list[int] = []
        for s in self.schedules:
            row = rows.get(s.name)
            if row is None:
                repo.periodic_init(name=s.name, task=s.task, queue=s.queue, cron=s.cron, timezone=s.timezone,
                                   slot=now)
                continue
            slots, skipped = s.due(row["last_slot"], now)
            for i, slot in enumerate(slots):
                job_id = repo.periodic_enqueue_slot(
                    name=s.name, task=s.task, queue=s.queue, cron=s.cron, timezone=s.timezone, slot=slot,
                    payload=s.payload, idempotency_key=s.slot_key(slot), skipped=skipped if i == 0 else 0,
                    max_attempts=s.max_attempts, priority=s.priority)
                if job_id is None:
                    continue  # another scheduler enqueued it (or the schedule moved past it)
                created.append(job_id)
                self.enqueued += 1
                if i == 0 and skipped:
                    self.skipped += skipped
                    log.warning("periodic %s: skipped %d missed slot(s) (catch_up=%d)", s.name, skipped,
                                s.catch_up)
                if self.on_enqueue is not None:
                    self.on_enqueue(s, slot, job_id, skipped if i == 0 else 0)
        return created

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.run_once()
            except psycopg.Error as exc:
                log.warning("scheduler: %s", first_line(exc))
                if self._conn is not None:
                    self._conn.close()
            stop.wait(self.config.interval)
        self.close()
