"""`tenure enqueue`: add one job from flags, or many from a JSON-lines file (all or nothing).

Both paths build :class:`~tenure.core.repository.JobSpec` values and run the one validator every
enqueue path shares (:meth:`JobSpec.validate`, also behind ``tenure.enqueue``); bad input exits 2
with one line naming the flag or the file line, before anything is written. A file is checked
whole before the first insert, and inserted in one transaction.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tenure.cli.common import command, duration, open_repo, positive_int
from tenure.core.backoff import MAX_ATTEMPTS_DEFAULT
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, EnqueueStore, JobSpec, iter_batches
from tenure.core.repository.specs import check_rate_limits_known
from tenure.core.unique import ON_CONFLICT_DEFAULT, ON_CONFLICT_MODES, UNIQUE_STATES_DEFAULT, Unique, parse_unique_by

ORDER = 20
FILE_FIELDS = ("task", "payload", "queue", "max_attempts", "delay", "idempotency_key", "priority", "flow_key",
               "rate_limit", "unique_by", "unique_period", "unique_states", "unique_on_conflict")
INSERT_BATCH = 5000


def register(sub: Any) -> None:
    p = command(sub, "enqueue", "add a job (prints its id)")
    p.add_argument("task", nargs="?")
    p.add_argument("--payload", default="{}")
    p.add_argument("--queue", default="default")
    p.add_argument("--idempotency-key", default=None)
    p.add_argument("--delay", type=duration, default=0.0)
    p.add_argument("--max-attempts", type=positive_int, default=MAX_ATTEMPTS_DEFAULT)
    p.add_argument("--priority", type=int, default=PRIORITY_DEFAULT,
                   help=f"integer in [{PRIORITY_MIN}, {PRIORITY_MAX}], default {PRIORITY_DEFAULT}; higher runs first")
    p.add_argument("--flow-key", default=None,
                   help="what flow control counts by, e.g. tenant:acme (at most 200 bytes; docs/flow.md)")
    p.add_argument("--rate-limit", default=None, metavar="NAME[:UNITS]",
                   help="a rate limit (tenure flow rate) the claim takes UNITS tokens of, 1 when omitted (docs/flow.md)")
    p.add_argument("--unique-by", default=None, metavar="FIELD[,FIELD]",
                   help="at most one job per task and these payload fields' values (docs/unique.md)")
    p.add_argument("--unique-period", default=None, metavar="S",
                   help="with --unique-by: the key holds within one period of S seconds (e.g. 300, 5m; "
                        "whole seconds); the debounce quiet time")
    p.add_argument("--unique-states", default=None, metavar="STATE[,STATE]",
                   help=f"with --unique-by: the states the key covers, pending and running always, "
                        f"failed, cancelled optional (default {','.join(UNIQUE_STATES_DEFAULT)})")
    p.add_argument("--unique-on-conflict", default=None, choices=ON_CONFLICT_MODES,
                   help=f"with --unique-by: skip returns the existing job, replace puts this payload in a pending "
                        f"one, debounce also moves its start a period on (default {ON_CONFLICT_DEFAULT})")
    p.add_argument("--from-file", default=None,
                   help="JSON lines: {task, payload, queue, idempotency_key, max_attempts, delay, priority, flow_key, "
                        "rate_limit, unique_by, unique_period, unique_states, unique_on_conflict}; "
                        "the flags give "
                        "the defaults; one bad line refuses the whole file")
    p.set_defaults(func=cmd_enqueue)


def unique_from(by: Any, period: Any, states: Any, on_conflict: Any) -> Unique | None:
    """The unique declaration of flags or a file line (``by`` a list or ``"F1,F2"``, ``period``
    seconds or a duration, ``states`` a list or ``"S1,S2"``); None without ``by``. JobSpecError
    for bad values, and for a unique option without ``by``."""
    if by is None:
        given = [name for name, v in (("period", period), ("states", states), ("on_conflict", on_conflict))
                 if v is not None]
        if given:
            raise JobSpecError(f"unique {given[0]} needs unique by (--unique-by FIELD[,FIELD])")
        return None
    fields = parse_unique_by(by) if isinstance(by, str) else by
    if isinstance(period, str):
        try:
            period = duration(period)
        except argparse.ArgumentTypeError as exc:
            raise JobSpecError(f"unique period: {exc}") from None
    if isinstance(states, str):
        states = [s.strip() for s in states.split(",")]
    return Unique(by=fields, period=period, states=UNIQUE_STATES_DEFAULT if states is None else states,
                  on_conflict=ON_CONFLICT_DEFAULT if on_conflict is None else on_conflict)


def _flag_unique(args: argparse.Namespace) -> Unique | None:
    return unique_from(args.unique_by, args.unique_period, args.unique_states, args.unique_on_conflict)


def spec_from_line(item: Any, defaults: argparse.Namespace) -> JobSpec:
    """One file line (already parsed JSON) as a validated JobSpec; JobSpecError says what is wrong."""
    if not isinstance(item, dict):
        raise JobSpecError(f"each line must be a JSON object, got {type(item).__name__}")
    unknown = sorted(set(item) - set(FILE_FIELDS))
    if unknown:
        raise JobSpecError(f"unknown field {unknown[0]!r} (fields: {', '.join(FILE_FIELDS)})")
    delay = item.get("delay", defaults.delay)
    if isinstance(delay, str):
        try:
            delay = duration(delay)
        except argparse.ArgumentTypeError as exc:
            raise JobSpecError(f"delay: {exc}") from None
    task = item.get("task")
    if task is None:
        raise JobSpecError("the task field is required")
    spec = JobSpec(task=task, payload=item.get("payload", {}), queue=item.get("queue", defaults.queue),
                   max_attempts=item.get("max_attempts", defaults.max_attempts), delay=delay,
                   idempotency_key=item.get("idempotency_key"), priority=item.get("priority", defaults.priority),
                   flow_key=item.get("flow_key", defaults.flow_key),
                   rate_limit=item.get("rate_limit", defaults.rate_limit),
                   unique=unique_from(*(item.get(f"unique_{k}", getattr(defaults, f"unique_{k}"))
                                        for k in ("by", "period", "states", "on_conflict"))))
    spec.validate()
    return spec


def read_job_file(path: str, defaults: argparse.Namespace) -> list[tuple[int, JobSpec]]:
    """Every job of a JSON-lines file with its line number, validated; the first bad line raises
    with ``path:line:``."""
    specs = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    specs.append((lineno, spec_from_line(json.loads(line), defaults)))
                except json.JSONDecodeError as exc:
                    raise JobSpecError(f"{path}:{lineno}: not valid JSON: {exc}") from None
                except JobSpecError as exc:
                    raise JobSpecError(f"{path}:{lineno}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read --from-file {path}: {exc}") from None
    return specs


def _check_rate_limits(repo: EnqueueStore, path: str, lines: list[tuple[int, JobSpec]]) -> None:
    """The file's first line naming an unknown rate limit, or more units than its burst, as a
    JobSpecError with ``path:line:`` (the insert would refuse it too, without the line)."""
    rated = [(lineno, rate) for lineno, spec in lines if (rate := spec.rate) is not None]
    if not rated:
        return
    bursts = repo.enqueue_rate_limits(name for _, (name, _) in rated)
    for lineno, rate in rated:
        try:
            check_rate_limits_known([rate], bursts)
        except JobSpecError as exc:
            raise JobSpecError(f"{path}:{lineno}: {exc}") from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    if args.from_file is not None:
        if args.task is not None:
            raise ConfigError("give a TASK or --from-file, not both")
        lines = read_job_file(args.from_file, args)
        specs = [spec for _, spec in lines]
        conn, repository = open_repo(args)
        repo: EnqueueStore = repository
        with conn, conn.transaction():  # all or nothing: one transaction for every batch
            _check_rate_limits(repo, args.from_file, lines)
            inserted = sum(repo.enqueue_many(batch) for batch in iter_batches(specs, INSERT_BATCH))
        print(f"enqueued {inserted} of {len(specs)} jobs ({len(specs) - inserted} duplicates skipped or replaced)")
        return 0
    if args.task is None:
        raise ConfigError("give a TASK or --from-file")
    try:
        payload = json.loads(args.payload)
    except (json.JSONDecodeError, TypeError) as exc:  # TypeError: argparse turns `--payload=--` into a list
        raise ConfigError(f"--payload is not valid JSON: {exc}") from None
    unique = _flag_unique(args)
    JobSpec(args.task, payload, args.queue, args.max_attempts, args.delay, args.idempotency_key,
            args.priority, args.flow_key, args.rate_limit, unique).validate()
    conn, repository = open_repo(args)
    store: EnqueueStore = repository
    with conn:
        result = store.enqueue(args.task, payload, queue=args.queue, idempotency_key=args.idempotency_key,
                              delay=args.delay, max_attempts=args.max_attempts, priority=args.priority,
                              flow_key=args.flow_key, rate_limit=args.rate_limit, unique=unique)
    if result.created:
        print(result.id)
    elif result.replaced:
        print(f"{result.id} (existing job with this unique key, payload replaced)")
    else:
        print(f"{result.id} (existing job with this {'unique' if unique else 'idempotency'} key)")
    return 0
