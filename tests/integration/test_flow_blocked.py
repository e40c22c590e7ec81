"""Blocked jobs by reason, and the oldest job nothing holds back, against a real PostgreSQL
(issue 38, items 6 and 8): `queue_stats` (so `tenure stats`, the exporter, the UI and the
operator's scaler) counts a runnable job as blocked by concurrency (its key at its running
limit), backpressure (its rate limit's bucket paused) or rate (the bucket short of its units),
each job once, and `ready` is what a claim could take now.

Rate limits, buckets and running jobs are written with plain SQL here, so these counts are tested
apart from the claim and from the rate-limit API."""

from __future__ import annotations

from typing import Any

import pytest

from tenure.core.db import Connection
from tenure.core.repository import Repository
from tenure.core.stats import QueueStats

pytestmark = pytest.mark.integration


def _sql(conn: Connection, schema: str, sql: str, params: dict[str, Any] | None = None) -> None:
    conn.execute(sql.replace("{s}", f'"{schema}"'), params or {})


def _job(repo: Repository, queue: str, key: str | None = None, rate: str | None = None, units: int = 1) -> int:
    """One job, enqueued alone (so jobs are in available_at order), naming a rate limit by SQL."""
    job = repo.enqueue("t", queue=queue, flow_key=key).id
    if rate is not None:
        _sql(repo.conn, repo.schema, "UPDATE {s}.jobs SET rate_limit = %(r)s, rate_units = %(u)s WHERE id = %(id)s",
             {"r": rate, "u": units, "id": job})
    return job


def _run(repo: Repository, *ids: int) -> None:
    _sql(repo.conn, repo.schema, "UPDATE {s}.jobs SET status = 'running', started_at = now(), locked_by = 'w', "
         "lock_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour' WHERE id = ANY(%(ids)s)",
         {"ids": list(ids)})


def _limit(conn: Connection, schema: str, name: str, per_second: float, burst: int, per_key: bool = False) -> None:
    _sql(conn, schema, "INSERT INTO {s}.rate_limits (name, per_second, burst, per_key) VALUES (%(n)s, %(p)s, %(b)s, %(k)s)",
         {"n": name, "p": per_second, "b": burst, "k": per_key})


def _bucket(conn: Connection, schema: str, name: str, key: str = "", *, tokens: float, ago: float = 0.0,
            paused_for: float | None = None) -> None:
    """A bucket holding ``tokens`` refilled ``ago`` seconds ago, paused ``paused_for`` seconds more."""
    _sql(conn, schema, "INSERT INTO {s}.rate_buckets (limit_name, flow_key, tokens, refilled_at, paused_until) "
         "VALUES (%(n)s, %(k)s, %(t)s, now() - make_interval(secs => %(a)s), "
         "now() + make_interval(secs => %(p)s::float8)) "
         "ON CONFLICT (limit_name, flow_key) DO UPDATE SET tokens = excluded.tokens, "
         "refilled_at = excluded.refilled_at, paused_until = excluded.paused_until",
         {"n": name, "k": key, "t": tokens, "a": ago, "p": paused_for})


def _stats(repo: Repository, queue: str) -> QueueStats:
    [s] = repo.queue_stats(queue)
    return s


def _blocked(s: QueueStats) -> tuple[int, int, int, int, int]:
    return s.ready, s.blocked, s.blocked_concurrency, s.blocked_backpressure, s.blocked_rate


def test_each_runnable_job_is_blocked_once_by_the_first_reason(repo: Repository, conn: Connection,
                                                               schema: str) -> None:
    _limit(conn, schema, "api", 0.001, 5)
    _limit(conn, schema, "hold", 10, 10)
    _limit(conn, schema, "tenant", 0.001, 3, per_key=True)
    _bucket(conn, schema, "api", tokens=0.5)          # short of 1 unit for ~8 minutes
    _bucket(conn, schema, "hold", tokens=10, paused_for=3600)   # full, but paused by a handler
    _bucket(conn, schema, "tenant", "b", tokens=0)    # key b's bucket empty; key c has none: full
    repo.flow_key_running_set("mix", "a", 1, requested_by="test")
    repo.flow_key_running_set("mix", "e", 2, requested_by="test")
    a = [_job(repo, "mix", "a") for _ in range(3)] + [_job(repo, "mix", "a", "api")]
    b1 = _job(repo, "mix", "b", "tenant")
    c1 = _job(repo, "mix", "c", "tenant", 2)          # 2 of a full bucket of 3: runnable
    _job(repo, "mix", "c", "tenant", 5)               # more than the burst: never runnable
    u1, _u2 = _job(repo, "mix", None, "api"), _job(repo, "mix", None, "hold")
    _job(repo, "mix", None, "gone")                   # a deleted limit limits nothing
    _job(repo, "mix", None)
    e = [_job(repo, "mix", "e", "hold") for _ in range(3)]
    _run(repo, a[0], e[0])
    s = _stats(repo, "mix")
    # a: 3 ready beyond a room of 0 (its api job too: concurrency first). b1, c's 5 units, u1:
    # rate. u2: backpressure. e: room 1, 2 ready both paused: 1 concurrency, 1 backpressure.
    assert _blocked(s) == (3, 9, 4, 2, 3)
    assert (s.keys_at_limit, s.running) == (1, 2)
    assert s.oldest_unblocked_job_id == c1  # a's are held, b1 is short: c1 is the first a claim can take
    assert s.oldest_unblocked_wait_seconds is not None and s.oldest_unblocked_wait_seconds > 0

    _bucket(conn, schema, "api", tokens=0, ago=10_000)   # refilled by the clock since: full again
    _bucket(conn, schema, "hold", tokens=10, paused_for=-1)  # the pause is over
    s = _stats(repo, "mix")
    assert _blocked(s) == (6, 6, 4, 0, 2)  # u1, u2, one of e runnable; e's other beyond its room
    assert s.oldest_unblocked_job_id == c1

    _sql(conn, schema, "DELETE FROM {s}.flow_keys")  # no running limit left; rate limits still apply
    _sql(conn, schema, "UPDATE {s}.jobs SET available_at = available_at - interval '1 hour' WHERE id = %(id)s",
         {"id": u1})
    s = _stats(repo, "mix")
    assert _blocked(s) == (10, 2, 0, 0, 2) and s.keys_at_limit == 0
    assert s.oldest_unblocked_job_id == u1  # the longest waiting
    assert s.oldest_unblocked_wait_seconds is not None and s.oldest_unblocked_wait_seconds >= 3600


def test_per_key_buckets_and_refill_by_the_database_clock(repo: Repository, conn: Connection, schema: str) -> None:
    _limit(conn, schema, "per", 2, 4, per_key=True)
    _bucket(conn, schema, "per", "k1", tokens=0, ago=1)       # 2 tokens refilled: one job of 2 units fits
    _bucket(conn, schema, "per", "k2", tokens=0)              # empty
    _bucket(conn, schema, "per", "", tokens=4, paused_for=60)  # jobs without a key share '': paused
    for key in ("k1", "k2", None):
        _job(repo, "q", key, "per", 2)
    s = _stats(repo, "q")
    assert _blocked(s) == (1, 2, 0, 1, 1)
    # A limit that is not per key has one bucket, '', whatever the job's key.
    _limit(conn, schema, "one", 1, 1)
    _bucket(conn, schema, "one", tokens=0)
    _bucket(conn, schema, "one", "k1", tokens=1)  # ignored: not a per-key limit
    _job(repo, "q", "k1", "one")
    assert _blocked(_stats(repo, "q")) == (1, 3, 0, 1, 2)


def test_flow_queues_alone_report_the_oldest_unblocked_job(repo: Repository, conn: Connection, schema: str) -> None:
    plain = _job(repo, "plain")
    keyed = _job(repo, "keyed", "k")
    _job(repo, "keyed")
    _limit(conn, schema, "api", 1, 1)
    rated = _job(repo, "rated", None, "api")
    _job(repo, "paused", "k")
    repo.queue_control_set("paused", requested_by="test", paused=True)
    _job(repo, "scheduled-only", "k")
    _sql(conn, schema, "UPDATE {s}.jobs SET available_at = now() + interval '1 hour' WHERE queue_name = 'scheduled-only'")
    stats = {s.queue: s for s in repo.queue_stats()}
    assert stats["plain"].oldest_unblocked_wait_seconds is None and stats["plain"].oldest_unblocked_job_id is None
    assert (stats["keyed"].oldest_unblocked_job_id, stats["rated"].oldest_unblocked_job_id) == (keyed, rated)
    assert stats["paused"].oldest_unblocked_wait_seconds == 0 and stats["paused"].oldest_unblocked_job_id is None
    assert stats["scheduled-only"].oldest_unblocked_wait_seconds is None  # nothing ready: not read
    assert all(s.blocked == 0 for s in stats.values()) and stats["plain"].ready == 1 and plain


def test_the_scaler_reads_ready_without_any_blocked_job(repo: Repository, conn: Connection, dsn: str,
                                                        schema: str) -> None:
    from tenure.operator.figures import fetch_figures

    _limit(conn, schema, "api", 0.001, 1)
    _bucket(conn, schema, "api", tokens=0)
    for _ in range(4):
        _job(repo, "work", None, "api")
    _job(repo, "work")
    figures = fetch_figures(dsn, schema, "work")
    assert figures.ready == 1


def test_the_oldest_unblocked_job_is_one_the_claim_would_not_pass_over(repo: Repository, conn: Connection,
                                                                      schema: str) -> None:
    _limit(conn, schema, "api", 0.001, 1)
    _bucket(conn, schema, "api", tokens=0)
    held = _job(repo, "hol", "k", "api")  # short of tokens
    _job(repo, "hol", "k")                # behind it in its key: the claim takes a key first in, first out
    _job(repo, "hol", None, "api")        # jobs without a key are one key: the same
    _job(repo, "hol", None)
    other = _job(repo, "hol", "other")
    s = _stats(repo, "hol")
    assert _blocked(s) == (3, 2, 0, 0, 2)  # the counts are per job: the two jobs behind are not blocked
    assert s.oldest_unblocked_job_id == other
    _bucket(conn, schema, "api", tokens=0, ago=10_000)
    assert _stats(repo, "hol").oldest_unblocked_job_id == held
