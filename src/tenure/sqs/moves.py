"""Message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask): move
the messages of a dead-letter queue back to their source queue (or to a given destination) at
most MaxNumberOfMessagesPerSecond, like tenure's rate-limited DLQ replay.

A task runs inside the `tenure sqs` process that started it (an asyncio task); its state is
kept in memory, so a restart ends it (the messages moved so far stay moved)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from typing import Any

from tenure.core.errors import first_line
from tenure.sqs import params as p
from tenure.sqs.errors import SqsError, invalid, missing
from tenure.sqs.service import WORKER_ID, Call

Reply = dict[str, Any]
RATE_MAX = 500
TASKS_KEPT = 10


@dataclass
class MoveTask:
    handle: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    total: int
    started_ms: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str | None = None
    runner: asyncio.Task[None] | None = None

    def entry(self) -> Reply:
        out: Reply = {"TaskHandle": self.handle, "Status": self.status, "SourceArn": self.source_arn,
                      "ApproximateNumberOfMessagesMoved": self.moved,
                      "ApproximateNumberOfMessagesToMove": self.total, "StartedTimestamp": self.started_ms}
        if self.destination_arn:
            out["DestinationArn"] = self.destination_arn
        if self.rate:
            out["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure:
            out["FailureReason"] = self.failure
        return out


def _name_of(arn: Any, param: str) -> str:
    if not isinstance(arn, str) or not arn:
        raise missing(param)
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs":
        raise invalid(f"Value {arn} for parameter {param} is invalid. Reason: not an SQS queue ARN.")
    return parts[5]


def _tasks(call: Call) -> dict[str, MoveTask]:
    tasks: dict[str, MoveTask] = call.service.move_tasks
    return tasks


def start_message_move_task(call: Call, params: dict[str, Any]) -> Reply:
    source = _name_of(params.get("SourceArn"), "SourceArn")
    destination = _name_of(params["DestinationArn"], "DestinationArn") if params.get("DestinationArn") else None
    rate = (p.integer(params["MaxNumberOfMessagesPerSecond"], "MaxNumberOfMessagesPerSecond", 1, RATE_MAX)
            if params.get("MaxNumberOfMessagesPerSecond") is not None else None)
    call.check_access(source)
    with call.service.repo() as repo:
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
    tasks = _tasks(call)
    if any(t.source_arn == params["SourceArn"] and t.status == "RUNNING" for t in tasks.values()):
        raise SqsError("UnsupportedOperation", "There is already a task running on this source queue.")
    handle = base64.urlsafe_b64encode(json.dumps({"source": source, "t": time.time_ns()}).encode()).decode()
    task = MoveTask(handle, params["SourceArn"], params.get("DestinationArn"), rate, total, int(time.time() * 1000))
    tasks[handle] = task
    loop = call.service.wakeups.loop
    if loop is None:
        raise SqsError("InternalFailure", "The server is not ready.")
    asyncio.run_coroutine_threadsafe(_run(call, task, source, target), loop)
    for old in [h for h, t in tasks.items() if t.status != "RUNNING"][:-TASKS_KEPT]:
        tasks.pop(old, None)
    return {"TaskHandle": handle}


async def _run(call: Call, task: MoveTask, source: str, target: str) -> None:
    task.runner = asyncio.current_task()
    batch = min(task.rate or 100, 100)
    try:
        while task.status == "RUNNING":
            started = time.monotonic()
            moved = await call.service.run(_move_batch, call, source, target, batch)
            task.moved += moved
            if moved == 0:
                task.status = "COMPLETED"
                break
            if task.rate:
                await asyncio.sleep(max(0.0, moved / task.rate - (time.monotonic() - started)))
    except Exception as exc:  # recorded on the task, listed by ListMessageMoveTasks
        task.status, task.failure = "FAILED", first_line(exc)


def _move_batch(call: Call, source: str, target: str, limit: int) -> int:
    with call.service.repo() as repo:
        repo.sqs_expire(source, WORKER_ID, None, None)
        return repo.sqs_message_move(source, target, limit)


def list_message_move_tasks(call: Call, params: dict[str, Any]) -> Reply:
    source_arn = params.get("SourceArn")
    _name_of(source_arn, "SourceArn")
    limit = p.integer(params.get("MaxResults", 1), "MaxResults", 1, 10)
    found = [t for t in _tasks(call).values() if t.source_arn == source_arn]
    return {"Results": [t.entry() for t in reversed(found)][:limit]}


def cancel_message_move_task(call: Call, params: dict[str, Any]) -> Reply:
    handle = params.get("TaskHandle")
    if not isinstance(handle, str) or not handle:
        raise missing("TaskHandle")
    task = _tasks(call).get(handle)
    if task is None:
        raise SqsError("ResourceNotFoundException", "The task handle does not exist.", status=400)
    if task.status != "RUNNING":
        raise SqsError("UnsupportedOperation", f"The task is {task.status}: only a running task can be cancelled.")
    task.status = "CANCELLED"
    return {"ApproximateNumberOfMessagesMoved": task.moved}
