"""Who may call `tenure sqs`: the credentials file and AWS Signature Version 4 verification.

The credentials file (a Kubernetes Secret, mounted) has one key per line,
``ACCESS_KEY_ID:SECRET_ACCESS_KEY:QUEUE_GLOB[,QUEUE_GLOB...]``; blank lines and lines starting
with ``#`` are skipped. A key may act on the queues whose names match one of its globs
(:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[...]``).

Verification follows SigV4 for an ``Authorization: AWS4-HMAC-SHA256`` header (the way every AWS
SDK signs SQS calls): canonical request, string to sign, the derived key of the credential
scope, constant-time comparison. Refusals: an unknown key ``InvalidClientTokenId``, a wrong
signature ``SignatureDoesNotMatch`` (both 403), a date more than 15 minutes off the server's
clock ``RequestExpired``, a scope for another region or service ``SignatureDoesNotMatch``.
Limits: presigned URLs (signature in the query string) and SigV4a are not accepted.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import parse_qsl, quote, unquote

from tenure.core.colon_file import colon_lines
from tenure.core.errors import ConfigError
from tenure.sqs.errors import SqsError

CLOCK_SKEW_SECONDS = 15 * 60
_AUTH = re.compile(r"^AWS4-HMAC-SHA256\s+(.*)$")
_KEY_ID = re.compile(r"^[A-Za-z0-9_\-.]{1,128}$")


@dataclass(frozen=True)
class Credential:
    access_key_id: str
    secret: str
    globs: tuple[str, ...]

    def allows(self, queue: str) -> bool:
        return any(fnmatch.fnmatchcase(queue, g) for g in self.globs)


def load_credentials(path: str) -> dict[str, Credential]:
    """Parse the credentials file; ConfigError names the file and line of the first bad line."""
    creds: dict[str, Credential] = {}
    for lineno, parts in colon_lines(path, "--credentials", "ACCESS_KEY_ID:SECRET_ACCESS_KEY:QUEUE_GLOB[,QUEUE_GLOB...]"):
        key_id, secret, globs = parts
        if not _KEY_ID.match(key_id):
            raise ConfigError(f"{path}:{lineno}: invalid access key id {key_id!r}")
        if key_id in creds:
            raise ConfigError(f"{path}:{lineno}: access key id {key_id!r} appears twice")
        patterns = tuple(g.strip() for g in globs.split(",") if g.strip())
        if not patterns:
            raise ConfigError(f"{path}:{lineno}: no queue glob")
        creds[key_id] = Credential(key_id, secret, patterns)
    if not creds:
        raise ConfigError(f"--credentials {path} has no keys")
    return creds


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _canonical_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    enc = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in enc)


def _parse_authorization(header: str) -> dict[str, str]:
    match = _AUTH.match(header.strip())
    if not match:
        raise SqsError("IncompleteSignature", "Authorization header must use AWS4-HMAC-SHA256.")
    fields: dict[str, str] = {}
    for part in match.group(1).split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    if not {"Credential", "SignedHeaders", "Signature"} <= set(fields):
        raise SqsError("IncompleteSignature", "Authorization header needs Credential, SignedHeaders and Signature.")
    return fields


def _request_time(headers: Mapping[str, str]) -> tuple[str, float]:
    stamp = headers.get("x-amz-date", "")
    try:
        when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        raise SqsError("IncompleteSignature", "The request needs a valid X-Amz-Date header.") from None
    return stamp, when.timestamp()


def verify(creds: Mapping[str, Credential], *, method: str, path: str, query: str,
           headers: Sequence[tuple[str, str]], body: bytes, region: str, now: float | None = None) -> Credential:
    """The credential that signed this request; SqsError if none did."""
    merged: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        value = " ".join(value.strip().split())
        merged[lower] = f"{merged[lower]},{value}" if lower in merged else value
    auth = merged.get("authorization")
    if not auth:
        raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token")
    fields = _parse_authorization(auth)
    scope_parts = fields["Credential"].split("/")
    if len(scope_parts) != 5 or scope_parts[4] != "aws4_request":
        raise SqsError("IncompleteSignature", "Credential must be KEY/DATE/REGION/SERVICE/aws4_request.")
    key_id, day, scope_region, service, _ = scope_parts
    cred = creds.get(key_id)
    if cred is None:
        raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.")
    stamp, when = _request_time(merged)
    current = time.time() if now is None else now
    if abs(current - when) > CLOCK_SKEW_SECONDS:
        raise SqsError("RequestExpired", f"Request date {stamp} is more than 15 minutes from the server's clock.")
    if scope_region != region or service != "sqs" or day != stamp[:8]:
        raise SqsError("SignatureDoesNotMatch",
                       f"Credential should be scoped to a valid region ({region}), service sqs and the request date.",
                       status=403)
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed:
        raise SqsError("SignatureDoesNotMatch", "The host header must be signed.", status=403)
    canonical_headers = "".join(f"{h}:{merged.get(h, '')}\n" for h in signed)
    payload_hash = hashlib.sha256(body).hexdigest()
    if merged.get("x-amz-content-sha256") == "UNSIGNED-PAYLOAD":
        payload_hash = "UNSIGNED-PAYLOAD"
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + cred.secret).encode(), day), scope_region), service), "aws4_request")
    scope = "/".join(scope_parts[1:])
    for uri in dict.fromkeys((path or "/", quote(unquote(path or "/"), safe="/~"), quote(path or "/", safe="/~"))):
        canonical = "\n".join((method, uri, _canonical_query(query), canonical_headers, fields["SignedHeaders"],
                               payload_hash))
        to_sign = "\n".join(("AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()))
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, fields["Signature"]):
            return cred
    raise SqsError("SignatureDoesNotMatch",
                   "The request signature we calculated does not match the signature you provided.", status=403)
