"""The reaper (R7) against a real PostgreSQL: conservative, auditable, safe when concurrent."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tenure.core.backoff import RetryPolicy
from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository
from tenure.reaper.reaper import Reaper, ReaperConfig

pytestmark = pytest.mark.integration


def _reaper(dsn: str, schema: str, **kw: object) -> Reaper:
    cfg = ReaperConfig(**{"grace": 0.0, "batch": 1000, "retry": RetryPolicy(0.0, 0.0, 5), **kw})  # type: ignore[arg-type]
    return Reaper(cfg, dsn=dsn, schema=schema, rng=random.Random(1))


def test_reaper_leaves_a_heartbeating_job_alone_however_long_it_runs(dsn: str, schema: str, repo: Repository) -> None:
    job_id = repo.enqueue("long").id
    [job] = repo.claim("w", ["default"], 1, 0.5)
    reaper = _reaper(dsn, schema)
    end = time.monotonic() + 2.5  # five lease lengths
    while time.monotonic() < end or reaper.cycles <= 10:  # both: a loaded machine runs fewer cycles
        repo.heartbeat("w", [(job_id, job.lock_token)], 0.5, 3600)
        assert reaper.run_once() == []
        time.sleep(0.1)
    assert reaper.cycles > 10
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "running" and row["lock_token"] == job.lock_token
    assert not any(e["event"].startswith("reaped") for e in repo.job_events(job_id))


def test_reaper_honours_the_grace_period(dsn: str, schema: str, repo: Repository) -> None:
    job_id = repo.enqueue("t").id
    repo.claim("w", ["default"], 1, 0.2)
    reaper = _reaper(dsn, schema, grace=1.0)
    time.sleep(0.4)  # expired, but within grace
    assert reaper.run_once() == []
    time.sleep(1.0)
    assert [r.id for r in reaper.run_once()] == [job_id]


def test_reaper_requeues_a_first_expiry_at_once_and_repeats_with_backoff(dsn: str, schema: str,
                                                                         repo: Repository) -> None:
    """Issue 12, defect 3: backoff only for repeated expiries of the same job."""
    job_id = repo.enqueue("t").id
    reaper = Reaper(ReaperConfig(grace=0.0, retry=RetryPolicy(base_delay=10, max_delay=20, max_attempts=5)),
                    dsn=dsn, schema=schema, rng=random.Random(3))
    delays = []
    for expiry in (1, 2):
        [job] = repo.claim("dead-worker", ["default"], 1, 0.1)
        time.sleep(0.2)
        [reaped] = reaper.run_once()
        assert reaped.id == job_id and not reaped.dead
        row = repo.get_job(job_id)
        assert row is not None and row["status"] == "pending" and row["lock_token"] is None
        delays.append((row["available_at"] - row["db_now"]).total_seconds())
        assert row["lease_expiry_count"] == expiry and row["last_error_code"] == "lease_expired"
        event = [e for e in repo.job_events(job_id) if e["event"] == "reaped_due_to_expired_lease"][-1]
        assert event["lock_token"] == job.lock_token and event["detail"]["owner_status"] == "unknown"
        assert (event["detail"]["delay_seconds"] == 0) == (expiry == 1)
        if expiry == 1:
            repo.conn.execute(f'UPDATE "{schema}".jobs SET available_at = now() WHERE id = %s', (job_id,))
    assert delays[0] <= 0, "the first expiry is requeued at once"
    assert 0 < delays[1] <= 20  # full jitter in [0, min(20, 10 * 2**1)] on the expiry count


def test_reaper_dead_letters_after_max_attempts(dsn: str, schema: str, repo: Repository) -> None:
    job_id = repo.enqueue("t", max_attempts=2).id
    reaper = _reaper(dsn, schema, max_lease_expiries=10)
    for attempt in (1, 2):
        [job] = repo.claim("w", ["default"], 1, 0.05)
        assert job.attempt == attempt
        time.sleep(0.1)
        [reaped] = reaper.run_once()
        assert reaped.dead == (attempt == 2)
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "failed" and row["last_error_code"] == "lease_expired"
    assert "lease expired" in row["last_error"]
    assert [e["event"] for e in repo.job_events(job_id)][-1] == "reaped_to_dead_letter"


def test_repeated_lease_expiry_dead_letters_with_its_own_cause(dsn: str, schema: str, repo: Repository) -> None:
    """solid_queue#422: expiry requeues until the expiry budget, only then dead-letters as lease_expired."""
    job_id = repo.enqueue("t", max_attempts=10).id
    reaper = _reaper(dsn, schema, max_lease_expiries=3)
    outcomes = []
    for _ in range(3):
        repo.claim("w", ["default"], 1, 0.05)
        time.sleep(0.1)
        outcomes.extend(r.dead for r in reaper.run_once())
    assert outcomes == [False, False, True]
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "failed" and row["lease_expiry_count"] == 3


def _expire(repo: Repository, job_id: int, seconds_ago: float) -> None:
    """Move a running job's lease expiry to ``seconds_ago`` before the database clock's now()."""
    repo.conn.execute(f'UPDATE "{repo.schema}".jobs SET lease_expires_at = now() - make_interval(secs => %s) '
                      "WHERE id = %s AND status = 'running'", (seconds_ago, job_id))


def test_reaper_gives_live_owners_extra_grace(dsn: str, schema: str, repo: Repository) -> None:
    repo.worker_register("alive-w", host="h", pid=1, queues=["default"], concurrency=1,
                         heartbeat_seconds=10, version="t")
    job_id = repo.enqueue("t").id
    repo.claim("alive-w", ["default"], 1, 30)
    _expire(repo, job_id, 11)  # past the owner's 10 s heartbeat, within it plus the 5 s extra
    reaper = _reaper(dsn, schema, alive_owner_grace=5.0)
    assert reaper.run_once() == []
    assert _reaper(dsn, schema).run_once()[0].id == job_id


@pytest.mark.parametrize("heartbeat, grace", [(8.0, 1.0), (0.5, 3.0)])
def test_a_job_waits_its_registered_owners_heartbeat_plus_the_grace(
        dsn: str, schema: str, repo: Repository, heartbeat: float, grace: float) -> None:
    """Issue 22 item 5: the floor comes from the registry, judged by the database clock."""
    repo.worker_register("w-reg", host="h", pid=1, queues=["default"], concurrency=1,
                         heartbeat_seconds=heartbeat, version="t")
    job_id = repo.enqueue("t").id
    repo.claim("w-reg", ["default"], 1, 30)
    reaper = _reaper(dsn, schema, grace=grace, heartbeat=0.1)  # the floor for unknown owners: not used
    wait = heartbeat + grace
    _expire(repo, job_id, wait - 0.5)
    assert reaper.run_once() == []
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "running"
    _expire(repo, job_id, wait + 0.5)
    [reaped] = reaper.run_once()
    assert reaped.id == job_id and not reaped.dead
    [event] = [e for e in repo.job_events(job_id) if e["event"] == "reaped_due_to_expired_lease"]
    assert event["detail"]["owner"] == "w-reg"


def test_a_job_of_an_owner_not_in_the_registry_waits_the_heartbeat_floor(dsn: str, schema: str,
                                                                          repo: Repository) -> None:
    job_id = repo.enqueue("t").id
    repo.claim("w-unregistered", ["default"], 1, 30)
    reaper = _reaper(dsn, schema, grace=1.0, heartbeat=6.0)
    _expire(repo, job_id, 6.5)  # past the floor, within the floor plus the grace
    assert reaper.run_once() == []
    _expire(repo, job_id, 7.5)
    assert [r.id for r in reaper.run_once()] == [job_id]
    # Without a floor (a library caller): the grace alone.
    [again] = repo.claim("w-unregistered", ["default"], 1, 30)
    _expire(repo, again.id, 1.5)
    assert [r.id for r in _reaper(dsn, schema, grace=1.0).run_once()] == [again.id]


def test_concurrent_reapers_never_double_transition(dsn: str, schema: str, repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(300)])
    repo.claim("w", ["default"], 300, 0.05)
    time.sleep(0.2)
    results: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(3)

    def run(n: int) -> None:
        reaper = _reaper(dsn, schema, batch=37)
        barrier.wait()
        for _ in range(20):
            ids = [r.id for r in reaper.run_once()]
            with lock:
                results.extend(ids)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 300 and len(set(results)) == 300
    with connect(dsn) as c:
        n = c.execute(f'SELECT count(*) AS n FROM "{schema}".job_events WHERE event LIKE %s',
                      ("reaped%",)).fetchone()
    assert n is not None and n["n"] == 300


def test_reaper_never_undoes_a_completion(dsn: str, schema: str, repo: Repository) -> None:
    """river#1302: a rescuer racing a completion must never overwrite it."""
    # The day partitions first, as a running reaper keeps them: their creation attaching today's
    # while a completion routes its row to the default partition fails that completion (a
    # PostgreSQL partition-routing race), which is not what this test is about.
    repo.history_ensure()
    repo.enqueue_many([JobSpec("t") for _ in range(200)])
    jobs = repo.claim("w", ["default"], 200, 0.05)
    time.sleep(0.1)
    accepted: dict[int, bool] = {}

    def complete() -> None:
        with connect(dsn) as c:
            r = Repository(c, schema)
            for j in jobs:
                accepted.update(r.complete_many("w", [(j.id, j.lock_token)]))

    t = threading.Thread(target=complete)
    t.start()
    reaper = _reaper(dsn, schema, batch=5)
    while t.is_alive():
        reaper.run_once()
    t.join()
    reaper.run_once()
    for j in jobs:
        row = repo.get_job(j.id)
        assert row is not None
        events = [e["event"] for e in repo.job_events(j.id)]
        if accepted[j.id]:
            assert row["status"] == "completed", "a completed job was overwritten"
            assert not any(e.startswith("reaped") for e in events[events.index("completed"):])
        else:
            assert "stale_completion_rejected" in events and row["status"] == "pending"
    assert any(accepted.values())
