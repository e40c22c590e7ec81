"""`Repository.sqs_receive` against a real PostgreSQL: one round trip per ReceiveMessage attempt
(expiry, claim and first receives pipelined in one implicit transaction), with the fencing,
the visibility timeouts by the database clock, the FIFO order and the running limits kept."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tenure.core.db import connect
from tenure.core.repository import MAX_ATTEMPTS_LIMIT, Repository

pytestmark = pytest.mark.integration
WORKER = "tenure-sqs"


def _send(repo: Repository, queue: str, payloads: list[dict[str, str]]) -> list[int]:
    return repo.sqs_send(queue, [json.dumps(p) for p in payloads], [0.0] * len(payloads), MAX_ATTEMPTS_LIMIT)


def _round_trips(conn: psycopg.Connection, tmp_path: Path, action: object) -> tuple[int, object]:
    """Messages that make the client wait for the server (Sync, simple Query), from libpq's trace."""
    path = tmp_path / f"trace-{time.monotonic_ns()}.txt"
    with open(path, "w") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            result = action() if callable(action) else None
        finally:
            conn.pgconn.untrace()
    sent = [line.split("\t") for line in path.read_text().splitlines()]
    return sum(1 for f in sent if len(f) > 2 and f[0] == "F" and f[2].split(" ")[0] in ("Sync", "Query")), result


def test_a_receive_is_one_round_trip_and_records_first_receives(repo: Repository, tmp_path: Path) -> None:
    ids = _send(repo, "std", [{"body": f"m{i}"} for i in range(3)])
    trips, result = _round_trips(repo.conn, tmp_path, lambda: repo.sqs_receive(
        WORKER, "std", 10, 30.0, fifo=False, dlq=None, max_receive=None))
    assert trips == 1
    jobs, times = result  # type: ignore[misc]
    assert sorted(j.id for j in jobs) == ids
    assert set(times) == set(ids)
    now_ms = float(repo.db_now()["epoch"]) * 1000
    for first, sent in times.values():
        assert sent <= first <= now_ms + 1
    assert {r["job_id"] for r in repo.conn.execute(
        f'SELECT job_id FROM "{repo.schema}".sqs_receipts').fetchall()} == set(ids)
    # nothing left: still one round trip, nothing claimed
    trips, result = _round_trips(repo.conn, tmp_path, lambda: repo.sqs_receive(
        WORKER, "std", 10, 30.0, fifo=False, dlq=None, max_receive=None))
    assert trips == 1 and result == ([], {})


def test_fifo_receive_is_one_round_trip_in_group_order(repo: Repository, tmp_path: Path) -> None:
    ids = _send(repo, "f.fifo", [{"body": "a1", "group": "a"}, {"body": "b1", "group": "b"},
                                 {"body": "a2", "group": "a"}])
    trips, result = _round_trips(repo.conn, tmp_path, lambda: repo.sqs_receive(
        WORKER, "f.fifo", 1, 30.0, fifo=True, dlq=None, max_receive=None))
    jobs, times = result  # type: ignore[misc]
    assert trips == 1
    assert [j.id for j in jobs] == ids[:1] and set(times) == set(ids[:1])
    # group a has a1 in flight: only b1 leaves, a2 waits
    [b1], _ = repo.sqs_receive(WORKER, "f.fifo", 10, 30.0, fifo=True, dlq=None, max_receive=None)
    assert b1.id == ids[1]
    assert repo.sqs_receive(WORKER, "f.fifo", 10, 30.0, fifo=True, dlq=None, max_receive=None) == ([], {})
    assert repo.complete_many(WORKER, [(jobs[0].id, jobs[0].lock_token)]) == {jobs[0].id: True}
    again, _ = repo.sqs_receive(WORKER, "f.fifo", 10, 30.0, fifo=True, dlq=None, max_receive=None)
    assert [j.id for j in again] == [ids[2]]


def test_an_expired_visibility_is_received_again_keeping_the_first_receive(repo: Repository) -> None:
    [job_id] = _send(repo, "std", [{"body": "x"}])
    [first], times = repo.sqs_receive(WORKER, "std", 1, 0.2, fifo=False, dlq=None, max_receive=None)
    time.sleep(0.4)
    [second], times2 = repo.sqs_receive(WORKER, "std", 1, 30.0, fifo=False, dlq=None, max_receive=None)
    assert second.id == job_id and second.attempt == 2 and second.lock_token != first.lock_token
    assert times2[job_id][0] == times[job_id][0]  # ApproximateFirstReceiveTimestamp kept
    assert "visibility_expired" in [e["event"] for e in repo.job_events(job_id)]
    # the first receipt's token is fenced out; the current one deletes
    assert repo.complete_many(WORKER, [(job_id, first.lock_token)]) == {job_id: False}
    assert repo.complete_many(WORKER, [(job_id, second.lock_token)]) == {job_id: True}


def test_redrive_past_max_receive_in_the_same_round_trip(repo: Repository) -> None:
    [job_id] = _send(repo, "src", [{"body": "x"}])
    [job], _ = repo.sqs_receive(WORKER, "src", 1, 0.1, fifo=False, dlq="dlq", max_receive=1)
    time.sleep(0.3)
    assert repo.sqs_receive(WORKER, "src", 1, 30.0, fifo=False, dlq="dlq", max_receive=1) == ([], {})
    [moved], _ = repo.sqs_receive(WORKER, "dlq", 1, 30.0, fifo=False, dlq=None, max_receive=None)
    assert moved.id == job_id and moved.queue == "dlq"


def test_a_limited_queue_falls_back_to_the_gated_claim(repo: Repository) -> None:
    ids = _send(repo, "lim", [{"body": f"m{i}"} for i in range(5)])
    repo.queue_control_set("lim", requested_by="test", max_running=2, set_limit=True)
    jobs, times = repo.sqs_receive(WORKER, "lim", 10, 30.0, fifo=False, dlq=None, max_receive=None)
    assert len(jobs) == 2 and set(times) == {j.id for j in jobs} and {j.id for j in jobs} <= set(ids)
    assert repo.sqs_receive(WORKER, "lim", 10, 30.0, fifo=False, dlq=None, max_receive=None) == ([], {})


def test_concurrent_receives_never_share_a_message(dsn: str, schema: str) -> None:
    with connect(dsn) as conn:
        ids = _send(Repository(conn, schema), "std", [{"body": f"m{i}"} for i in range(400)])
    got: list[int] = []
    timed: list[int] = []
    lock = threading.Lock()

    def consume() -> None:
        with connect(dsn) as conn:
            repo = Repository(conn, schema)
            while True:
                jobs, times = repo.sqs_receive(WORKER, "std", 7, 30.0, fifo=False, dlq=None, max_receive=None)
                if not jobs:
                    return
                assert set(times) == {j.id for j in jobs}
                with lock:
                    got.extend(j.id for j in jobs)
                    timed.extend(times)

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got) == ids and sorted(timed) == ids


@pytest.mark.parametrize("which", ["secret", "queue"])
def test_an_insert_that_waited_on_a_concurrent_one_returns_its_row(dsn: str, schema: str, which: str) -> None:
    """Two `tenure sqs` replicas start together (the HMAC key), or two clients create one queue:
    the second insert waits on the first's uncommitted row, and once that commits it must get the
    row the first stored, not nothing (its statement's snapshot predates that row)."""
    def ensure(repo: Repository, candidate: bytes) -> object:
        if which == "secret":
            return repo.sqs_secret(candidate)
        return dict(repo.sqs_queue_create("same", False, {"DelaySeconds": candidate.hex()}, {}))

    got: list[object] = []
    with connect(dsn) as first_conn, connect(dsn) as second_conn:
        first = Repository(first_conn, schema)
        with first_conn.transaction():
            stored = ensure(first, b"\x01" * 32)
            waiter = threading.Thread(target=lambda: got.append(ensure(Repository(second_conn, schema), b"\x02" * 32)))
            waiter.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the second insert waits on the first's row lock
                with connect(dsn) as probe:
                    waiting = probe.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                            "AND pid = %s", (second_conn.info.backend_pid,)).fetchone()
                if waiting and waiting["n"]:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError("the second insert never waited on the first")
        waiter.join(timeout=10)
    if which == "secret":
        assert got == [b"\x01" * 32] == [stored]
    else:
        assert len(got) == 1 and got[0]["created"] is False  # type: ignore[index]
        assert got[0]["attributes"] == {"DelaySeconds": "01" * 32}  # type: ignore[index]
