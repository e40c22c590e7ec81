"""Message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): move
the messages of a dead-letter queue back to their source queue (or to a given destination) at
most MaxNumberOfMessagesPerSecond, like tenure's rate-limited DLQ replay.

A task is a row of ``sqs_move_tasks`` (migration 0013), so every replica lists and cancels it.
It runs in one replica (its ``runner``, an asyncio task there): each batch is one statement that
moves the messages, counts them on the task and refreshes its heartbeat, and only while the task
is still that runner's and running (a cancel, from any replica, stops it before its next batch).
A task whose runner stopped (a restart, a crash) keeps its row; once its heartbeat is older than
:func:`adoption_seconds`, the next sweep of any replica (:func:`tenure.sqs.app.sweeper`) takes it over
and resumes it where it stopped."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

from tenure.core.errors import first_line
from tenure.sqs import params as p
from tenure.sqs.errors import SqsError, invalid, missing
from tenure.sqs.service import WORKER_ID, Call, SqsService

log = logging.getLogger("tenure.sqs")
Reply = dict[str, Any]
RATE_MAX = 500
BATCH_MAX = 100


def _name_of(arn: Any, param: str) -> str:
    if not isinstance(arn, str) or not arn:
        raise missing(param)
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs":
        raise invalid(f"Value {arn} for parameter {param} is invalid. Reason: not an SQS queue ARN.")
    return parts[5]


def start_message_move_task(call: Call, params: dict[str, Any]) -> Reply:
    source = _name_of(params.get("SourceArn"), "SourceArn")
    destination = _name_of(params["DestinationArn"], "DestinationArn") if params.get("DestinationArn") else None
    rate = (p.integer(params["MaxNumberOfMessagesPerSecond"], "MaxNumberOfMessagesPerSecond", 1, RATE_MAX)
            if params.get("MaxNumberOfMessagesPerSecond") is not None else None)
    call.check_access(source)
    service = call.service
    handle = base64.urlsafe_b64encode(json.dumps({"source": source, "t": time.time_ns()}).encode()).decode()
    with service.repo() as repo:
        if repo.sqs_queue_get(source) is None:
            raise SqsError("ResourceNotFoundException", "The resource that you specified for the SourceArn "
                           "parameter doesn't exist.", status=400)
        sources = repo.sqs_dead_letter_sources(call.queue_arn(source))
        if destination is None and not sources:
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        target = destination or sources[0]
        call.check_access(target)
        if repo.sqs_queue_get(target) is None:
            raise SqsError("ResourceNotFoundException", "The destination queue does not exist.", status=400)
        total = int(repo.sqs_queue_counts(source, WORKER_ID)["visible"])
        if not repo.sqs_move_task_start(handle, source, params["SourceArn"], target, params.get("DestinationArn"),
                                        rate, total, service.replica_id):
            raise SqsError("UnsupportedOperation", "There is already a task running on this source queue.")
    launch(service, handle, source, target, rate)
    return {"TaskHandle": handle}


def launch(service: SqsService, handle: str, source: str, target: str, rate: int | None) -> None:
    """Run a task this replica now owns, on the event loop (from any thread)."""
    loop = service.wakeups.loop
    if loop is None:
        raise SqsError("InternalFailure", "The server is not ready.")

    def begin() -> None:
        runner = loop.create_task(_run(service, handle, source, target, rate))
        service.move_runners.add(runner)
        runner.add_done_callback(service.move_runners.discard)
    loop.call_soon_threadsafe(begin)


def adoption_seconds(service: SqsService) -> float:
    """How old a running task's heartbeat must be for another replica to take it over: well
    above the longest pause of a live runner (a batch takes at most a second at the slowest rate)."""
    return max(5.0, 3 * service.config.sweep_interval)


async def _run(service: SqsService, handle: str, source: str, target: str, rate: int | None) -> None:
    batch = min(rate or BATCH_MAX, BATCH_MAX)
    try:
        while True:
            started = time.monotonic()
            status, step = await service.run(_move_batch, service, handle, source, target, batch)
            if status != "RUNNING":  # completed, cancelled, or taken over by another replica
                return
            if rate:
                await asyncio.sleep(max(0.0, step / rate - (time.monotonic() - started)))
    except asyncio.CancelledError:  # the server stops: the task stays running, another replica resumes it
        raise
    except Exception as exc:  # recorded on the task, listed by ListMessageMoveTasks
        log.warning("sqs move task %s failed: %s", handle, first_line(exc))
        try:
            await service.run(_fail, service, handle, first_line(exc))
        except Exception:
            log.exception("sqs move task %s: could not record its failure", handle)


def _move_batch(service: SqsService, handle: str, source: str, target: str, limit: int) -> tuple[str | None, int]:
    with service.repo() as repo:
        repo.sqs_expire(source, WORKER_ID, None, None)
        row = repo.sqs_move_task_step(handle, service.replica_id, source, target, limit)
    return row["status"], int(row["step"])


def _fail(service: SqsService, handle: str, failure: str) -> None:
    with service.repo() as repo:
        repo.sqs_move_task_fail(handle, service.replica_id, failure)


def adopt(service: SqsService) -> int:
    """Take over and run the tasks whose runner stopped (part of each sweep, :func:`tenure.sqs.app.sweeper`)."""
    with service.repo() as repo:
        rows = repo.sqs_move_task_adopt(service.replica_id, adoption_seconds(service))
    for row in rows:
        log.info("sqs move task %s: its runner stopped, resumed here", row["handle"])
        launch(service, row["handle"], row["source_queue"], row["target_queue"], row["rate"])
    return len(rows)


def _entry(row: Any) -> Reply:
    out: Reply = {"TaskHandle": row["handle"], "Status": row["status"], "SourceArn": row["source_arn"],
                  "ApproximateNumberOfMessagesMoved": int(row["moved"]),
                  "ApproximateNumberOfMessagesToMove": int(row["total"]), "StartedTimestamp": int(row["started_ms"])}
    if row["destination_arn"]:
        out["DestinationArn"] = row["destination_arn"]
    if row["rate"]:
        out["MaxNumberOfMessagesPerSecond"] = int(row["rate"])
    if row["failure"]:
        out["FailureReason"] = row["failure"]
    return out


def list_message_move_tasks(call: Call, params: dict[str, Any]) -> Reply:
    source_arn = params.get("SourceArn")
    call.check_access(_name_of(source_arn, "SourceArn"))
    limit = p.integer(params.get("MaxResults", 1), "MaxResults", 1, 10)
    with call.service.repo() as repo:
        rows = repo.sqs_move_task_list(str(source_arn), limit)
    return {"Results": [_entry(r) for r in rows]}


def cancel_message_move_task(call: Call, params: dict[str, Any]) -> Reply:
    handle = params.get("TaskHandle")
    if not isinstance(handle, str) or not handle:
        raise missing("TaskHandle")
    with call.service.repo() as repo:
        row = repo.sqs_move_task_cancel(handle)
    if row is None:
        raise SqsError("ResourceNotFoundException", "The task handle does not exist.", status=400)
    if not row["cancelled"]:
        raise SqsError("UnsupportedOperation", f"The task is {row['status']}: only a running task can be cancelled.")
    return {"ApproximateNumberOfMessagesMoved": int(row["moved"])}
