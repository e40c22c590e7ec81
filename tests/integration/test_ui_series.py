"""The job browser's chart series on a real PostgreSQL (issue 36 item 5): the completed points
add up exactly to the jobs completed in the window (of every queue, and of one), failed
attempts and dead letters land in their buckets, the wait p50/p95 is right on crafted
timestamps, and the reaper's depth samples show up."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tenure.core.repository import Repository
from tenure.reaper.depth import DepthSampler
from tenure.ui.series import WINDOWS, SeriesError, bucket_starts, parse_window, read

pytestmark = pytest.mark.integration


def _completed(repo: Repository, queue: str, n: int) -> list[int]:
    """``n`` jobs enqueued, claimed and completed the real way (they move to job_history)."""
    ids = [repo.enqueue("work", {"i": i}, queue=queue).id for i in range(n)]
    claimed = repo.claim("w", [queue], n, 30)
    assert sorted(j.id for j in claimed) == sorted(ids)
    assert all(repo.complete_many("w", [(j.id, j.lock_token) for j in claimed]).values())
    return ids


def _craft(repo: Repository, job_id: int, completed_ago: float, wait: float = 0.0, run: float = 1.0) -> None:
    """Completed ``completed_ago`` seconds before now, after running ``run`` s, having waited ``wait`` s."""
    with repo.conn.cursor() as cur:
        cur.execute(f'UPDATE "{repo.schema}".job_history SET completed_at = now() - make_interval(secs => %(c)s), '
                    "started_at = now() - make_interval(secs => %(c)s + %(r)s), "
                    "available_at = now() - make_interval(secs => %(c)s + %(r)s + %(w)s), "
                    "created_at = now() - make_interval(secs => %(c)s + %(r)s + %(w)s) WHERE id = %(id)s",
                    {"c": completed_ago, "r": run, "w": wait, "id": job_id})


def _count(repo: Repository, doc: dict[str, Any], queue: str | None = None) -> int:
    row = repo.conn.execute(
        f'SELECT count(*) AS n FROM "{repo.schema}".all_jobs WHERE status = \'completed\' '
        "AND completed_at >= %s AND completed_at < %s AND (%s::text IS NULL OR queue_name = %s)",
        (doc["from"], doc["to"], queue, queue)).fetchone()
    assert row is not None
    return int(row["n"])


def test_throughput_points_add_up_to_the_jobs_completed_in_the_window(repo: Repository) -> None:
    a = _completed(repo, "mail", 40)
    b = _completed(repo, "images", 7)
    for i, job_id in enumerate(a):  # 0 to 117 minutes ago: about half inside the last hour
        _craft(repo, job_id, completed_ago=i * 180.0 + 5)
    for i, job_id in enumerate(b):
        _craft(repo, job_id, completed_ago=i * 400.0 + 5)
    for window in WINDOWS.values():
        doc = read(repo, window, None)
        assert doc["buckets"] == window.buckets == len(doc["points"])
        assert sum(p["completed"] for p in doc["points"]) == doc["totals"]["completed"] == _count(repo, doc)
        for queue in ("mail", "images"):
            one = read(repo, window, queue)
            assert sum(p["completed"] for p in one["points"]) == _count(repo, one, queue)
    hour = read(repo, WINDOWS["1h"], "mail")
    assert 15 <= hour["totals"]["completed"] <= 22  # 20 of 40 completed in the last hour, give or take the bucket edge
    assert read(repo, WINDOWS["24h"], None)["totals"]["completed"] == 47
    # Each job is in the bucket of its completion time.
    starts = [p["t"] for p in hour["points"]]
    step = timedelta(seconds=60)
    for job_id in a[:5]:
        row = repo.conn.execute(f'SELECT completed_at FROM "{repo.schema}".job_history WHERE id = %s', (job_id,)).fetchone()
        assert row is not None
        i = next(k for k, s in enumerate(starts) if s <= row["completed_at"] < s + step)
        assert hour["points"][i]["completed"] >= 1


def test_failed_attempts_and_dead_letters_are_counted_per_bucket(repo: Repository) -> None:
    job = repo.enqueue("work", {}, queue="billing").id
    other = repo.enqueue("work", {}, queue="mail").id
    events = [("retry_scheduled", 30), ("retry_scheduled", 30), ("dead_lettered", 30), ("reaped_to_dead_letter", 600),
              ("reaped_due_to_expired_lease", 600), ("retry_scheduled", 7200), ("claimed", 30), ("completed", 30)]
    with repo.conn.cursor() as cur:
        for event, ago in events:
            cur.execute(f'INSERT INTO "{repo.schema}".job_events (job_id, queue_name, event, created_at) '
                        "VALUES (%s, 'billing', %s, now() - make_interval(secs => %s))", (job, event, ago))
        cur.execute(f'INSERT INTO "{repo.schema}".job_events (job_id, queue_name, event, created_at) '
                    "VALUES (%s, 'mail', 'dead_lettered', now() - interval '30 seconds')", (other,))
    doc = read(repo, WINDOWS["1h"], "billing")
    assert doc["totals"]["failed_attempts"] == 5 and doc["totals"]["dead_lettered"] == 2
    assert read(repo, WINDOWS["1h"], None)["totals"] == {"completed": 0, "failed_attempts": 6, "dead_lettered": 3}
    assert read(repo, WINDOWS["24h"], "billing")["totals"]["failed_attempts"] == 6
    ten = [p for p in doc["points"] if p["failed_attempts"] == 2]  # the two events 10 minutes ago share a minute
    assert len(ten) == 1 and ten[0]["dead_lettered"] == 1


def test_wait_p50_and_p95_on_crafted_timestamps(repo: Repository) -> None:
    ids = _completed(repo, "reports", 20)
    now = float(repo.db_now()["epoch"])
    starts = bucket_starts(now, WINDOWS["1h"])
    target = starts[-6]  # five buckets back: every job starts 10 s into that minute
    started_ago = now - (target + 10)
    for wait, job_id in enumerate(ids, start=1):  # waits of 1..20 s
        _craft(repo, job_id, completed_ago=started_ago - 2, run=2, wait=float(wait))
    doc = read(repo, WINDOWS["1h"], "reports")
    point = doc["points"][-6]
    assert point["wait_jobs"] == 20
    assert point["wait_p50"] == pytest.approx(10.5)
    assert point["wait_p95"] == pytest.approx(1 + 0.95 * 19)
    assert sum(p["wait_jobs"] for p in doc["points"]) == 20
    assert all(p["wait_p50"] is None for i, p in enumerate(doc["points"]) if i != len(doc["points"]) - 6)


def test_depth_samples_of_the_reaper(repo: Repository) -> None:
    for i in range(3):
        repo.enqueue("work", {"i": i}, queue="ingest")
    repo.claim("w", ["ingest"], 1, 30)
    assert DepthSampler().run_once(repo) >= 1
    sampler = DepthSampler()
    sampler.run_once(repo)
    assert sampler.run_once(repo) == 0  # not due again within the minute
    rows = repo.conn.execute(f'SELECT queue_name, ready, blocked, running FROM "{repo.schema}".queue_depth_samples').fetchall()
    assert [tuple(r.values()) for r in rows] == [("ingest", 2, 0, 1)]  # one per minute and queue, whoever writes first
    with repo.conn.cursor() as cur:
        cur.execute(f'INSERT INTO "{repo.schema}".queue_depth_samples VALUES '
                    "(date_trunc('minute', now()) - interval '10 minutes', 'ingest', 40, 3, 2), "
                    "(date_trunc('minute', now()) - interval '10 minutes', 'other', 5, 0, 1), "
                    "(now() - interval '9 days', 'ingest', 1, 1, 1)")
    doc = read(repo, WINDOWS["1h"], "ingest")
    assert (doc["points"][-11]["ready"], doc["points"][-11]["blocked"], doc["points"][-11]["running"]) == (40, 3, 2)
    assert (doc["points"][-1]["ready"], doc["points"][-1]["running"]) == (2, 1)  # the reaper's sample of this minute
    assert doc["points"][-2]["ready"] is None  # no sample: a gap, not a zero
    assert read(repo, WINDOWS["1h"], None)["points"][-11]["ready"] == 45  # every queue: summed per sample
    repo.series_depth_sample([("ingest", 2, 0, 1)])  # the write deletes samples older than 8 days
    old = repo.conn.execute(f'SELECT count(*) AS n FROM "{repo.schema}".queue_depth_samples '
                            "WHERE sampled_at < now() - interval '8 days'").fetchone()
    assert old is not None and old["n"] == 0


def test_a_bad_window_or_an_unknown_queue_is_refused(repo: Repository) -> None:
    with pytest.raises(SeriesError, match="unknown window"):
        parse_window("2h")
    with pytest.raises(SeriesError, match="no such queue"):
        read(repo, WINDOWS["1h"], "nowhere")
    repo.enqueue("work", {}, queue="known")
    assert read(repo, WINDOWS["7d"], "known")["from"] <= datetime.now(tz=read(repo, WINDOWS["7d"], "known")["from"].tzinfo)
