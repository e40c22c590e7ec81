"""The charts' rollup on a real PostgreSQL (issue 36 item 5, migration 0016): the 7-day and
24-hour series read from the rollup equal the ones read from the jobs (the same counts in the
same points, the wait percentiles within the histogram's precision), two reapers roll a period
up once, a period without a rollup is read from the jobs, and only closed periods are rolled up
(hours of the last 8 days, quarter hours of the last 25 hours)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from tenure.core.db import connect
from tenure.core.repository import Repository
from tenure.reaper.depth import ROLLUP_LAG, ROLLUP_PERIODS, DepthSampler
from tenure.ui.series import WINDOWS, read

pytestmark = pytest.mark.integration

WEEK, DAY = WINDOWS["7d"], WINDOWS["24h"]
HOUR = 3600
CLOSED = 8 * 24 - 3 + 25 * 4 - 3
"""At least the closed periods of 8 days of hours and 25 hours of quarter hours."""
WAITS = (0.0003, 0.002, 0.05, 0.4, 1.7, 9.0, 33.0, 120.0, 700.0, 5400.0)
"""Seconds from ready to start, one per decade or so (none on a bucket's edge)."""


def _crafted(repo: Repository, queue: str, times: list[tuple[float, float, float]]) -> list[int]:
    """One job completed the real way per ``(completed_ago, run, wait)`` (seconds), then given
    those timestamps in job_history."""
    ids = [repo.enqueue("work", {"i": i}, queue=queue).id for i in range(len(times))]
    claimed = repo.claim("w", [queue], len(ids), 30)
    assert all(repo.complete_many("w", [(j.id, j.lock_token) for j in claimed]).values())
    with repo.conn.cursor() as cur:
        cur.execute(
            f'UPDATE "{repo.schema}".job_history h SET completed_at = now() - make_interval(secs => t.c), '
            "started_at = now() - make_interval(secs => t.c + t.r), "
            "available_at = now() - make_interval(secs => t.c + t.r + t.w), "
            "created_at = now() - make_interval(secs => t.c + t.r + t.w) "
            "FROM unnest(%s::bigint[], %s::float8[], %s::float8[], %s::float8[]) AS t(id, c, r, w) WHERE h.id = t.id",
            (ids, [c for c, _, _ in times], [r for _, r, _ in times], [w for _, _, w in times]))
    return ids


def _failures(repo: Repository, queue: str, events: list[tuple[str, float]]) -> None:
    job = repo.enqueue("work", {}, queue=queue).id
    with repo.conn.cursor() as cur:
        for event, ago in events:
            cur.execute(f'INSERT INTO "{repo.schema}".job_events (job_id, queue_name, event, created_at) '
                        "VALUES (%s, %s, %s, now() - make_interval(secs => %s))", (job, queue, event, ago))


def _history(repo: Repository) -> dict[str, list[int]]:
    """Three days of completions in two queues: every wait, runs that cross hours, a job that
    completes in the current hour after starting two hours ago, and failures."""
    mail = _crafted(repo, "mail", [(i * 5400.0 + 7, 1.0 + (i % 3) * 1500, WAITS[i % len(WAITS)]) for i in range(40)])
    mail += _crafted(repo, "mail", [(20.0, 7200.0, 3.0)])
    images = _crafted(repo, "images", [(i * 20000.0 + 600, 30.0, WAITS[(i * 3) % len(WAITS)]) for i in range(12)])
    _failures(repo, "mail", [("retry_scheduled", 30), ("dead_lettered", 4000), ("reaped_to_dead_letter", 90000),
                             ("reaped_due_to_expired_lease", 90000), ("retry_scheduled", 200000)])
    _failures(repo, "images", [("retry_scheduled", 5000), ("dead_lettered", 5000)])
    return {"mail": mail, "images": images}


def _same(raw: dict[str, Any], rolled: dict[str, Any]) -> None:
    """The same points (matched by time: the window may have moved by a bucket between the two
    reads), wait percentiles within 6% plus 0.5 ms."""
    a, b = ({p["t"]: p for p in doc["points"]} for doc in (raw, rolled))
    assert len(a.keys() & b.keys()) >= raw["buckets"] - 1
    for t in a.keys() & b.keys():
        x, y = a[t], b[t]
        for key in ("completed", "failed_attempts", "dead_lettered", "wait_jobs", "ready", "running"):
            assert x[key] == y[key], (t, key, x, y)
        for key in ("wait_p50", "wait_p95"):
            if x[key] is None:
                assert y[key] is None, (t, key)
            else:
                assert abs(y[key] - x[key]) <= 0.06 * x[key] + 0.0005 + 1e-6, (t, key, x[key], y[key])
    assert raw["totals"] == rolled["totals"]


def _roll_up(repo: Repository) -> int:
    return DepthSampler().roll_up(repo, limit=1000, budget=120.0)


def _count(repo: Repository, doc: dict[str, Any]) -> int:
    row = repo.conn.execute(f'SELECT count(*) AS n FROM "{repo.schema}".all_jobs WHERE status = \'completed\' '
                            "AND completed_at >= %s AND completed_at < %s", (doc["from"], doc["to"])).fetchone()
    assert row is not None
    return int(row["n"])


def _hour_of(repo: Repository, job_id: int) -> datetime:
    """The hour the job completed in."""
    row = repo.conn.execute(f'SELECT date_bin(\'1 hour\', completed_at, timestamptz \'epoch\') AS h '
                            f'FROM "{repo.schema}".job_history WHERE id = %s', (job_id,)).fetchone()
    assert row is not None
    return row["h"]  # type: ignore[no-any-return]


def test_the_rolled_up_week_and_day_equal_those_read_from_the_jobs(repo: Repository) -> None:
    jobs = _history(repo)
    raw = {(w.name, q): read(repo, w, q) for w in (WEEK, DAY) for q in (None, "mail", "images")}
    assert raw["7d", None]["totals"] == {"completed": 53, "failed_attempts": 7, "dead_lettered": 3}
    assert sum(p["wait_jobs"] for p in raw["7d", None]["points"]) == 53
    assert raw["24h", None]["totals"]["completed"] == 16 + 1 + 5
    assert _roll_up(repo) >= CLOSED  # every closed period, empty ones too
    for window in (WEEK, DAY):
        doc = read(repo, window, None)
        assert len(repo.series_rolled_periods(doc["from"], doc["to"], window.bucket_seconds)) >= window.buckets - 3
    for (name, queue), before in raw.items():
        _same(before, read(repo, WINDOWS[name], queue))
    # A job pruned after its hour was rolled up is still counted: the rollup keeps what it saw.
    old = jobs["mail"][20]
    repo.conn.execute(f'DELETE FROM "{repo.schema}".job_history WHERE id = %s', (old,))
    after = read(repo, WEEK, None)
    assert after["totals"]["completed"] == 53 == _count(repo, after) + 1


def test_an_hour_not_rolled_up_is_read_from_the_jobs(repo: Repository) -> None:
    jobs = _history(repo)
    raw = read(repo, WEEK, None)
    _roll_up(repo)
    # Five hours lose their rollup (more runs than are read one by one: the nearest are merged).
    hours = {_hour_of(repo, jobs["mail"][i]) for i in (3, 9, 15, 21, 27)}
    with repo.conn.cursor() as cur:
        cur.execute(f'DELETE FROM "{repo.schema}".queue_series_rollups WHERE seconds = 3600 AND period = ANY(%s)',
                    (list(hours),))
    doc = read(repo, WEEK, None)
    assert not hours & set(repo.series_rolled_periods(doc["from"], doc["to"], HOUR))
    _same(raw, doc)
    by_t = {p["t"]: p for p in doc["points"]}
    assert all(by_t[h]["completed"] >= 1 for h in hours)
    assert len(hours) <= _roll_up(repo) <= len(hours) + 2  # the next cycles roll them up again (+: a period ended)
    _same(raw, read(repo, WEEK, None))


def test_two_reapers_roll_a_period_up_once(dsn: str, schema: str, repo: Repository) -> None:
    hour = _hour_of(repo, _history(repo)["mail"][2])  # about 3 hours ago: that job alone
    outcome: list[bool] = []
    with connect(dsn, autocommit=False) as first, connect(dsn) as second:
        assert Repository(first, schema).series_rollup_period(hour, HOUR, lag=ROLLUP_LAG)  # not committed yet
        other = threading.Thread(
            target=lambda: outcome.append(Repository(second, schema).series_rollup_period(hour, HOUR, lag=ROLLUP_LAG)))
        other.start()
        time.sleep(0.3)
        assert other.is_alive()  # waits on the first reaper's row for this period
        first.commit()
        other.join(10)
    assert outcome == [False]
    assert not repo.series_rollup_period(hour, HOUR, lag=ROLLUP_LAG)
    rows = repo.conn.execute(f'SELECT queue_name, completed FROM "{schema}".queue_series_periods '
                             "WHERE seconds = 3600 AND period = %s", (hour,)).fetchall()
    assert [(r["queue_name"], r["completed"]) for r in rows] == [("mail", 1)]
    a, b = DepthSampler(), DepthSampler()
    assert a.roll_up(repo, limit=1000, budget=120.0) >= CLOSED - 1
    assert b.roll_up(repo, limit=1000, budget=120.0) == 0  # (unless an hour ended just now)


def test_only_closed_periods_are_rolled_up_and_kept_for_a_while(repo: Repository) -> None:
    now = repo.db_now()["now"]
    for seconds, keep in ROLLUP_PERIODS.items():
        assert not repo.series_rollup_period(now, seconds, lag=ROLLUP_LAG)  # the current period is open
        assert not repo.series_rollup_period(now - timedelta(seconds=ROLLUP_LAG), seconds, lag=ROLLUP_LAG)
        due = repo.series_rollup_due(seconds, keep=keep, lag=ROLLUP_LAG, limit=1000)
        assert due == sorted(due, reverse=True) and len(due) in (keep // seconds - 2, keep // seconds - 1)
        assert due[0] + timedelta(seconds=seconds) <= now - timedelta(seconds=ROLLUP_LAG)
        assert due[-1] >= now - timedelta(seconds=keep)
        assert repo.series_rollup_due(seconds, keep=keep, lag=ROLLUP_LAG, limit=5) == due[:5]
    with repo.conn.cursor() as cur:  # an hour older than 8 days goes, with its figures
        cur.execute(f'INSERT INTO "{repo.schema}".queue_series_rollups (seconds, period) '
                    "VALUES (3600, date_bin('1 hour', now() - interval '9 days', timestamptz 'epoch'))")
        cur.execute(f'INSERT INTO "{repo.schema}".queue_series_periods '
                    "VALUES (3600, date_bin('1 hour', now() - interval '9 days', timestamptz 'epoch'), 'mail', 1, 0, 0)")
    sampler = DepthSampler()
    assert sampler.run_once(repo) == 0  # no queue to sample; the rollup runs all the same
    assert sampler.rolled == 12  # at most 12 periods a cycle: the newest hours first
    gone = repo.conn.execute(f'SELECT (SELECT count(*) FROM "{repo.schema}".queue_series_periods) AS n, '
                             f'(SELECT min(period) FROM "{repo.schema}".queue_series_rollups) AS first, '
                             f'(SELECT count(*) FROM "{repo.schema}".queue_series_rollups WHERE seconds = 900) AS quarters'
                             ).fetchone()
    assert gone is not None and gone["n"] == 0 and gone["first"] >= now - timedelta(days=8) and gone["quarters"] == 0
