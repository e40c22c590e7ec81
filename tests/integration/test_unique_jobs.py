"""Unique jobs against a real PostgreSQL (issue 39, item 3; docs/unique.md): skip, replace and
debounce, the states a key covers, period buckets by the database clock, enqueue_many per entry,
the idempotency key alongside, and producers racing on few keys: no error and no duplicate."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tenure.core.db import Connection, connect
from tenure.core.errors import JobSpecError
from tenure.core.repository import JobSpec, Repository
from tenure.core.unique import Unique

pytestmark = pytest.mark.integration

BY_CUSTOMER = Unique(by=["customer_id"])


def _jobs(conn: Connection, schema: str) -> list[dict[str, object]]:
    return conn.execute(f'SELECT id, status::text AS status, payload, unique_key, available_at - now() AS wait '
                        f'FROM "{schema}".jobs ORDER BY id').fetchall()  # type: ignore[return-value]


def test_skip_returns_the_holder_and_keys_are_task_plus_fields(repo: Repository, conn: Connection,
                                                                schema: str) -> None:
    first = repo.enqueue("sync", {"customer_id": 7, "n": 1}, unique=BY_CUSTOMER)
    assert first.created
    again = repo.enqueue("sync", {"customer_id": 7, "n": 2}, unique=BY_CUSTOMER)
    assert (again.id, again.created, again.replaced) == (first.id, False, False)
    assert repo.enqueue("sync", {"customer_id": 7.0}, unique=BY_CUSTOMER).id == first.id  # 7.0 is 7, as in jsonb
    assert repo.enqueue("sync", {"customer_id": "7"}, unique=BY_CUSTOMER).created  # a string is another value
    assert repo.enqueue("sync", {"customer_id": 8}, unique=BY_CUSTOMER).created
    assert repo.enqueue("other", {"customer_id": 7}, unique=BY_CUSTOMER).created  # another task
    assert repo.enqueue("sync", {"customer_id": 7}).created  # without a declaration: no key
    rows = _jobs(conn, schema)
    assert len(rows) == 5 and rows[0]["payload"] == {"customer_id": 7, "n": 1}
    assert len(str(rows[0]["unique_key"])) == 64 and rows[-1]["unique_key"] is None


def test_a_key_is_held_while_pending_or_running_and_freed_after(repo: Repository) -> None:
    job = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
    [claimed] = repo.claim("w", ["default"], 1, 30)
    assert repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id == job  # running holds it
    repo.complete_many("w", [(claimed.id, claimed.lock_token)])
    second = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER)  # completed (history): free
    assert second.created
    repo.cancel([second.id], "test")
    assert repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).created  # cancelled: not covered
    holds_cancelled = Unique(by=["customer_id"], states=("pending", "running", "cancelled"))
    third = repo.enqueue("sync", {"customer_id": 2}, unique=holds_cancelled).id
    repo.cancel([third], "test")
    assert repo.enqueue("sync", {"customer_id": 2}, unique=holds_cancelled).id == third


def test_replace_rewrites_a_pending_holder_only(repo: Repository, conn: Connection, schema: str) -> None:
    replace = Unique(by=["customer_id"], on_conflict="replace")
    job = repo.enqueue("sync", {"customer_id": 1, "v": 1}, unique=replace).id
    hit = repo.enqueue("sync", {"customer_id": 1, "v": 2}, unique=replace)
    assert (hit.id, hit.created, hit.replaced) == (job, False, True)
    assert (repo.get_job(job) or {})["payload"] == {"customer_id": 1, "v": 2}
    repo.claim("w", ["default"], 1, 30)
    running = repo.enqueue("sync", {"customer_id": 1, "v": 3}, unique=replace)
    assert (running.id, running.created, running.replaced) == (job, False, False)
    assert (repo.get_job(job) or {})["payload"] == {"customer_id": 1, "v": 2}  # a running job keeps its payload
    assert len(_jobs(conn, schema)) == 1


def test_debounce_waits_a_period_and_pushes_the_start_on(repo: Repository, conn: Connection, schema: str) -> None:
    debounce = Unique(by=["customer_id"], period=60, on_conflict="debounce")
    job = repo.enqueue("sync", {"customer_id": 1, "v": 1}, unique=debounce).id
    [row] = _jobs(conn, schema)
    assert 59 < row["wait"].total_seconds() <= 60  # type: ignore[attr-defined]
    assert "@" not in str(row["unique_key"])  # debounce's period is a quiet time, not a bucket
    conn.execute(f'UPDATE "{schema}".jobs SET available_at = now() + interval \'5 seconds\'')
    hit = repo.enqueue("sync", {"customer_id": 1, "v": 2}, unique=debounce)
    assert (hit.id, hit.created, hit.replaced) == (job, False, True)
    [row] = _jobs(conn, schema)
    assert 59 < row["wait"].total_seconds() <= 60 and row["payload"] == {"customer_id": 1, "v": 2}  # type: ignore[attr-defined]
    longer = repo.enqueue("sync", {"customer_id": 2}, delay=120, unique=debounce).id  # the longer of delay, period
    assert 119 < (repo.get_job(longer) or {})["available_at"].timestamp() - time.time() + 1


def test_a_period_buckets_the_key_by_the_database_clock(repo: Repository, conn: Connection, schema: str) -> None:
    hourly = Unique(by=["customer_id"], period=3600)
    job = repo.enqueue("sync", {"customer_id": 1}, unique=hourly).id
    assert repo.enqueue("sync", {"customer_id": 1}, unique=hourly).id == job
    start = int(conn.execute("SELECT floor(extract(epoch FROM now()) / 3600)::bigint * 3600 AS s").fetchone()["s"])  # type: ignore[index]
    assert str(_jobs(conn, schema)[0]["unique_key"]).endswith(f"@{start}")
    # The previous bucket's job holds its own key, not this bucket's.
    conn.execute(f'UPDATE "{schema}".jobs SET unique_key = split_part(unique_key, \'@\', 1) || \'@\' || %s',
                 (str(start - 3600),))
    assert repo.enqueue("sync", {"customer_id": 1}, unique=hourly).created
    # A short period: the next bucket takes a new job while the first is still pending.
    second = Unique(by=["customer_id"], period=1)
    first = repo.enqueue("tick", {"customer_id": 1}, unique=second).id
    time.sleep(1.05)
    assert repo.enqueue("tick", {"customer_id": 1}, unique=second).id != first


def test_enqueue_many_honours_each_entry(repo: Repository, conn: Connection, schema: str) -> None:
    held = repo.enqueue("sync", {"customer_id": 1, "v": 0}, unique=BY_CUSTOMER).id
    replace = Unique(by=["customer_id"], on_conflict="replace")
    inserted = repo.enqueue_many([
        JobSpec("sync", {"customer_id": 1}, unique=BY_CUSTOMER),  # held: skipped
        JobSpec("sync", {"customer_id": 2, "v": 1}, unique=BY_CUSTOMER),
        JobSpec("sync", {"customer_id": 2, "v": 2}, unique=BY_CUSTOMER),  # the entry above holds it
        JobSpec("sync", {"customer_id": 2}),  # no declaration
        JobSpec("other", {"customer_id": 2}, unique=BY_CUSTOMER),
        JobSpec("sync", {"customer_id": 1, "v": 9}, unique=replace),  # replaces the held job's payload
        JobSpec("sync", {"customer_id": 3, "v": 1}, unique=replace),
        JobSpec("sync", {"customer_id": 3, "v": 2}, unique=replace),  # replaces the entry above
    ])
    assert inserted == 4
    rows = _jobs(conn, schema)
    assert len(rows) == 5 and rows[0]["id"] == held and rows[0]["payload"] == {"customer_id": 1, "v": 9}
    assert {"customer_id": 3, "v": 2} in [r["payload"] for r in rows]


def test_an_idempotency_key_claimed_for_a_skipped_job_is_freed(repo: Repository, conn: Connection,
                                                                schema: str) -> None:
    job = repo.enqueue("sync", {"customer_id": 1}, idempotency_key="k1", unique=BY_CUSTOMER).id
    assert repo.enqueue("sync", {"customer_id": 1}, idempotency_key="k2", unique=BY_CUSTOMER).id == job
    assert repo.enqueue("sync", {"customer_id": 2}, idempotency_key="k1", unique=BY_CUSTOMER).id == job  # key first
    repo.enqueue_many([JobSpec("sync", {"customer_id": 1}, idempotency_key="k3", unique=BY_CUSTOMER)])
    keys = {r["idempotency_key"] for r in conn.execute(f'SELECT idempotency_key FROM "{schema}".job_keys')}  # type: ignore[call-overload]
    assert keys == {"k1"}
    assert repo.enqueue("sync", {"customer_id": 9}, idempotency_key="k2").created  # k2 is free for another job


def test_bad_declarations_and_payloads_write_nothing(repo: Repository, conn: Connection, schema: str) -> None:
    for bad, match in ((dict(by=[]), "at least one"), (dict(by="customer_id"), "list"),
                       (dict(by=["a", "a"]), "twice"), (dict(by=["a"], period=0), "period"),
                       (dict(by=["a"], period=-5), "period"), (dict(by=["a"], period=1.5), "period"),
                       (dict(by=["a"], states=("pending",)), "must include"),
                       (dict(by=["a"], states=("pending", "running", "completed")), "completed"),
                       (dict(by=["a"], on_conflict="merge"), "on_conflict"),
                       (dict(by=["a"], on_conflict="debounce"), "needs a period")):
        with pytest.raises(JobSpecError, match=match):
            Unique(**bad)  # type: ignore[arg-type]
    with pytest.raises(JobSpecError, match="'customer_id' is missing"):
        repo.enqueue("sync", {"other": 1}, unique=BY_CUSTOMER)
    with pytest.raises(JobSpecError, match="JSON object"):
        repo.enqueue("sync", [1], unique=BY_CUSTOMER)
    with pytest.raises(JobSpecError, match="missing"):
        repo.enqueue_many([JobSpec("sync", {"customer_id": 1}, unique=BY_CUSTOMER),
                           JobSpec("sync", {}, unique=BY_CUSTOMER)])
    assert _jobs(conn, schema) == []


def test_retrying_a_failed_job_whose_key_is_held_leaves_it_failed(repo: Repository) -> None:
    """With states without failed, a failed job frees its key; a retry while another job holds
    the key leaves it out and says which job holds it (tests/integration/test_unique_retry.py)."""
    job = repo.enqueue("sync", {"customer_id": 1}, max_attempts=1, unique=BY_CUSTOMER).id
    [claimed] = repo.claim("w", ["default"], 1, 30)
    assert repo.dead_letter("w", job, claimed.lock_token, error="x", error_code="x")
    holder = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER)
    assert holder.created
    assert repo.retry_jobs_held([job], "test") == ([], {job: f"unique key held by job {holder.id} (pending)"})


def _race(dsn: str, schema: str, *, producers: int, per_producer: int, keys: int, batch: int) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(producers)

    def produce(n: int) -> None:
        rng = random.Random(n)
        try:
            with connect(dsn) as c:
                r = Repository(c, schema)
                start.wait()
                for _ in range(per_producer // batch):
                    specs = [JobSpec("sync", {"customer_id": rng.randrange(keys), "by": n}, unique=BY_CUSTOMER)
                             for _ in range(batch)]
                    if batch == 1:
                        r.enqueue(specs[0].task, specs[0].payload, unique=BY_CUSTOMER)
                    else:
                        r.enqueue_many(specs)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("batch", [1, 20])
def test_racing_producers_make_no_error_and_no_duplicate(dsn: str, schema: str, conn: Connection, batch: int) -> None:
    assert _race(dsn, schema, producers=8, per_producer=200, keys=100, batch=batch) == []
    rows = conn.execute(f'SELECT unique_key, count(*) AS n FROM "{schema}".jobs GROUP BY unique_key').fetchall()
    assert len(rows) == 100 and {r["n"] for r in rows} == {1}  # type: ignore[call-overload]
