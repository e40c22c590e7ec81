"""What goes on the wire besides JSON: the MD5 digests SDKs verify, and receipt handles.

A receipt handle is ``base64url(job id (8 bytes) | lock token (16) | HMAC-SHA256(key, queue |
id | token)[:16])``: opaque, new on every receive (the token is), and tamper-evident: a handle
altered, forged or presented on another queue fails the MAC and is ``ReceiptHandleIsInvalid``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
import uuid
from collections.abc import Mapping
from typing import Any

_MAC_BYTES = 16


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def md5_of_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """SQS's MD5OfMessageAttributes: per attribute in name order, length-prefixed name and data
    type, a transport byte (1 string, 2 binary) and the length-prefixed value. Binary values are
    given here base64-encoded, as they are stored."""
    out = bytearray()
    for name in sorted(attributes):
        attr = attributes[name]
        out += _field(name.encode()) + _field(str(attr["DataType"]).encode())
        if "BinaryValue" in attr:
            out += b"\x02" + _field(base64.b64decode(attr["BinaryValue"]))
        else:
            out += b"\x01" + _field(str(attr["StringValue"]).encode())
    return md5_hex(bytes(out))


class HandleError(ValueError):
    """A receipt handle that is not one this server issued for that queue."""


def seal_handle(key: bytes, queue: str, job_id: int, token: uuid.UUID) -> str:
    body = struct.pack(">q", job_id) + token.bytes
    mac = hmac.digest(key, queue.encode() + b"\0" + body, "sha256")[:_MAC_BYTES]
    return base64.urlsafe_b64encode(body + mac).decode().rstrip("=")


def open_handle(key: bytes, queue: str, handle: str) -> tuple[int, uuid.UUID]:
    """``(job id, lock token)`` of a handle sealed for ``queue``; HandleError otherwise."""
    if not isinstance(handle, str) or len(handle) > 200:
        raise HandleError("not a receipt handle")
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
    except (binascii.Error, ValueError):
        raise HandleError("not a receipt handle") from None
    if len(raw) != 24 + _MAC_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != handle:
        raise HandleError("not a receipt handle")  # one spelling per handle: no slack in the padding bits
    body, mac = raw[:24], raw[24:]
    expected = hmac.digest(key, queue.encode() + b"\0" + body, "sha256")[:_MAC_BYTES]
    if not hmac.compare_digest(mac, expected):
        raise HandleError("receipt handle does not verify")
    return struct.unpack(">q", body[:8])[0], uuid.UUID(bytes=body[8:])
