"""The sweeps of `tenure sqs` against a real PostgreSQL: messages past their queue's
MessageRetentionPeriod are deleted (waiting and in flight), audited and counted per queue; the
message move tasks live in ``sqs_move_tasks`` (any replica steps, cancels, lists and adopts them)."""

from __future__ import annotations

import json

import pytest

from tenure.core.repository import MAX_ATTEMPTS_LIMIT, Repository

pytestmark = pytest.mark.integration
WORKER = "tenure-sqs"


def _send(repo: Repository, queue: str, n: int) -> list[int]:
    return repo.sqs_send(queue, [json.dumps({"body": f"m{i}"}) for i in range(n)], [0.0] * n, MAX_ATTEMPTS_LIMIT)


def _age(repo: Repository, ids: list[int], seconds: int) -> None:
    repo.conn.execute(f'UPDATE "{repo.schema}".jobs SET created_at = now() - make_interval(secs => %s) '
                      "WHERE id = ANY(%s)", (seconds, ids))


def test_retention_deletes_old_messages_waiting_or_in_flight_audited(repo: Repository) -> None:
    repo.sqs_queue_create("short", False, {"MessageRetentionPeriod": "60"}, {})
    repo.sqs_queue_create("default", False, {}, {})
    old = _send(repo, "short", 3)
    young = _send(repo, "short", 2)
    _age(repo, old, 61)
    kept_default = _send(repo, "default", 1)
    _age(repo, kept_default, 3600)  # within the default 4 days
    old_default = _send(repo, "default", 1)
    _age(repo, old_default, 345_601)
    jobs, _ = repo.sqs_receive(WORKER, "short", 1, 30.0, fifo=False, dlq=None, max_receive=None)
    assert [j.id for j in jobs] == [old[0]]  # in flight, and past retention too

    assert repo.sqs_retention_expire(WORKER, 1000, 345_600) == {"default": 1, "short": 3}
    left = {r["id"] for r in repo.conn.execute(f'SELECT id FROM "{repo.schema}".jobs').fetchall()}
    assert left == {*young, *kept_default}
    events = [tuple(r.values()) for r in repo.conn.execute(
        f'SELECT job_id, event, reason, detail->>\'status\' AS status FROM "{repo.schema}".job_events '
        "WHERE event = 'expired' ORDER BY job_id").fetchall()]
    assert events == [(old[0], "expired", "retention", "running"), (old[1], "expired", "retention", "pending"),
                      (old[2], "expired", "retention", "pending"), (old_default[0], "expired", "retention", "pending")]
    assert repo.sqs_retention_expire(WORKER, 1000, 345_600) == {}


def test_retention_is_bounded_per_statement(repo: Repository) -> None:
    repo.sqs_queue_create("many", False, {"MessageRetentionPeriod": "60"}, {})
    _age(repo, _send(repo, "many", 5), 120)
    assert repo.sqs_retention_expire(WORKER, 2, 345_600) == {"many": 2}
    assert repo.sqs_retention_expire(WORKER, 10, 345_600) == {"many": 3}


def test_a_move_task_row_is_stepped_cancelled_listed_and_adopted(repo: Repository) -> None:
    repo.sqs_queue_create("dlq", False, {}, {})
    repo.sqs_queue_create("src", False, {}, {})
    _send(repo, "dlq", 3)
    arn = "arn:aws:sqs:us-east-1:123456789012:dlq"
    assert repo.sqs_move_task_start("h1", "dlq", arn, "src", None, 1, 3, "replica-a")
    assert not repo.sqs_move_task_start("h2", "dlq", arn, "src", None, None, 3, "replica-b")  # one running per source
    step = repo.sqs_move_task_step("h1", "replica-a", "dlq", "src", 1)
    assert (step["status"], step["moved"], step["step"]) == ("RUNNING", 1, 1)
    assert repo.sqs_move_task_step("h1", "replica-b", "dlq", "src", 1)["status"] is None  # not b's task
    # Replica a stops; once its heartbeat is stale, replica b takes the task over and resumes it.
    assert repo.sqs_move_task_adopt("replica-b", 60) == []
    repo.conn.execute(f'UPDATE "{repo.schema}".sqs_move_tasks SET heartbeat_at = now() - interval \'2 minutes\'')
    [adopted] = repo.sqs_move_task_adopt("replica-b", 60)
    assert (adopted["handle"], adopted["source_queue"], adopted["target_queue"], adopted["rate"]) == (
        "h1", "dlq", "src", 1)
    assert repo.sqs_move_task_step("h1", "replica-a", "dlq", "src", 1)["status"] is None  # a's runner stops
    assert repo.sqs_move_task_step("h1", "replica-b", "dlq", "src", 1)["moved"] == 2
    cancelled = repo.sqs_move_task_cancel("h1")
    assert cancelled is not None and cancelled["cancelled"] and cancelled["moved"] == 2
    assert repo.sqs_move_task_step("h1", "replica-b", "dlq", "src", 1)["status"] is None
    again = repo.sqs_move_task_cancel("h1")
    assert again is not None and not again["cancelled"] and again["status"] == "CANCELLED"
    assert repo.sqs_move_task_cancel("nope") is None
    # A new task on the same source; it completes when nothing is left to move.
    assert repo.sqs_move_task_start("h3", "dlq", arn, "src", None, None, 1, "replica-b")
    assert repo.sqs_move_task_step("h3", "replica-b", "dlq", "src", 100)["step"] == 1
    done = repo.sqs_move_task_step("h3", "replica-b", "dlq", "src", 100)
    assert (done["status"], done["step"], done["moved"]) == ("COMPLETED", 0, 1)
    assert [(r["handle"], r["status"], r["moved"]) for r in repo.sqs_move_task_list(arn, 10)] == [
        ("h3", "COMPLETED", 1), ("h1", "CANCELLED", 2)]
    assert repo.sqs_move_task_fail("h3", "replica-b", "x") is False  # only a running task fails
    counts = repo.sqs_queue_counts("src", WORKER)
    assert counts["visible"] == 3
