"""The queue actions: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue, the queue
attributes, tags and ListDeadLetterSourceQueues. Each takes a :class:`Call` and the request's
parameters (the AWS JSON 1.0 shape) and returns the reply's, on a pool connection."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from tenure.core.repository import SqsStore
from tenure.core.repository.specs import Row
from tenure.sqs import params as p
from tenure.sqs.errors import SqsError, invalid, no_queue
from tenure.sqs.service import WORKER_ID, Call

Reply = dict[str, Any]
_TAG_KEY = re.compile(r"^[\w.:/=+\-@ ]{1,128}$")
TAGS_MAX = 50


def _tags(tags: Any) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise invalid("Tags must be a map of keys to values.")
    if len(tags) > TAGS_MAX:
        raise invalid(f"Too many tags: at most {TAGS_MAX}.")
    for key, value in tags.items():
        if not isinstance(key, str) or not _TAG_KEY.match(key) or not isinstance(value, str) or len(value) > 256:
            raise invalid(f"Tag {key!r} is invalid: keys 1-128 characters, values at most 256.")
    return dict(tags)


def effective_attributes(row: Row) -> dict[str, str]:
    """A queue's settable attributes with SQS's defaults for those never set."""
    attrs = dict(p.QUEUE_ATTRIBUTE_DEFAULTS)
    if row["fifo"]:
        attrs.update(FifoQueue="true", ContentBasedDeduplication="false", DeduplicationScope="queue",
                     FifoThroughputLimit="perQueue")
    attrs.update(row["attributes"])
    for empty in [k for k in p.REMOVABLE if attrs.get(k) == ""]:
        del attrs[empty]  # stored empty before an empty value removed it
    return attrs


def create_queue(call: Call, params: dict[str, Any]) -> Reply:
    name = p.queue_name(params.get("QueueName"))
    call.check_access(name)
    fifo = name.endswith(".fifo")
    given = params.get("Attributes") or {}
    if isinstance(given, Mapping) and given.get("FifoQueue") in ("true", True) and not fifo:
        raise invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
                      "underscores, must end with .fifo suffix.")
    attrs = p.queue_attributes(given, fifo=fifo, creating=True)
    attrs.pop("FifoQueue", None)
    for empty in [k for k in p.REMOVABLE if attrs.get(k) == ""]:
        del attrs[empty]  # an empty Policy or RedrivePolicy: none
    tags = _tags(params.get("tags"))
    with call.service.repo() as repo:
        _check_redrive(call, repo, attrs)
        row = repo.sqs_queue_create(name, fifo, attrs, tags)
    call.forget_queue(name)
    if not row["created"]:
        current = effective_attributes(row)
        if any(current.get(k) != v for k, v in attrs.items()):
            raise SqsError("QueueNameExists", f"A queue already exists with the same name and a different value "
                           f"for attribute(s) {', '.join(k for k, v in attrs.items() if current.get(k) != v)}")
    return {"QueueUrl": call.queue_url(name)}


def _check_redrive(call: Call, repo: SqsStore, attrs: Mapping[str, str]) -> None:
    target = p.redrive_target(attrs)
    if target is not None and repo.sqs_queue_get(target[0]) is None:
        raise SqsError("InvalidParameterValue", "Value for parameter RedrivePolicy is invalid. Reason: "
                       "Dead letter target does not exist.")


def get_queue_url(call: Call, params: dict[str, Any]) -> Reply:
    name = params.get("QueueName")
    if not isinstance(name, str) or not name:
        raise SqsError("MissingParameter", "The request must contain the parameter QueueName.")
    call.check_access(name)
    with call.service.repo() as repo:
        if repo.sqs_queue_get(name) is None:
            raise no_queue()
    return {"QueueUrl": call.queue_url(name)}


def _encode_token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def _decode_token(token: Any) -> str:
    try:
        return base64.urlsafe_b64decode(str(token).encode()).decode()
    except (binascii.Error, ValueError):
        raise invalid("Invalid NextToken value.") from None


def list_queues(call: Call, params: dict[str, Any]) -> Reply:
    prefix = params.get("QueueNamePrefix") or ""
    if not isinstance(prefix, str):
        raise invalid("QueueNamePrefix must be a string.")
    limit = p.integer(params["MaxResults"], "MaxResults", 1, 1000) if params.get("MaxResults") is not None else None
    after = _decode_token(params["NextToken"]) if params.get("NextToken") else ""
    names: list[str] = []
    with call.service.repo() as repo:
        while len(names) < (limit or 1000) + 1:
            batch = repo.sqs_queue_list(prefix, after, 1000)
            if not batch:
                break
            names += [n for n in batch if call.credential is None or call.credential.allows(n)]
            after = batch[-1]
    reply: Reply = {}
    shown = names[:limit or 1000]
    if shown:
        reply["QueueUrls"] = [call.queue_url(n) for n in shown]
    if limit is not None and len(names) > limit:
        reply["NextToken"] = _encode_token(shown[-1])
    return reply


def delete_queue(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        repo.sqs_queue_delete(row["name"])
    call.forget_queue(row["name"])
    return {}


def purge_queue(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        repo.sqs_queue_purge(row["name"], WORKER_ID)
    return {}


_ALL_NAMES = (*p.QUEUE_ATTRIBUTE_DEFAULTS, "Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId",
              "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "FifoQueue", "ContentBasedDeduplication",
              "DeduplicationScope", "FifoThroughputLimit", *sorted(p.READ_ONLY))


def get_queue_attributes(call: Call, params: dict[str, Any]) -> Reply:
    wanted = params.get("AttributeNames") or []
    if not isinstance(wanted, list):
        raise invalid("AttributeNames must be a list.")
    for name in wanted:
        if name != "All" and name not in p.READ_ONLY and name not in p.SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        counts = repo.sqs_queue_counts(row["name"], WORKER_ID) if wanted else None
    if not wanted:
        return {}
    values = effective_attributes(row)
    assert counts is not None
    values.update(QueueArn=call.queue_arn(row["name"]), ApproximateNumberOfMessages=str(counts["visible"]),
                  ApproximateNumberOfMessagesNotVisible=str(counts["in_flight"]),
                  ApproximateNumberOfMessagesDelayed=str(counts["delayed"]),
                  CreatedTimestamp=str(row["created_epoch"]), LastModifiedTimestamp=str(row["modified_epoch"]))
    names = [n for n in _ALL_NAMES if n in values] + (["strict"] if "strict" in values else [])
    chosen = names if "All" in wanted else [n for n in wanted if n in values]
    return {"Attributes": {n: values[n] for n in chosen}} if chosen else {}


def set_queue_attributes(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        given = params.get("Attributes")
        if given is None:
            raise SqsError("MissingParameter", "The request must contain the parameter Attributes.")
        attrs = p.queue_attributes(given, fifo=row["fifo"], creating=False)
        _check_redrive(call, repo, attrs)
        removed = [n for n in p.REMOVABLE if attrs.get(n) == ""]
        repo.sqs_queue_set_attributes(row["name"], {k: v for k, v in attrs.items() if k not in removed}, removed)
    call.forget_queue(row["name"])
    return {}


def tag_queue(call: Call, params: dict[str, Any]) -> Reply:
    tags = _tags(params.get("Tags"))
    if not tags:
        raise SqsError("MissingParameter", "The request must contain the parameter Tags.")
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        if len({**row["tags"], **tags}) > TAGS_MAX:
            raise invalid(f"Too many tags: a queue has at most {TAGS_MAX}.")
        repo.sqs_queue_tag(row["name"], tags)
    return {}


def untag_queue(call: Call, params: dict[str, Any]) -> Reply:
    keys = params.get("TagKeys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise SqsError("MissingParameter", "The request must contain the parameter TagKeys.")
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        repo.sqs_queue_untag(row["name"], keys)
    return {}


def list_queue_tags(call: Call, params: dict[str, Any]) -> Reply:
    with call.service.repo() as repo:
        row = call.queue(repo, params)
    return {"Tags": dict(row["tags"])} if row["tags"] else {}


def list_dead_letter_source_queues(call: Call, params: dict[str, Any]) -> Reply:
    limit = p.integer(params["MaxResults"], "MaxResults", 1, 1000) if params.get("MaxResults") is not None else None
    after = _decode_token(params["NextToken"]) if params.get("NextToken") else ""
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        names = [n for n in repo.sqs_dead_letter_sources(call.queue_arn(row["name"])) if n > after]
    shown = names[:limit] if limit else names
    reply: Reply = {"queueUrls": [call.queue_url(n) for n in shown]}
    if limit is not None and len(names) > limit:
        reply["NextToken"] = _encode_token(shown[-1])
    return reply
