"""Pure parts of `tenure sqs`: receipt handles, MD5 digests, parameter validation, SigV4 and the
query protocol's parameter and XML mapping."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tenure.core.errors import ConfigError
from tenure.sqs import params
from tenure.sqs.auth import Credential, load_credentials, verify
from tenure.sqs.errors import SqsError
from tenure.sqs.queries_protocol import params_of, result_xml
from tenure.sqs.wire import HandleError, md5_of_attributes, open_handle, seal_handle

KEY = b"k" * 32


def test_handles_round_trip_and_refuse_tampering_and_other_queues() -> None:
    token = uuid.uuid4()
    handle = seal_handle(KEY, "q", 42, token)
    assert open_handle(KEY, "q", handle) == (42, token)
    assert seal_handle(KEY, "q", 42, uuid.uuid4()) != handle  # new on every receive (the token is)
    for bad in (handle[:-1] + ("A" if handle[-1] != "A" else "B"), "x", "", "!" * 54, handle + "AAAA"):
        with pytest.raises(HandleError):
            open_handle(KEY, "q", bad)
    with pytest.raises(HandleError):
        open_handle(KEY, "other", handle)
    with pytest.raises(HandleError):
        open_handle(b"another key", "q", handle)


def test_md5_of_attributes_known_value() -> None:
    # name "a", type "String", value "x": length-prefixed fields and transport byte 1.
    raw = b"\0\0\0\x01a" + b"\0\0\0\x06String" + b"\x01" + b"\0\0\0\x01x"
    assert md5_of_attributes({"a": {"DataType": "String", "StringValue": "x"}}) == hashlib.md5(raw).hexdigest()


def test_parameter_limits() -> None:
    assert params.queue_name("a-b_c.fifo") == "a-b_c.fifo"
    for bad in ("", "a b", "x" * 81, "é"):
        with pytest.raises(SqsError):
            params.queue_name(bad)
    assert params.integer("10", "N", 1, 10) == 10
    for bad in ("11", "1.5", True, None, "ten"):
        with pytest.raises(SqsError) as exc:
            params.integer(bad, "N", 1, 10)
        assert exc.value.shape == "InvalidParameterValue"
    with pytest.raises(SqsError) as exc:
        params.message_body("a\x01")
    assert exc.value.shape == "InvalidMessageContents"
    attrs, size = params.message_attributes({"n": {"DataType": "Number", "StringValue": "1.5e3"}})
    assert attrs["n"]["StringValue"] == "1.5e3" and size == len("n") + len("Number") + 5
    for bad in ({"AWS.x": {"DataType": "String", "StringValue": "v"}},
                {"n": {"DataType": "Number", "StringValue": "abc"}},
                {"n": {"DataType": "Float", "StringValue": "1"}},
                {"a..b": {"DataType": "String", "StringValue": "v"}}):
        with pytest.raises(SqsError):
            params.message_attributes(bad)
    with pytest.raises(SqsError) as exc:
        params.entry_ids([{"Id": "a"}, {"Id": "a"}], "E")
    assert exc.value.code == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    with pytest.raises(SqsError) as exc:
        params.queue_attributes({"FifoQueue": "true"}, fifo=False, creating=True)
    assert exc.value.shape == "InvalidAttributeValue"
    assert params.redrive_target({"RedrivePolicy": '{"deadLetterTargetArn": "arn:aws:sqs:r:1:dlq", '
                                                   '"maxReceiveCount": "3"}'}) == ("dlq", 3)


def _signed(secret: str = "s3cret", region: str = "us-east-1", body: bytes = b"{}") -> AWSRequest:
    req = AWSRequest(method="POST", url="http://127.0.0.1:9324/", data=body,
                     headers={"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("AKID", secret), "sqs", region).add_auth(req)
    return req


def _verify(req: AWSRequest, body: bytes = b"{}") -> str:
    creds = {"AKID": Credential("AKID", "s3cret", ("orders-*",))}
    headers = [("host", "127.0.0.1:9324"), *((k, v) for k, v in req.headers.items())]
    return verify(creds, method="POST", path="/", query="", headers=headers, body=body, region="us-east-1").access_key_id


def load_credentials_from(tmp_path: Path, text: str) -> dict[str, Credential]:
    path = tmp_path / "creds"
    path.write_text(text + "\n")
    return load_credentials(str(path))


def test_sigv4_against_botocore_signatures() -> None:
    assert _verify(_signed()) == "AKID"
    for req, body, shape in ((_signed("wrong"), b"{}", "SignatureDoesNotMatch"),
                             (_signed(region="eu-west-1"), b"{}", "SignatureDoesNotMatch"),
                             (_signed(), b'{"QueueNamePrefix": "x"}', "SignatureDoesNotMatch")):
        with pytest.raises(SqsError) as exc:
            _verify(req, body)
        assert exc.value.shape == shape and exc.value.status == 403
    stale = _signed()
    stale.headers.replace_header("X-Amz-Date", datetime(2020, 1, 1, tzinfo=timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    with pytest.raises(SqsError) as exc:
        _verify(stale)
    assert exc.value.shape == "RequestExpired"


def test_credentials_file_errors_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r":2: expected"):
        load_credentials_from(tmp_path, "A:b:*\nno-secret")
    with pytest.raises(ConfigError, match="appears twice"):
        load_credentials_from(tmp_path, "A:b:*\nA:c:*")
    with pytest.raises(ConfigError, match="cannot read"):
        load_credentials(str(tmp_path / "missing"))
    creds = load_credentials_from(tmp_path, "# comment\n\nA:b:orders-*, shared")
    assert creds["A"].allows("orders-1") and creds["A"].allows("shared")
    assert not creds["A"].allows("billing")


def test_query_protocol_mapping() -> None:
    form = {"Action": "SendMessageBatch", "QueueUrl": "http://h/1/q",
            "SendMessageBatchRequestEntry.1.Id": "a", "SendMessageBatchRequestEntry.1.MessageBody": "x",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "k",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "String",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": "v",
            "SendMessageBatchRequestEntry.2.Id": "b", "SendMessageBatchRequestEntry.2.MessageBody": "y"}
    assert params_of("SendMessageBatch", form) == {"QueueUrl": "http://h/1/q", "Entries": [
        {"Id": "a", "MessageBody": "x", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
        {"Id": "b", "MessageBody": "y"}]}
    assert params_of("CreateQueue", {"QueueName": "q", "Attribute.1.Name": "DelaySeconds", "Attribute.1.Value": "5",
                                     "Tag.1.Key": "t", "Tag.1.Value": "v"}) == {
        "QueueName": "q", "Attributes": {"DelaySeconds": "5"}, "tags": {"t": "v"}}
    xml = result_xml("GetQueueAttributes", {"Attributes": {"A": "<1>"}}, "rid")
    assert "<Attribute><Name>A</Name><Value>&lt;1&gt;</Value></Attribute>" in xml
