"""The message actions. SendMessage(Batch) inserts jobs; ReceiveMessage claims them (the
visibility timeout is the lease, the receipt handle seals the lock token); DeleteMessage(Batch)
is a fenced completion and ChangeMessageVisibility(Batch) a fenced lease change. The long-poll
loop of ReceiveMessage is in :mod:`tenure.sqs.app`; :func:`receive_once` is one attempt.

Traced as ``tenure enqueue`` and the worker are (:mod:`tenure.core.tracing`): each message sent
is a PRODUCER span ``send <queue>`` whose context is stored with the job, a child of the
message's ``traceparent`` message attribute, else of its ``AWSTraceHeader`` system attribute
(:func:`trace_parent`); each message received is a CONSUMER span ``receive <queue>``, a child of
its send span."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tenure.core import tracing
from tenure.core.repository import MAX_ATTEMPTS_LIMIT, SQS_TASK, ClaimedJob, SqsStore
from tenure.core.repository.specs import Row
from tenure.sqs import params as p
from tenure.sqs.errors import SqsError, invalid, missing
from tenure.sqs.queues import effective_attributes
from tenure.sqs.service import WORKER_ID, Call, SqsMessageStore
from tenure.sqs.wire import HandleError, md5_hex, md5_of_attributes, open_handle, seal_handle

Reply = dict[str, Any]
VISIBILITY_CAP_SECONDS = 43_200.0
"""A message's visibility ends at most 12 h after its first receive (SQS's bound)."""
_SYSTEM_NAMES = ("SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
                 "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
                 "DeadLetterQueueSourceArn")


def message_id(job_id: int) -> str:
    """A message id is the job id as a UUID (``int(id.replace('-', ''), 16)`` is the job id)."""
    return str(uuid.UUID(int=job_id))


@dataclass(frozen=True)
class Outgoing:
    """One validated message to send."""

    entry_id: str | None
    payload: dict[str, Any]
    delay: int
    reply: Reply
    size: int
    """Body and message attributes in bytes, as SQS counts a message's size."""
    flow_key: str | None = None
    """A standard queue's MessageGroupId, stored as the job's flow key (docs/flow.md)."""


def _outgoing(call: Call, queue: Row, entry: Mapping[str, Any], entry_id: str | None) -> Outgoing:
    attrs = effective_attributes(queue)
    body = p.message_body(entry.get("MessageBody"))
    user, user_size = p.message_attributes(entry.get("MessageAttributes"))
    system, _ = p.message_attributes(entry.get("MessageSystemAttributes"), system=True)
    size = len(body.encode()) + user_size
    limit = int(attrs["MaximumMessageSize"])
    if size > limit:
        raise invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")
    payload: dict[str, Any] = {"body": body}
    reply: Reply = {"MD5OfMessageBody": md5_hex(body.encode())}
    if user:
        payload["attributes"] = user
        reply["MD5OfMessageAttributes"] = md5_of_attributes(user)
    if system:
        payload["system_attributes"] = system
        reply["MD5OfMessageSystemAttributes"] = md5_of_attributes(system)
    if call.credential is not None:
        payload["sender"] = call.credential.access_key_id
    delay_given = entry.get("DelaySeconds")
    if queue["fifo"]:
        fifo_required(queue, entry)
        if delay_given is not None and p.integer(delay_given, "DelaySeconds", 0, 900) > 0:
            raise invalid(f"Value {delay_given} for parameter DelaySeconds is invalid. Reason: The request include "
                          "parameter that is not valid for this queue type.")
        payload["group"] = p.dedup_id(entry["MessageGroupId"], "MessageGroupId")
        dedup = entry.get("MessageDeduplicationId")
        if dedup is None:
            dedup = hashlib.sha256(body.encode()).hexdigest()
        payload["dedup"] = p.dedup_id(dedup)
        delay = int(attrs["DelaySeconds"])
    else:
        if entry.get("MessageDeduplicationId") is not None:
            raise invalid("Value for parameter MessageDeduplicationId is invalid. Reason: The request include "
                          "parameter that is not valid for this queue type.")
        # A standard queue takes a MessageGroupId as SQS fair queues do: the job's flow key, what
        # per-key limits count by (`tenure flow limit`); no ordering, unlike a FIFO group.
        group = entry.get("MessageGroupId")
        flow_key = p.dedup_id(group, "MessageGroupId") if group is not None else None
        delay = (p.integer(delay_given, "DelaySeconds", 0, 900) if delay_given is not None
                 else int(attrs["DelaySeconds"]))
        return Outgoing(entry_id, payload, delay, reply, size, flow_key)
    return Outgoing(entry_id, payload, delay, reply, size)


def fifo_required(queue: Row, entry: Mapping[str, Any]) -> None:
    """What a send to a FIFO queue must carry, as SQS checks it: a MessageGroupId (MissingParameter)
    and, unless the queue has ContentBasedDeduplication, a MessageDeduplicationId. In a batch SQS
    refuses the whole request for these (not one entry), as it does a single send."""
    if entry.get("MessageGroupId") is None:
        raise missing("MessageGroupId")
    if (entry.get("MessageDeduplicationId") is None
            and effective_attributes(queue).get("ContentBasedDeduplication") != "true"):
        raise invalid("The queue should either have ContentBasedDeduplication enabled or "
                      "MessageDeduplicationId provided explicitly")


TRACEPARENT_ATTRIBUTE = "traceparent"
"""The message attribute (DataType String) that carries a W3C parent of the send span."""


def trace_parent(payload: Mapping[str, Any]) -> str | None:
    """The parent of a message's send span, as a W3C traceparent: its ``traceparent`` message
    attribute (a String) when that is valid, else its ``AWSTraceHeader`` system attribute
    converted from X-Ray's format (:func:`tracing.traceparent_from_xray`), else None (the send
    span is then a root). A malformed carrier is ignored, never an error to the client."""
    attr = (payload.get("attributes") or {}).get(TRACEPARENT_ATTRIBUTE)
    if attr and str(attr.get("DataType", "")).startswith("String"):
        parent = tracing.parse_traceparent(attr.get("StringValue"))
        if parent is not None:
            return parent
    header = (payload.get("system_attributes") or {}).get("AWSTraceHeader")
    return tracing.traceparent_from_xray(header.get("StringValue")) if header else None


def _insert(call: Call, repo: SqsMessageStore, queue: Row, items: list[Outgoing]) -> list[int]:
    """Insert messages; a FIFO duplicate (same deduplication id within 5 minutes) is not
    inserted again and gets the id of the first. Traced: one PRODUCER span per message (a
    duplicate's is marked ``tenure.deduplicated``)."""
    name = queue["name"]
    spans = ([tracing.start_producer(name, SQS_TASK, parent=trace_parent(o.payload)) for o in items]
             if tracing.enabled() else [])
    try:
        ids, created = _write(repo, queue, items, [s.traceparent for s in spans] if spans else None)
    except BaseException as exc:
        for span in spans:
            span.failed(exc)
        raise
    else:
        for span, job_id, new in zip(spans, ids, created):
            span.sent(job_id, created=new)
    finally:
        for span in spans:
            span.end()
    return ids


def _write(repo: SqsMessageStore, queue: Row, items: list[Outgoing],
           contexts: list[str | None] | None) -> tuple[list[int], list[bool]]:
    """The job id of each message, and whether it was inserted (False: a FIFO duplicate)."""
    name = queue["name"]
    texts = [json.dumps(o.payload, ensure_ascii=False) for o in items]
    if not queue["fifo"]:
        return (repo.sqs_send(name, texts, [o.delay for o in items], MAX_ATTEMPTS_LIMIT, contexts,
                              [o.flow_key for o in items]), [True] * len(items))
    with repo.conn.transaction():
        repo.sqs_fifo_lock(name, "send")
        known = repo.sqs_dedup_lookup(name, [o.payload["dedup"] for o in items])
        new: list[int] = []
        seen = set(known)
        for i, item in enumerate(items):
            if item.payload["dedup"] not in seen:
                seen.add(item.payload["dedup"])
                new.append(i)
        ids = repo.sqs_send(name, [texts[i] for i in new], [items[i].delay for i in new], MAX_ATTEMPTS_LIMIT,
                            [contexts[i] for i in new] if contexts is not None else None)
        created = {items[i].payload["dedup"]: job for i, job in zip(new, ids)}
        repo.sqs_dedup_record(name, created)
        known.update(created)
    inserted = set(new)
    return [known[o.payload["dedup"]] for o in items], [i in inserted for i in range(len(items))]


def _sent_reply(queue: Row, item: Outgoing, job_id: int) -> Reply:
    reply = {**item.reply, "MessageId": message_id(job_id)}
    if queue["fifo"]:
        reply["SequenceNumber"] = f"{job_id:020d}"
    return reply


def send_message(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        item = _outgoing(call, queue, params, None)
        [job_id] = _insert(call, repo, queue, [item])
    return _sent_reply(queue, item, job_id)


def _batch_error(entry_id: str, exc: SqsError) -> Reply:
    return {"Id": entry_id, "SenderFault": exc.status < 500, "Code": exc.code, "Message": exc.message}


def send_message_batch(call: Call, params: dict[str, Any]) -> Reply:
    entries = p.entry_ids(params.get("Entries"), "SendMessageBatchRequestEntry")
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        # The whole batch's size first, as SQS checks it (before any entry's own checks).
        sent = sum(len(e["MessageBody"].encode()) for e in entries if isinstance(e.get("MessageBody"), str))
        if sent > p.MESSAGE_SIZE_MAX:
            raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {p.MESSAGE_SIZE_MAX} "
                           f"bytes. You have sent {sent} bytes.")
        if queue["fifo"]:
            for entry in entries:
                fifo_required(queue, entry)
        good: list[Outgoing] = []
        failed: list[Reply] = []
        total = 0
        for entry in entries:
            try:
                item = _outgoing(call, queue, entry, entry["Id"])
            except SqsError as exc:
                failed.append(_batch_error(entry["Id"], exc))
                continue
            total += item.size
            good.append(item)
        if total > p.MESSAGE_SIZE_MAX:
            raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {p.MESSAGE_SIZE_MAX} "
                           f"bytes. You have sent {total} bytes.")
        ids = _insert(call, repo, queue, good) if good else []
    return {"Successful": [{"Id": o.entry_id, **_sent_reply(queue, o, job)} for o, job in zip(good, ids)],
            "Failed": failed}


@dataclass(frozen=True)
class ReceiveRequest:
    queue: Row
    limit: int
    visibility: int
    wait: int
    system_names: frozenset[str]
    attribute_names: tuple[str, ...]


def receive_request(call: Call, repo: SqsStore, params: dict[str, Any]) -> ReceiveRequest:
    queue = call.queue(repo, params, cached=True)
    attrs = effective_attributes(queue)
    limit = p.integer(params.get("MaxNumberOfMessages", 1), "MaxNumberOfMessages", 1, 10)
    visibility = p.integer(params.get("VisibilityTimeout", attrs["VisibilityTimeout"]), "VisibilityTimeout", 0,
                           p.VISIBILITY_MAX)
    wait = p.integer(params.get("WaitTimeSeconds", attrs["ReceiveMessageWaitTimeSeconds"]), "WaitTimeSeconds",
                     0, 20)
    names: set[str] = set()
    for key in ("AttributeNames", "MessageSystemAttributeNames"):
        given = params.get(key) or []
        if not isinstance(given, list):
            raise invalid(f"{key} must be a list.")
        for name in given:
            if name == "All":
                names.update(_SYSTEM_NAMES)
            elif name in _SYSTEM_NAMES:
                names.add(name)
            else:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    wanted = params.get("MessageAttributeNames") or []
    if not isinstance(wanted, list) or not all(isinstance(n, str) for n in wanted):
        raise invalid("MessageAttributeNames must be a list of names.")
    return ReceiveRequest(queue, limit, visibility, wait, frozenset(names), tuple(wanted))


def _attribute_filter(wanted: tuple[str, ...]) -> Callable[[str], bool]:
    if "All" in wanted or ".*" in wanted:
        return lambda name: True
    prefixes = tuple(n[:-1] for n in wanted if n.endswith(".*"))
    exact = frozenset(wanted)
    return lambda name: name in exact or name.startswith(prefixes) if prefixes else name in exact


def _message(call: Call, req: ReceiveRequest, job: ClaimedJob, times: tuple[int, int]) -> Reply:
    payload = job.payload
    sqs_shaped = isinstance(payload, dict) and isinstance(payload.get("body"), str)
    body = payload["body"] if sqs_shaped else json.dumps(payload, separators=(",", ":"))
    meta = payload if sqs_shaped else {}
    name = req.queue["name"]
    message: Reply = {"MessageId": message_id(job.id), "ReceiptHandle": seal_handle(call.service.key, name,
                                                                                 job.id, job.lock_token),
                      "MD5OfBody": md5_hex(body.encode()), "Body": body}
    system = {"SenderId": str(meta.get("sender", call.config.account_id)), "SentTimestamp": str(times[1]),
              "ApproximateReceiveCount": str(job.attempt), "ApproximateFirstReceiveTimestamp": str(times[0])}
    if req.queue["fifo"]:
        system.update(SequenceNumber=f"{job.id:020d}", MessageDeduplicationId=str(meta.get("dedup", job.id)),
                      MessageGroupId=str(meta.get("group", "")))
    elif job.flow_key is not None:  # a standard queue's MessageGroupId (a fair queue's tenant)
        system["MessageGroupId"] = job.flow_key
    trace = (meta.get("system_attributes") or {}).get("AWSTraceHeader")
    if trace:
        system["AWSTraceHeader"] = trace["StringValue"]
    chosen = {k: v for k, v in system.items() if k in req.system_names}
    if chosen:
        message["Attributes"] = chosen
    keep = _attribute_filter(req.attribute_names)
    user = {k: v for k, v in (meta.get("attributes") or {}).items() if keep(k)}
    if user:
        message["MessageAttributes"] = user
        message["MD5OfMessageAttributes"] = md5_of_attributes(user)
    return message


def receive_first(call: Call, params: dict[str, Any]) -> tuple[ReceiveRequest, list[Reply]]:
    """The validated request and the first claim attempt, on one connection."""
    with call.service.repo() as repo:
        req = receive_request(call, repo, params)
        return req, _receive(call, req, repo)


def receive_once(call: Call, req: ReceiveRequest) -> list[Reply]:
    """One claim attempt: expired visibility first (redrive past maxReceiveCount), then the claim."""
    with call.service.repo() as repo:
        return _receive(call, req, repo)


def _receive(call: Call, req: ReceiveRequest, repo: SqsStore) -> list[Reply]:
    """Expired visibility first (redrive past maxReceiveCount), the claim (the FIFO lane on a
    FIFO queue) and the first receives: one round trip (:meth:`SqsStore.sqs_receive`)."""
    target = p.redrive_target(req.queue["attributes"])
    started = time.time_ns()
    jobs, times = repo.sqs_receive(WORKER_ID, req.queue["name"], req.limit, float(req.visibility),
                                   fifo=bool(req.queue["fifo"]), dlq=target[0] if target else None,
                                   max_receive=target[1] if target else None)
    if jobs and req.visibility == 0:  # received, and visible again at once
        repo.sqs_change_visibility(WORKER_ID, [(j.id, j.lock_token, 0.0) for j in jobs], VISIBILITY_CAP_SECONDS)
    if jobs and tracing.enabled():
        for j in jobs:
            tracing.record_receive(queue=j.queue, task=j.task, job_id=j.id, attempt=j.attempt, fence=j.fence,
                                   trace_context=j.trace_context, worker_id=WORKER_ID, start_time=started)
    return [_message(call, req, j, times.get(j.id, (0, 0))) for j in jobs]


def _handle(call: Call, queue: Row, handle: Any) -> tuple[int, uuid.UUID]:
    if not isinstance(handle, str) or not handle:
        raise missing("ReceiptHandle")
    try:
        return open_handle(call.service.key, queue["name"], handle)
    except HandleError:
        raise SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle[:80]}" is not a valid '
                       "receipt handle.") from None


def _strict(queue: Row) -> bool:
    return bool(queue["attributes"].get("strict") == "true")


def _stale(queue: Row) -> SqsError:
    return SqsError("ReceiptHandleIsInvalid", "The receipt handle has expired: the message was received again "
                    "or deleted since (strict queue).")


def delete_message(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        job_id, token = _handle(call, queue, params.get("ReceiptHandle"))
        accepted = repo.complete_many(WORKER_ID, [(job_id, token)]).get(job_id, False)
    if not accepted and _strict(queue):
        raise _stale(queue)
    return {}


def delete_message_batch(call: Call, params: dict[str, Any]) -> Reply:
    entries = p.entry_ids(params.get("Entries"), "DeleteMessageBatchRequestEntry")
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        handles: list[tuple[str, int, uuid.UUID]] = []
        failed: list[Reply] = []
        for entry in entries:
            try:
                handles.append((entry["Id"], *_handle(call, queue, entry.get("ReceiptHandle"))))
            except SqsError as exc:
                failed.append(_batch_error(entry["Id"], exc))
        done = repo.complete_many(WORKER_ID, [(h[1], h[2]) for h in handles]) if handles else {}
    ok = []
    for entry_id, job_id, _ in handles:
        if done.get(job_id) or not _strict(queue):
            ok.append({"Id": entry_id})
        else:
            failed.append(_batch_error(entry_id, _stale(queue)))
    return {"Successful": ok, "Failed": failed}


def _visibility_error(outcome: str, queue: Row) -> SqsError:
    if outcome == "capped":
        return invalid("Value for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for "
                       "the message is beyond the limit [43200 seconds]")
    if _strict(queue):
        return _stale(queue)
    return SqsError("MessageNotInflight", "The message referred to isn't in flight.")


def change_message_visibility(call: Call, params: dict[str, Any]) -> Reply:
    if params.get("VisibilityTimeout") is None:
        raise missing("VisibilityTimeout")
    timeout = p.integer(params["VisibilityTimeout"], "VisibilityTimeout", 0, p.VISIBILITY_MAX)
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        job_id, token = _handle(call, queue, params.get("ReceiptHandle"))
        [outcome] = repo.sqs_change_visibility(WORKER_ID, [(job_id, token, float(timeout))], VISIBILITY_CAP_SECONDS)
    if outcome != "changed":
        raise _visibility_error(outcome, queue)
    return {}


def change_message_visibility_batch(call: Call, params: dict[str, Any]) -> Reply:
    entries = p.entry_ids(params.get("Entries"), "ChangeMessageVisibilityBatchRequestEntry")
    with call.service.repo() as repo:
        queue = call.queue(repo, params, cached=True)
        changes: list[tuple[str, int, uuid.UUID, float]] = []
        failed: list[Reply] = []
        for entry in entries:
            try:
                if entry.get("VisibilityTimeout") is None:
                    raise missing("VisibilityTimeout")
                timeout = p.integer(entry["VisibilityTimeout"], "VisibilityTimeout", 0, p.VISIBILITY_MAX)
                changes.append((entry["Id"], *_handle(call, queue, entry.get("ReceiptHandle")), float(timeout)))
            except SqsError as exc:
                failed.append(_batch_error(entry["Id"], exc))
        outcomes = repo.sqs_change_visibility(WORKER_ID, [c[1:] for c in changes],
                                              VISIBILITY_CAP_SECONDS) if changes else []
    ok = []
    for change, outcome in zip(changes, outcomes):
        if outcome == "changed":
            ok.append({"Id": change[0]})
        else:
            failed.append(_batch_error(change[0], _visibility_error(outcome, queue)))
    return {"Successful": ok, "Failed": failed}
