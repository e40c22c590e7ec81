"""The queue actions: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue, the queue
attributes, tags and ListDeadLetterSourceQueues. Each takes a :class:`Call` and the request's
parameters (the AWS JSON 1.0 shape) and returns the reply's, on a pool connection."""

from __future__ import annotations

import base64
import binascii
import json
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


def _tags(tags: Any, queue: str = "") -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise invalid("Tags must be a map of keys to values.")
    if len(tags) > TAGS_MAX:
        raise invalid(f"Too many tags added for queue {queue}.")
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
    tags = _tags(params.get("tags"), name)
    with call.service.repo() as repo:
        _check_redrive(call, repo, attrs, fifo=fifo)
        row = repo.sqs_queue_create(name, fifo, attrs, tags)
    call.forget_queue(name)
    call.service.metrics.expired.labels(name)  # its expiry counter reads 0 from now on, not no data
    if not row["created"]:
        current = effective_attributes(row)
        if any(current.get(k) != v for k, v in attrs.items()):
            raise SqsError("QueueNameExists", f"A queue already exists with the same name and a different value "
                           f"for attribute(s) {', '.join(k for k, v in attrs.items() if current.get(k) != v)}")
    return {"QueueUrl": call.queue_url(name)}


def _check_redrive(call: Call, repo: SqsStore, attrs: Mapping[str, str], *, fifo: bool) -> None:
    """The dead-letter queue of a RedrivePolicy exists and is of the source's type (FIFO or
    standard), as SQS checks both."""
    target = p.redrive_target(attrs)
    if target is None:
        return
    dlq = repo.sqs_queue_get(target[0])
    if dlq is None:
        raise p.redrive_error(attrs["RedrivePolicy"], "Dead letter target does not exist.")
    if bool(dlq["fifo"]) != fifo:
        raise p.redrive_error(attrs["RedrivePolicy"], "Dead-letter queue must be same type of queue as the source.")


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
        _check_redrive(call, repo, attrs, fifo=bool(row["fifo"]))
        removed = [n for n in p.REMOVABLE if attrs.get(n) == ""]
        repo.sqs_queue_set_attributes(row["name"], {k: v for k, v in attrs.items() if k not in removed}, removed)
    call.forget_queue(row["name"])
    return {}


def tag_queue(call: Call, params: dict[str, Any]) -> Reply:
    tags = _tags(params.get("Tags"), call.queue_name_of(params))
    if not tags:
        raise SqsError("MissingParameter", "The request must contain the parameter Tags.")
    with call.service.repo() as repo:
        row = call.queue(repo, params)
        if len({**row["tags"], **tags}) > TAGS_MAX:
            raise invalid(f"Too many tags added for queue {row['name']}.")
        repo.sqs_queue_tag(row["name"], tags)
    return {}


def untag_queue(call: Call, params: dict[str, Any]) -> Reply:
    keys = params.get("TagKeys")
    if keys is None:
        raise SqsError("MissingParameter", "The request must contain the parameter TagKeys.")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and 1 <= len(k) <= 128 for k in keys):
        raise invalid("Tag keys must be between 1 and 128 characters in length.")
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


PERMISSION_ACTIONS = frozenset(("*", "ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl",
                                "ListDeadLetterSourceQueues", "PurgeQueue", "ReceiveMessage", "SendMessage"))
"""The actions AddPermission grants (SQS's: the others only the queue's owner may call)."""
PERMISSION_ACTIONS_MAX = 7
_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ACCOUNT = re.compile(r"^\d{12}$")


def _label(params: dict[str, Any]) -> str:
    label = params.get("Label")
    if label is None or label == "":
        raise SqsError("MissingParameter", "The request must contain the parameter Label.")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise invalid(f"Value {label} for parameter Label is invalid. Reason: Can only include alphanumeric "
                      "characters, hyphens, or underscores. 1 to 80 in length.")
    return label


def _policy(call: Call, row: Row) -> dict[str, Any]:
    """The queue's Policy as a document (an empty one with SQS's default Id when it has none)."""
    text = row["attributes"].get("Policy") or ""
    if not text:
        return {"Version": "2012-10-17", "Id": f"{call.queue_arn(row['name'])}/SQSDefaultPolicy", "Statement": []}
    try:
        policy = json.loads(text)
    except ValueError:
        policy = None
    if not isinstance(policy, dict):
        raise invalid("The queue's Policy is not a JSON policy document.")
    statements = policy.get("Statement", [])
    policy["Statement"] = statements if isinstance(statements, list) else [statements]
    return policy


def _write_policy(repo: SqsStore, name: str, policy: dict[str, Any]) -> None:
    if policy["Statement"]:
        repo.sqs_queue_set_attributes(name, {"Policy": json.dumps(policy, separators=(",", ":"))})
    else:  # no statement left: no Policy, as SQS shows it
        repo.sqs_queue_set_attributes(name, {}, ["Policy"])


def add_permission(call: Call, params: dict[str, Any]) -> Reply:
    """A statement in the queue's Policy (Sid the label; SQS's shape), not enforced: tenure
    authorises by its credentials file (docs/sqs.md)."""
    label = _label(params)
    actions = params.get("Actions") or []
    if not isinstance(actions, list) or not actions:
        raise SqsError("MissingParameter", "The request must contain the parameter Actions.")
    accounts = params.get("AWSAccountIds") or []
    if not isinstance(accounts, list) or not accounts:
        raise invalid("Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    if len(actions) > PERMISSION_ACTIONS_MAX:
        raise SqsError("OverLimit", f"{len(actions)} Actions were found, maximum allowed is {PERMISSION_ACTIONS_MAX}.")
    for action in actions:
        if action not in PERMISSION_ACTIONS:
            raise invalid(f"Value SQS:{action} for parameter ActionName is invalid. Reason: Only the queue owner is "
                          "allowed to invoke this action.")
    for account in accounts:
        if not isinstance(account, str) or not _ACCOUNT.match(account):
            raise invalid(f"Value [{account}] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    name = call.queue_name_of(params)
    call.check_access(name)
    with call.service.repo() as repo, repo.conn.transaction():
        row = repo.sqs_queue_lock(name)
        if row is None:
            raise no_queue()
        policy = _policy(call, row)
        if any(isinstance(s, dict) and s.get("Sid") == label for s in policy["Statement"]):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
        principals = [f"arn:aws:iam::{a}:root" for a in accounts]
        granted = [f"SQS:{a}" for a in actions]
        policy["Statement"].append({"Sid": label, "Effect": "Allow",
                                    "Principal": {"AWS": principals[0] if len(principals) == 1 else principals},
                                    "Action": granted[0] if len(granted) == 1 else granted,
                                    "Resource": call.queue_arn(name)})
        _write_policy(repo, name, policy)
    call.forget_queue(name)
    return {}


def remove_permission(call: Call, params: dict[str, Any]) -> Reply:
    """Remove the statement of that label from the queue's Policy (an error if none has it)."""
    label = _label(params)
    name = call.queue_name_of(params)
    call.check_access(name)
    with call.service.repo() as repo, repo.conn.transaction():
        row = repo.sqs_queue_lock(name)
        if row is None:
            raise no_queue()
        policy = _policy(call, row)
        kept = [s for s in policy["Statement"] if not (isinstance(s, dict) and s.get("Sid") == label)]
        if len(kept) == len(policy["Statement"]):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: can't find label on existing "
                          "policy.")
        _write_policy(repo, name, {**policy, "Statement": kept})
    call.forget_queue(name)
    return {}
