"""Job and queue control (issue 14): cancel, retry, list, pause/resume and the global
per-queue running limit, as a Python API shared by the CLI (`tenure jobs …`, `tenure queues …`),
the operator and users' code.

Every change is audited with who asked. Commands are all-or-nothing: :func:`cancel` and
:func:`retry` with ``strict=True`` validate every id first (unknown id, wrong state) and change
nothing when one fails, raising :class:`~tenure.core.errors.ConfigError` (the CLI's exit 2).
:func:`bulk_matching` cancels or retries every job matching a filter or in a list of ids
(`tenure ui`), in batches, through the same statements; :func:`replay_matching` is the paced DLQ
replay of `tenure dlq replay` and of the UI.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from tenure.core.errors import ConfigError, UniqueKeyHeldError
from tenure.core.repository import BrowseStore, JobFilter, ReadStore, Repository
from tenure.core.repository.specs import check_flow_key

CANCELLABLE = ("waiting", "pending", "running")
RETRYABLE = ("failed", "cancelled")
JOB_STATUSES = ("waiting", "pending", "running", "completed", "failed", "cancelled")
QUEUE_NAME_MAX = 200
BULK_ACTIONS = {"cancel": CANCELLABLE, "retry": RETRYABLE}
"""What a bulk action applies to: the matching jobs in these states (the others are left alone)."""
BULK_MAX_DEFAULT = 100_000
"""A bulk action on more matching jobs than this is refused: narrow the filter."""
BULK_BATCH = 1000
"""Jobs changed per transaction by a bulk action."""
REPLAY_BATCH_MAX = 10
"""Dead letters replayed per transaction at most (fewer at a low rate: ``rate / 5``)."""


def default_requester(source: str = "api") -> str:
    """``source:user@host``, recorded in the audit trail as who asked."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{source}:{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class CancelReport:
    """What one cancel call did, per id."""

    cancelled: list[int] = field(default_factory=list)
    """Waiting (workflow steps) and pending jobs now ``cancelled``."""
    revoked: list[int] = field(default_factory=list)
    """Running jobs now ``cancelled``: their token is revoked; the owner learns at its next heartbeat."""
    skipped: dict[int, str] = field(default_factory=dict)
    """Ids left alone, with their status (``completed``, ``failed``, ``cancelled``) or ``unknown``."""


def _ids(ids: Sequence[int]) -> list[int]:
    out = []
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 1:
            raise ConfigError(f"invalid job id {i!r}")
        out.append(i)
    if not out:
        raise ConfigError("give at least one job id")
    return sorted(set(out))


def _check_states(repo: ReadStore, ids: list[int], allowed: tuple[str, ...], verb: str) -> dict[int, Any]:
    found = repo.job_statuses(ids)
    for i in ids:
        if i not in found:
            raise ConfigError(f"no job {i}: nothing was {verb}")
        status = found[i]["status"]
        if status not in allowed:
            raise ConfigError(f"job {i} is {status}, not {' or '.join(allowed)}: nothing was {verb}")
    return found


def cancel(conn: psycopg.Connection[Any], ids: Sequence[int], *, schema: str = "tenure",
           requested_by: str | None = None, strict: bool = False) -> CancelReport:
    """Cancel jobs. A waiting or pending job becomes ``cancelled`` at once; a running one too, by revoking
    its token in one compare-and-set: its owner's next heartbeat sets ``ctx.lease_lost`` (an
    async handler is cancelled) and any later write of that attempt is rejected and audited.
    Completed, failed and already cancelled jobs are left alone (``skipped``); with ``strict``
    any such id, or an unknown one, raises ConfigError and nothing changes."""
    wanted = _ids(ids)
    repo = Repository(conn, schema)
    who = requested_by or default_requester()
    with conn.transaction():
        if strict:
            _check_states(repo, wanted, CANCELLABLE, "cancelled")
        rows = repo.cancel(wanted, who)
        done = {int(r["id"]): r for r in rows}
        skipped: dict[int, str] = {}
        if len(done) < len(wanted):
            statuses = repo.job_statuses([i for i in wanted if i not in done])
            skipped = {i: statuses[i]["status"] if i in statuses else "unknown" for i in wanted if i not in done}
            if strict:  # a job changed state between the check and the cancel
                raise ConfigError(f"job {min(skipped)} is {skipped[min(skipped)]}: nothing was cancelled")
    at_once = ("waiting", "pending")
    return CancelReport(cancelled=sorted(i for i, r in done.items() if r["previous_status"] in at_once),
                        revoked=sorted(i for i, r in done.items() if r["previous_status"] == "running"),
                        skipped=skipped)


def retry(conn: psycopg.Connection[Any], ids: Sequence[int], *, schema: str = "tenure",
          requested_by: str | None = None,
          validate: Callable[[dict[str, Any]], str | None] | None = None) -> list[int]:
    """Put failed (dead-lettered) or cancelled jobs back as pending with a fresh attempt budget,
    validated like a DLQ replay: every id must exist and be failed or cancelled, and
    ``validate(row)`` (e.g. the task's payload validator) must return None for each; otherwise
    ConfigError and nothing changes. A job whose unique key another live job holds (or another
    of ``ids`` takes) raises :class:`UniqueKeyHeldError`, naming both, and nothing changes."""
    wanted = _ids(ids)
    repo = Repository(conn, schema)
    with conn.transaction():
        found = _check_states(repo, wanted, RETRYABLE, "retried")
        if validate is not None:
            for i in wanted:
                why = validate(found[i])
                if why is not None:
                    raise ConfigError(f"job {i} fails validation ({why}): nothing was retried")
        moved, held = repo.retry_jobs_held(wanted, requested_by or default_requester())
        if held:
            raise UniqueKeyHeldError(held_message(held, "retried"))
        if len(moved) != len(wanted):
            raise ConfigError("a job changed state during the retry: nothing was retried")
    return moved


def held_message(held: dict[int, str], verb: str) -> str:
    """One line for jobs left alone because their unique key is held: the first, and how many more."""
    first = min(held)
    more = f" (and {len(held) - 1} more job(s) whose key is held)" if len(held) > 1 else ""
    return f"job {first} not {verb}: its {held[first]}{more}; cancel or finish the holder first"


def list_jobs(conn: psycopg.Connection[Any], *, schema: str = "tenure", queue: str | None = None,
              status: str | None = None, task: str | None = None, created_since: float | None = None,
              failed_since: float | None = None, cursor: int | None = None,
              limit: int = 100, flow_key: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """One page of jobs, newest first, and the cursor of the next page (None on the last);
    ``flow_key`` an exact match (an empty or over-long key is a JobSpecError)."""
    if status is not None and status not in JOB_STATUSES:
        raise ConfigError(f"unknown status {status!r} (one of {', '.join(JOB_STATUSES)})")
    if limit < 1:
        raise ConfigError("limit must be >= 1")
    if flow_key is not None:
        check_flow_key(flow_key)
    rows = Repository(conn, schema).job_list(queue=queue, status=status, task=task, created_since=created_since,
                                             failed_since=failed_since, before_id=cursor, limit=limit + 1,
                                             flow_key=flow_key)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (int(rows[-1]["id"]) if more and rows else None)


def check_queue_name(name: str) -> str:
    if not name or not name.strip() or len(name) > QUEUE_NAME_MAX or name != name.strip():
        raise ConfigError(f"invalid queue name {name!r}")
    return name


def set_paused(conn: psycopg.Connection[Any], queue: str, paused: bool, *, schema: str = "tenure",
               requested_by: str | None = None) -> dict[str, Any]:
    """Pause or resume a queue: workers stop claiming from a paused queue at their next claim
    (within one poll interval or notification); running jobs finish. Idempotent; the row
    returned has ``was_paused``."""
    row = Repository(conn, schema).queue_control_set(check_queue_name(queue), paused=paused,
                                                     requested_by=requested_by or default_requester())
    return dict(row)


def set_max_running(conn: psycopg.Connection[Any], queue: str, max_running: int, *, schema: str = "tenure",
                    requested_by: str | None = None) -> dict[str, Any]:
    """Cap the jobs running in ``queue`` across all workers and pods (enforced in the claim
    statement); 0 removes the cap. Running jobs above a lowered cap finish; no new claims
    until the count is below it."""
    if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 0:
        raise ConfigError(f"max running must be an integer >= 0 (0 removes the limit), got {max_running!r}")
    row = Repository(conn, schema).queue_control_set(
        check_queue_name(queue), max_running=max_running or None, set_limit=True,
        requested_by=requested_by or default_requester())
    return dict(row)


def list_queues(conn: psycopg.Connection[Any], *, schema: str = "tenure") -> list[dict[str, Any]]:
    """Every queue with jobs, live workers or a control row: paused, max_running, ready, running."""
    return [dict(r) for r in Repository(conn, schema).queue_control_list()]


class SetChangedError(ConfigError):
    """The jobs matching a bulk action's filter are not the set the caller confirmed."""


@dataclass(frozen=True)
class BulkReport:
    """What a bulk action matched and changed."""

    matched: int
    """Jobs that matched the filter and were in a state the action applies to."""
    changed: int
    """Jobs the action changed (fewer than matched when some changed state meanwhile)."""
    newest_id: int | None
    """The newest job id the set was bounded by: pass it back to act on the same set (None for
    a set given by ids)."""
    skipped: dict[int, str] = field(default_factory=dict)
    """Jobs a retry left alone with why: another live job holds their unique key (or a lower id
    of the set takes it), ``"unique key held by job 9 (pending)"``."""


def bulk_matching(conn: psycopg.Connection[Any], action: str, flt: JobFilter, *, schema: str = "tenure",
                  requested_by: str | None = None, dry_run: bool = False, expected: int | None = None,
                  newest_id: int | None = None, limit: int = BULK_MAX_DEFAULT,
                  ids: Sequence[int] | None = None) -> BulkReport:
    """Cancel or retry every job that matches ``flt`` (and is cancellable, or retryable), in
    batches of :data:`BULK_BATCH`, through the same statements as :func:`cancel` and
    :func:`retry`, audited with ``requested_by``.

    The set is the matching jobs with ids up to ``newest_id`` (default: the newest job now), so
    jobs enqueued after a preview never join it; given ``ids`` instead (the UI's selection),
    those of them in a state the action applies to (``flt`` and ``newest_id`` unused). With
    ``expected`` (the count a preview showed) a different count raises :class:`SetChangedError`
    and changes nothing. ``dry_run`` counts only. More than ``limit`` matches raise ConfigError
    and change nothing. A retry leaves out the jobs whose unique key is held and reports them in
    ``skipped``; the others move."""
    if action not in BULK_ACTIONS:
        raise ConfigError(f"unknown action {action!r} (one of {', '.join(BULK_ACTIONS)})")
    repo = Repository(conn, schema)
    bound: int | None
    if ids is not None:
        bound = None
        found = repo.job_statuses(_ids(ids))
        ids = sorted(i for i, row in found.items() if row["status"] in BULK_ACTIONS[action])
        if len(ids) > limit:
            raise ConfigError(f"more than {limit} jobs selected: select fewer (nothing was changed)")
        if expected is not None and expected != len(ids):
            raise SetChangedError(f"{len(ids)} of the selected jobs can be {action}ed now, not the {expected} "
                                  "confirmed: nothing was changed")
    else:
        bound = repo.job_newest_id() if newest_id is None else newest_id
        ids = matching_ids(repo, flt, BULK_ACTIONS[action], bound=bound, limit=limit)
        if expected is not None and expected != len(ids):
            raise SetChangedError(f"{len(ids)} jobs match now, not the {expected} confirmed: nothing was changed; "
                                  "review the set again")
    if dry_run:
        return BulkReport(len(ids), 0, bound)
    who = requested_by or default_requester()
    changed = 0
    skipped: dict[int, str] = {}
    for start in range(0, len(ids), BULK_BATCH):
        chunk = ids[start:start + BULK_BATCH]
        with conn.transaction():
            if action == "cancel":
                changed += len(repo.cancel(chunk, who))
            else:
                moved, held = repo.retry_jobs_held(chunk, who)
                changed += len(moved)
                skipped.update(held)
    return BulkReport(len(ids), changed, bound, skipped)


def matching_ids(repo: BrowseStore, flt: JobFilter, statuses: Sequence[str], *, bound: int, limit: int) -> list[int]:
    """Ids (oldest first, at most ``bound``) of the jobs in ``statuses`` matching ``flt``;
    ConfigError when more than ``limit`` match."""
    ids: list[int] = []
    after = 0
    while True:
        page = repo.job_browse_ids(flt, statuses, after_id=after, limit=BULK_BATCH)
        ids.extend(i for i in page if i <= bound)
        if len(ids) > limit:
            raise ConfigError(f"more than {limit} jobs match: narrow the filter (nothing was changed)")
        if len(page) < BULK_BATCH or page[-1] > bound:
            return ids
        after = page[-1]


@dataclass(frozen=True)
class DlqFilter:
    """The dead letters `tenure dlq replay` walks: oldest first, by queue and last error code
    (None: any). Unlike a :class:`JobFilter`'s set, which is replayed whole or refused, a walk
    stops once ``limit`` jobs are replayed (those skipped, invalid or key held, do not count) and leaves
    the rest in the DLQ for the next run."""

    queue: str | None = None
    error_code: str | None = None


@dataclass(frozen=True)
class ReplayReport:
    matched: int
    """Dead-lettered jobs that matched (a :class:`DlqFilter` walk: those it reached)."""
    replayed: list[int]
    """Moved back to pending (with ``dry_run``: would be)."""
    skipped: list[tuple[int, str]]
    """Left in the DLQ, with why: invalid, or another live job holds the unique key
    (``"unique key held by job 9 (pending)"``, see :func:`held_only`)."""


ReplayProgress = Callable[[list[int], list[tuple[int, str]]], None]
"""``on_batch(replayed, skipped)``: called after each batch that found jobs, before the pause."""


def replay_matching(conn: psycopg.Connection[Any], flt: JobFilter | DlqFilter, *, schema: str = "tenure",
                    rate: float, dry_run: bool = False, requested_by: str | None = None,
                    validate: Callable[[dict[str, Any]], str | None] | None = None,
                    limit: int = BULK_MAX_DEFAULT, ids: Sequence[int] | None = None,
                    on_batch: ReplayProgress | None = None) -> ReplayReport:
    """Replay dead-lettered jobs the way `tenure dlq replay` does: small batches, at most
    ``rate`` jobs per second over the whole set, only jobs still in the DLQ move (safe to
    interrupt and repeat), each audited as replayed by ``requested_by``; ``validate(row)``
    returns None for a job that may run, else why not (it stays, marked invalid).
    ``dry_run`` walks the same batches with the same validation and writes nothing.

    Which jobs: with a :class:`JobFilter` (the UI), the dead letters matching it (more than
    ``limit`` raise ConfigError and change nothing), or, given ``ids``, those of them still
    dead-lettered. With a :class:`DlqFilter` (the CLI), the DLQ's own walk, restricted to
    ``ids`` when given, until ``limit`` are replayed."""
    if not rate > 0:
        raise ConfigError("rate must be positive")
    repo = Repository(conn, schema)
    who = requested_by or default_requester()
    batch = max(1, min(REPLAY_BATCH_MAX, int(rate // 5)))
    pace = _Pace(rate, dry_run)
    check = validate or (lambda row: None)
    reason = f"replayed by {who} at {rate:g}/s"
    replayed: list[int] = []
    skipped: list[tuple[int, str]] = []
    if isinstance(flt, DlqFilter):
        after_id = 0
        while len(replayed) < limit:
            done, bad, after_id = repo.dlq_replay_batch(
                ids=ids, queue=flt.queue, error_code=flt.error_code, after_id=after_id,
                batch=min(batch, limit - len(replayed)), validate=check, reason=reason, dry_run=dry_run)
            if not done and not bad:
                break
            replayed.extend(done)
            skipped.extend(bad)
            if on_batch is not None:
                on_batch(done, bad)
            pace.wait(len(replayed), more=len(replayed) < limit)
        return ReplayReport(len(replayed) + len(skipped), replayed, skipped)
    if ids is not None:
        found = repo.job_statuses(sorted(set(ids)))
        ids = [i for i, row in found.items() if row["status"] == "failed"]
    else:
        ids = matching_ids(repo, flt, ("failed",), bound=repo.job_newest_id(), limit=limit)
    for start in range(0, len(ids), batch):
        done, bad, _ = repo.dlq_replay_batch(ids=ids[start:start + batch], queue=None, error_code=None, after_id=0,
                                             batch=batch, validate=check, reason=reason, dry_run=dry_run)
        replayed.extend(done)
        skipped.extend(bad)
        if on_batch is not None and (done or bad):
            on_batch(done, bad)
        pace.wait(len(replayed), more=start + batch < len(ids))
    return ReplayReport(len(ids), replayed, skipped)


def held_only(report: ReplayReport) -> bool:
    """Nothing was replayed and every job left alone was left because its unique key is held."""
    return not report.replayed and bool(report.skipped) and all(
        why.startswith(("unique key held by job", "unique key taken by")) for _, why in report.skipped)


class _Pace:
    """Sleeps so that the cumulative replay rate never exceeds ``rate`` (not in a dry run)."""

    def __init__(self, rate: float, dry_run: bool) -> None:
        self.rate, self.dry_run, self.started = rate, dry_run, time.monotonic()

    def wait(self, replayed: int, *, more: bool) -> None:
        pause = replayed / self.rate - (time.monotonic() - self.started)
        if not self.dry_run and more and pause > 0:
            time.sleep(pause)
