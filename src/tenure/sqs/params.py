"""Validation of SQS parameters, with SQS's documented limits and error codes. Pure functions:
each returns the cleaned value or raises :class:`~tenure.sqs.errors.SqsError`."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from tenure.sqs.errors import SqsError, invalid, missing

MESSAGE_SIZE_MAX = 1_048_576
"""SQS's message size limit (1 MiB since 2025): the default and the maximum of MaximumMessageSize,
and the limit of a batch's total size. SQS messages do not pass through the core payload limit
(``TENURE_MAX_PAYLOAD_BYTES``): a message up to its queue's MaximumMessageSize is stored."""
VISIBILITY_MAX = 43_200
BATCH_MAX = 10
ATTRIBUTES_PER_MESSAGE_MAX = 10

QUEUE_ATTRIBUTE_DEFAULTS = {
    "DelaySeconds": "0", "MaximumMessageSize": str(MESSAGE_SIZE_MAX), "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0", "VisibilityTimeout": "30",
}
_RANGES = {
    "DelaySeconds": (0, 900), "MaximumMessageSize": (1024, MESSAGE_SIZE_MAX),
    "MessageRetentionPeriod": (60, 1_209_600), "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, VISIBILITY_MAX), "KmsDataKeyReusePeriodSeconds": (60, 86_400),
}
_FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
REMOVABLE = frozenset(("Policy", "RedrivePolicy", "RedriveAllowPolicy"))
"""Attributes an empty value removes (SetQueueAttributes), as in SQS."""
_STORED = ("Policy", "KmsMasterKeyId", "SqsManagedSseEnabled", "RedrivePolicy", "RedriveAllowPolicy", "strict")
SETTABLE = frozenset((*_RANGES, *_FIFO_ONLY, *_STORED, "FifoQueue"))
READ_ONLY = frozenset((
    "QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp"))

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ATTR_NAME = re.compile(r"^[A-Za-z0-9_\-.]{1,256}$")
_DATA_TYPE = re.compile(r"^(String|Number|Binary)(\.[^\s]{1,250})?$")
_BAD_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d{1,18}$")
_DEDUP = re.compile(r"^[!-~]{1,128}$")


def queue_name(name: Any) -> str:
    if name is None:
        raise missing("QueueName")
    if not isinstance(name, str) or not name:  # an empty name is an invalid one, as SQS answers
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    base = name[:-5] if name.endswith(".fifo") else name
    if len(name) > 80 or not _QUEUE_NAME.match(base):
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    return name


def integer(value: Any, name: str, low: int, high: int) -> int:
    """An integer parameter (the query protocol sends text) within [low, high]."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INTEGER.match(value.strip()):
        number = int(value)
    else:
        raise invalid(f"Value {value!r} for parameter {name} is invalid. Reason: must be an integer.")
    if not low <= number <= high:
        raise invalid(f"Value {number} for parameter {name} is invalid. Reason: Must be between {low} and {high}.")
    return number


def _redrive(value: str) -> dict[str, Any]:
    try:
        policy = json.loads(value)
    except ValueError:
        policy = None
    if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Redrive "
                       "policy is not a dict or valid json, or lacks deadLetterTargetArn and maxReceiveCount.")
    integer(policy["maxReceiveCount"], "RedrivePolicy.maxReceiveCount", 1, 1000)
    return policy


def _normal_redrive(text: str, policy: dict[str, Any]) -> str:
    """A RedrivePolicy as SQS returns it: maxReceiveCount a number even when sent as text (the
    text as sent otherwise)."""
    if not isinstance(policy["maxReceiveCount"], str):
        return text
    return json.dumps({**policy, "maxReceiveCount": int(policy["maxReceiveCount"])})


def redrive_error(value: str, reason: str) -> SqsError:
    """SQS's refusal of a RedrivePolicy it parsed, with the value as sent and the reason."""
    return invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: {reason}")


def queue_attributes(attrs: Any, *, fifo: bool, creating: bool) -> dict[str, str]:
    """Cleaned, settable queue attributes (names as SQS spells them, values as text)."""
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise invalid("Attributes must be a map of attribute names to values.")
    out: dict[str, str] = {}
    for given, raw in attrs.items():
        name = given.strip() if isinstance(given, str) else given  # "VisibilityTimeout " is that attribute
        value = str(raw).lower() if isinstance(raw, bool) else str(raw)
        if name not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in _RANGES:
            low, high = _RANGES[name]
            try:
                integer(value, name, low, high)
            except SqsError:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.") from None
        elif name == "FifoQueue":
            if not creating or value.lower() not in ("true", "false") or (value.lower() == "true") != fifo:
                raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: "
                               "a FIFO queue's name ends in .fifo, and only it has FifoQueue=true.")
            value = value.lower()
        elif name in _FIFO_ONLY:
            if not fifo:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        elif name == "RedrivePolicy" and value:
            value = _normal_redrive(value, _redrive(value))
        elif name == "strict" and value.lower() not in ("true", "false"):
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter strict: true or false.")
        if name in ("ContentBasedDeduplication", "strict", "SqsManagedSseEnabled"):
            if value.lower() not in ("true", "false"):
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            value = value.lower()
        out[name] = value
    return out


def redrive_target(attributes: Mapping[str, str]) -> tuple[str, int] | None:
    """``(dead-letter queue name, maxReceiveCount)`` of a queue's RedrivePolicy, if it has one."""
    value = attributes.get("RedrivePolicy")
    if not value:
        return None
    policy = _redrive(value)
    return str(policy["deadLetterTargetArn"]).rsplit(":", 1)[-1], int(policy["maxReceiveCount"])


def entry_ids(entries: Any, name: str) -> list[Mapping[str, Any]]:
    """A batch's entries: 1 to 10, each with a distinct valid Id."""
    if not isinstance(entries, list) or not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {name} in the request.")
    if len(entries) > BATCH_MAX:
        raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {BATCH_MAX}. "
                       f"You have sent {len(entries)}.")
    seen: set[str] = set()
    for entry in entries:
        ident = entry.get("Id") if isinstance(entry, Mapping) else None
        if not isinstance(ident, str) or not _ENTRY_ID.match(ident):
            raise SqsError("InvalidBatchEntryId", f"A batch entry id can only contain alphanumeric characters, "
                           "hyphens and underscores. It can be at most 80 letters long.")
        if ident in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {ident} repeated.")
        seen.add(ident)
    return entries


def message_body(body: Any) -> str:
    if not isinstance(body, str) or body == "":
        raise missing("MessageBody")
    bad = _BAD_CHARS.search(body)
    if bad:
        raise SqsError("InvalidMessageContents", f"Invalid characters found. Deleted message body contains "
                       f"#x{ord(bad.group()):X}, which is not allowed.")
    return body


def message_attributes(attrs: Any, *, system: bool = False) -> tuple[dict[str, dict[str, str]], int]:
    """Cleaned message attributes (binary values base64 text) and their size in bytes."""
    if attrs is None:
        return {}, 0
    if not isinstance(attrs, Mapping):
        raise invalid("MessageAttributes must be a map.")
    if len(attrs) > ATTRIBUTES_PER_MESSAGE_MAX:
        raise invalid(f"Number of message attributes [{len(attrs)}] exceeds the allowed maximum "
                      f"[{ATTRIBUTES_PER_MESSAGE_MAX}].")
    out: dict[str, dict[str, str]] = {}
    size = 0
    for name, attr in attrs.items():
        if system and name != "AWSTraceHeader":
            raise invalid(f"Message system attribute name '{name}' is invalid.")
        if (not isinstance(name, str) or not _ATTR_NAME.match(name) or ".." in name or name.startswith(".")
                or name.endswith(".") or (not system and name.lower().startswith(("aws.", "amazon.")))):
            raise invalid(f"The message attribute name '{name}' is invalid. Attribute name can contain A-Z, a-z, "
                          "0-9, underscore (_), hyphen (-), and period (.) characters.")
        if not isinstance(attr, Mapping):
            raise invalid(f"The message attribute '{name}' must be a structure.")
        kind = attr.get("DataType")
        if not isinstance(kind, str) or not _DATA_TYPE.match(kind):
            raise invalid(f"The message attribute '{name}' has an invalid message attribute type, the set of "
                          "supported type prefixes is Binary, Number, and String.")
        if kind.startswith("Binary"):
            value = attr.get("BinaryValue")
            if isinstance(value, (bytes, bytearray)):
                value = base64.b64encode(value).decode()
            if not isinstance(value, str) or not value:
                raise invalid(f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.")
            try:
                length = len(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                raise invalid(f"The message attribute '{name}' has an invalid binary value.") from None
            out[name] = {"DataType": kind, "BinaryValue": value}
        else:
            text = attr.get("StringValue")
            if not isinstance(text, str) or text == "":
                raise invalid(f"The message attribute '{name}' must contain non-empty message attribute value "
                              f"for message attribute type '{kind.split('.')[0]}'.")
            if _BAD_CHARS.search(text):
                raise invalid(f"The message attribute '{name}' contains invalid characters.")
            if kind.startswith("Number") and not _NUMBER.match(text):
                raise invalid(f"Can't cast the value of message attribute '{name}' to a number.")
            length = len(text.encode())
            out[name] = {"DataType": kind, "StringValue": text}
        size += len(name.encode()) + len(kind.encode()) + length
    return out, size


def dedup_id(value: Any, name: str = "MessageDeduplicationId") -> str:
    if not isinstance(value, str) or not _DEDUP.match(value):
        raise invalid(f"Value {value!r} for parameter {name} is invalid. Reason: 1 to 128 characters from "
                      "alphanumerics and punctuation.")
    return value
