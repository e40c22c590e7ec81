"""`tenure sqs` with real boto3 against a real `tenure sqs` subprocess and real PostgreSQL:
every action, SQS's limits and error codes, and the fencing of deletes and visibility changes."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_server import client, start_sqs
from support.processes import run_cli, wait_for
from tenure.core.db import connect

pytestmark = pytest.mark.acceptance


@pytest.fixture
def sqs(cli_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    proc, url = start_sqs(cli_env, tmp_path / "sqs.log", "--no-auth", "--account-id", "123456789012")
    try:
        yield client(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def md5_attributes(attrs: dict[str, dict[str, Any]]) -> str:
    """MD5OfMessageAttributes as the Java SDK computes it (independent of tenure.sqs.wire)."""
    buf = b""
    for name in sorted(attrs):
        a = attrs[name]
        enc = [name.encode(), a["DataType"].encode()]
        buf += b"".join(struct.pack(">i", len(x)) + x for x in enc)
        if "BinaryValue" in a:
            buf += b"\x02" + struct.pack(">i", len(a["BinaryValue"])) + a["BinaryValue"]
        else:
            v = a["StringValue"].encode()
            buf += b"\x01" + struct.pack(">i", len(v)) + v
    return hashlib.md5(buf).hexdigest()


def test_queue_lifecycle_attributes_tags_and_paging(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "45"}, tags={"team": "a"})["QueueUrl"]
    assert url.endswith("/123456789012/orders")
    assert sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "45"})["QueueUrl"] == url
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "46"})
    assert code(exc) == "QueueAlreadyExists"
    assert sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    for name in ("orders-2", "orders-3", "other"):
        sqs.create_queue(QueueName=name)
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="orders")["QueueUrls"]] == [
        "orders", "orders-2", "orders-3"]
    page = sqs.list_queues(QueueNamePrefix="orders", MaxResults=2)
    assert len(page["QueueUrls"]) == 2
    rest = sqs.list_queues(QueueNamePrefix="orders", MaxResults=2, NextToken=page["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in rest["QueueUrls"]] == ["orders-3"] and "NextToken" not in rest
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "45" and attrs["QueueArn"] == "arn:aws:sqs:us-east-1:123456789012:orders"
    assert attrs["ApproximateNumberOfMessages"] == "0" and int(attrs["CreatedTimestamp"]) > 1_600_000_000
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "2", "MaximumMessageSize": "2048"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds", "MaximumMessageSize"])
    assert got["Attributes"] == {"DelaySeconds": "2", "MaximumMessageSize": "2048"}
    for bad in ({"VisibilityTimeout": "43201"}, {"DelaySeconds": "-1"}, {"MaximumMessageSize": "1023"}):
        with pytest.raises(ClientError) as exc:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=bad)
        assert code(exc) == "InvalidAttributeValue"
    with pytest.raises(ClientError) as exc:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"])
    assert code(exc) == "InvalidAttributeName"
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod"})
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as exc:
        sqs.get_queue_url(QueueName="orders")
    assert code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url, MessageBody="x")
    with pytest.raises(ClientError) as exc:
        sqs.create_queue(QueueName="bad name!")
    assert code(exc) == "InvalidParameterValue"
    import urllib.request
    with urllib.request.urlopen(sqs.meta.endpoint_url + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert 'tenure_sqs_requests_total{action="CreateQueue",outcome="ok"} 5.0' in metrics
    assert 'tenure_sqs_requests_total{action="GetQueueUrl",outcome="QueueDoesNotExist"} 1.0' in metrics
    assert "tenure_sqs_long_polls_waiting 0.0" in metrics


def test_send_receive_delete_with_exact_digests(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="digests")["QueueUrl"]
    attrs = {"trace": {"DataType": "String", "StringValue": "abc"},
             "n": {"DataType": "Number.int", "StringValue": "42"},
             "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffdata"}}
    body = "héllo ✓ \U0001f600"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == md5_attributes(attrs)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"],
                              MessageAttributeNames=["All"])["Messages"]
    assert len(got) == 1 and got[0]["Body"] == body and got[0]["MessageId"] == sent["MessageId"]
    assert got[0]["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert got[0]["MessageAttributes"] == attrs and got[0]["MD5OfMessageAttributes"] == md5_attributes(attrs)
    system = got[0]["Attributes"]
    assert system["ApproximateReceiveCount"] == "1"
    assert abs(int(system["SentTimestamp"]) - time.time() * 1000) < 60_000
    assert int(system["ApproximateFirstReceiveTimestamp"]) >= int(system["SentTimestamp"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)
    # Attribute names by prefix select only those attributes (and their digest covers only them).
    sqs.send_message(QueueUrl=url, MessageBody="p", MessageAttributes=attrs)
    [m] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["tr.*", "n"])["Messages"]
    assert set(m["MessageAttributes"]) == {"n"} or set(m["MessageAttributes"]) == {"n"} | {"trace"}
    selected = {k: attrs[k] for k in m["MessageAttributes"]}
    assert m["MD5OfMessageAttributes"] == md5_attributes(selected)
    assert "Attributes" not in m


def test_batches_and_limits(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="limits")["QueueUrl"]
    entries = [{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)]
    result = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert sorted(r["Id"] for r in result["Successful"]) == sorted(e["Id"] for e in entries)
    for bad, expected in (([*entries, {"Id": "x", "MessageBody": "y"}], "TooManyEntriesInBatchRequest"),
                          ([entries[0], entries[0]], "BatchEntryIdsNotDistinct"),
                          ([{"Id": "bad id!", "MessageBody": "y"}], "InvalidBatchEntryId"),
                          ([], "EmptyBatchRequest")):
        with pytest.raises(ClientError) as exc:
            sqs.send_message_batch(QueueUrl=url, Entries=bad)
        assert code(exc) == f"AWS.SimpleQueueService.{expected}"
    with pytest.raises(ClientError) as exc:
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": f"b{i}", "MessageBody": "x" * 600_000}
                                                       for i in range(2)])
    assert code(exc) == "AWS.SimpleQueueService.BatchRequestTooLong"
    # A bad entry fails alone.
    mixed = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "ok", "MessageBody": "fine"},
                                                          {"Id": "bad", "MessageBody": "x", "DelaySeconds": 901}])
    assert [r["Id"] for r in mixed["Successful"]] == ["ok"]
    assert mixed["Failed"][0]["Id"] == "bad" and mixed["Failed"][0]["SenderFault"] is True
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 1_048_577)
    assert code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="bad \x00 char")
    assert code(exc) == "InvalidMessageContents"
    for kwargs in ({"MaxNumberOfMessages": 11}, {"MaxNumberOfMessages": 0}, {"VisibilityTimeout": 43201},
                   {"WaitTimeSeconds": 21}):
        with pytest.raises(ClientError) as exc:
            sqs.receive_message(QueueUrl=url, **kwargs)
        assert code(exc) == "InvalidParameterValue"
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(received) == 10
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        *({"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received[:9])),
        {"Id": "forged", "ReceiptHandle": forge(received[9]["ReceiptHandle"])}])
    assert len(deleted["Successful"]) == 9 and deleted["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert code(exc) == "ReceiptHandleIsInvalid"
    other = sqs.create_queue(QueueName="limits-other")["QueueUrl"]
    with pytest.raises(ClientError) as exc:  # a handle is sealed for its queue
        sqs.delete_message(QueueUrl=other, ReceiptHandle=received[9]["ReceiptHandle"])
    assert code(exc) == "ReceiptHandleIsInvalid"
    sqs.purge_queue(QueueUrl=url)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                    "ApproximateNumberOfMessagesNotVisible"])
    assert counts["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def forge(handle: str) -> str:
    """The handle with its last characters (the MAC) changed."""
    return handle[:-2] + ("AB" if handle[-2:] != "AB" else "BA")


def _events(dsn: str, schema: str, event: str) -> list[dict[str, Any]]:
    with connect(dsn) as conn:
        return list(conn.execute(f'SELECT * FROM "{schema}".job_events WHERE event = %s', (event,)).fetchall())


def test_stale_delete_leaves_the_message_and_is_audited(sqs: Any, dsn: str, schema: str) -> None:
    url = sqs.create_queue(QueueName="fenced")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="once")
    [first] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    time.sleep(1.2)
    [second] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # 200, as SQS answers
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1"
    assert len(_events(dsn, schema, "stale_completion_rejected")) == 1
    # The stale handle cannot move the visibility either; the current one can, and deletes.
    with pytest.raises(ClientError) as exc:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=5)
    assert code(exc) == "AWS.SimpleQueueService.MessageNotInflight"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert len(_events(dsn, schema, "completed")) == 1
    # A strict queue refuses the stale handle.
    strict = sqs.create_queue(QueueName="fenced-strict", Attributes={"strict": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=strict, MessageBody="once")
    [old] = sqs.receive_message(QueueUrl=strict, VisibilityTimeout=1)["Messages"]
    time.sleep(1.2)
    assert sqs.receive_message(QueueUrl=strict)["Messages"]
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=strict, ReceiptHandle=old["ReceiptHandle"])
    assert code(exc) == "ReceiptHandleIsInvalid"


def test_visibility_changes_release_and_the_12_hour_cap(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="visibility")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="v")
    [m] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_000)
    with pytest.raises(ClientError) as exc:  # past 12 h from the receive
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_200)
    assert code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_201)
    assert code(exc) == "InvalidParameterValue"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    [again] = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    batch = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "now", "ReceiptHandle": again["ReceiptHandle"], "VisibilityTimeout": 60},
        {"Id": "old", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 60}])
    assert [e["Id"] for e in batch["Successful"]] == ["now"] and batch["Failed"][0]["Id"] == "old"


def test_long_poll_wakes_on_send(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="poll")["QueueUrl"]
    t0 = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert time.monotonic() - t0 >= 0.9
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append((sqs.receive_message(QueueUrl=url, WaitTimeSeconds=15),
                                                         time.monotonic())))
    waiter.start()
    time.sleep(1.0)
    sent_at = time.monotonic()
    sqs.send_message(QueueUrl=url, MessageBody="wake")
    waiter.join(20)
    reply, done = got[0]
    assert reply["Messages"][0]["Body"] == "wake"
    assert done - sent_at < 0.9  # woken by NOTIFY, not by the 1 s re-check or the 15 s timeout


def test_fifo_order_groups_and_deduplication(sqs: Any) -> None:
    with pytest.raises(ClientError):
        sqs.create_queue(QueueName="plain", Attributes={"FifoQueue": "true"})
    url = sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")  # no dedup id, no content dedup
    assert code(exc) == "InvalidParameterValue"
    ids = [sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageGroupId="A",
                            MessageDeduplicationId=f"a{i}")["MessageId"] for i in range(3)]
    assert sqs.send_message(QueueUrl=url, MessageBody="dup", MessageGroupId="A",
                            MessageDeduplicationId="a0")["MessageId"] == ids[0]
    sqs.send_message(QueueUrl=url, MessageBody="b0", MessageGroupId="B", MessageDeduplicationId="b0")
    [a0] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"])["Messages"]
    assert a0["Body"] == "a0" and a0["Attributes"]["MessageGroupId"] == "A"
    # While a0 is in flight group A delivers nothing; B does.
    [b0] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert b0["Body"] == "b0"
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=a0["ReceiptHandle"])
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in rest] == ["a1", "a2"]
    content = sqs.create_queue(QueueName="content.fifo", Attributes={"FifoQueue": "true",
                                                                     "ContentBasedDeduplication": "true"})["QueueUrl"]
    one = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")["MessageId"]
    assert sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")["MessageId"] == one
    with pytest.raises(ClientError):
        sqs.send_message(QueueUrl=content, MessageBody="x", MessageGroupId="g", DelaySeconds=5)


def test_a_standard_queue_stores_message_group_id_as_the_flow_key(sqs: Any, dsn: str, schema: str,
                                                                    cli_env: dict[str, str]) -> None:
    url = sqs.create_queue(QueueName="fair")["QueueUrl"]
    one = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="tenant-a")["MessageId"]
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "b", "MessageBody": "b", "MessageGroupId": "tenant-b"}, {"Id": "plain", "MessageBody": "p"},
        {"Id": "long", "MessageBody": "x", "MessageGroupId": "g" * 129},
        {"Id": "dedup", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"}])
    assert sorted(r["Id"] for r in batch["Successful"]) == ["b", "plain"]
    assert {f["Id"]: f["Code"] for f in batch["Failed"]} == {"long": "InvalidParameterValue",
                                                            "dedup": "InvalidParameterValue"}
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="has space")
    assert code(exc) == "InvalidParameterValue"
    with connect(dsn) as conn:
        rows = conn.execute(f'SELECT id, flow_key FROM "{schema}".jobs WHERE queue_name = %s ORDER BY id',
                            ("fair",)).fetchall()
    assert [r["flow_key"] for r in rows] == ["tenant-a", "tenant-b", None]
    assert str(rows[0]["id"]) == str(int(one.replace("-", ""), 16))
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["MessageGroupId"])
    assert {m["Body"]: m.get("Attributes", {}).get("MessageGroupId") for m in got["Messages"]} == {
        "a": "tenant-a", "b": "tenant-b", "p": None}
    sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for i, m in enumerate(got["Messages"])])
    every = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert sorted(m["Attributes"].get("MessageGroupId", "-") for m in every) == ["-", "tenant-a", "tenant-b"]
    assert all("SequenceNumber" not in m["Attributes"] for m in every), "no FIFO attribute on a standard queue"
    # The per-key running limits count a group's messages in flight, as a fair queue shares out.
    limited = sqs.create_queue(QueueName="fair-limited")["QueueUrl"]
    assert run_cli(cli_env, "flow", "limit", "fair-limited", "--per-key-running", "1").returncode == 0
    sqs.send_message_batch(QueueUrl=limited, Entries=[{"Id": f"a{i}", "MessageBody": "a", "MessageGroupId": "A"}
                                                      for i in range(3)] + [{"Id": "b", "MessageBody": "b",
                                                                              "MessageGroupId": "B"}])
    first = sqs.receive_message(QueueUrl=limited, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in first) == ["a", "b"]
    assert "Messages" not in sqs.receive_message(QueueUrl=limited, MaxNumberOfMessages=10)
    # Fair shares, as SQS fair queues promise: a noisy group sent first does not hold back the
    # quiet groups sent after it; each receive goes round-robin over the groups.
    noisy = sqs.create_queue(QueueName="fair-noisy")["QueueUrl"]
    for start in range(0, 60, 10):
        sqs.send_message_batch(QueueUrl=noisy, Entries=[{"Id": f"n{i}", "MessageBody": "noisy",
                                                         "MessageGroupId": "noisy"} for i in range(start, start + 10)])
    sqs.send_message_batch(QueueUrl=noisy, Entries=[{"Id": f"{g}{i}", "MessageBody": g, "MessageGroupId": g}
                                                    for g in ("q1", "q2", "q3") for i in range(3)])
    shares = Counter(m["Body"] for m in sqs.receive_message(QueueUrl=noisy, MaxNumberOfMessages=8)["Messages"])
    assert shares == {"noisy": 2, "q1": 2, "q2": 2, "q3": 2}, shares


def test_redrive_to_dead_letter_queue_and_move_back(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": 2}}'
    src = sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "1"})[
        "QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    sqs.send_message(QueueUrl=src, MessageBody="poison")
    for _ in range(2):
        assert sqs.receive_message(QueueUrl=src)["Messages"]
        time.sleep(1.2)
    assert "Messages" not in sqs.receive_message(QueueUrl=src)
    [dead] = sqs.receive_message(QueueUrl=dlq, VisibilityTimeout=0)["Messages"]
    assert dead["Body"] == "poison"
    task = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=10)["TaskHandle"]
    wait_for(lambda: sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "COMPLETED", 10,
             "the move task")
    entry = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    assert entry["TaskHandle"] == task and entry["ApproximateNumberOfMessagesMoved"] == 1
    [back] = sqs.receive_message(QueueUrl=src)["Messages"]
    assert back["Body"] == "poison"
    with pytest.raises(ClientError) as exc:
        sqs.cancel_message_move_task(TaskHandle=task)
    assert code(exc) == "AWS.SimpleQueueService.UnsupportedOperation"


def test_both_sides_share_the_queues(sqs: Any, cli_env: dict[str, str]) -> None:
    url = sqs.create_queue(QueueName="shared")["QueueUrl"]
    out = run_cli(cli_env, "enqueue", "report.build", "--queue", "shared", "--payload", '{"day": "2026-12-03"}')
    assert out.returncode == 0, out.stderr
    [m] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert m["Body"] == '{"day":"2026-12-03"}'
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    job_id = out.stdout.strip()
    shown = run_cli(cli_env, "jobs", "show", job_id)
    assert shown.returncode == 0 and "completed" in shown.stdout
    sent = sqs.send_message(QueueUrl=url, MessageBody="from boto3")
    listed = run_cli(cli_env, "jobs", "list", "--queue", "shared", "--status", "pending")
    assert listed.returncode == 0 and "sqs.message" in listed.stdout
    assert str(int(sent["MessageId"].replace("-", ""), 16)) in listed.stdout


def test_query_protocol_form_in_xml_out(sqs: Any) -> None:
    import urllib.parse
    import urllib.request
    import xml.etree.ElementTree as ET

    base = sqs.meta.endpoint_url
    ns = {"s": "http://queue.amazonaws.com/doc/2012-11-05/"}

    def call(path: str, **form: str) -> tuple[int, ET.Element]:
        data = urllib.parse.urlencode(form).encode()
        req = urllib.request.Request(base + path, data=data,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, ET.fromstring(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, ET.fromstring(err.read())

    status, root = call("/", Action="CreateQueue", QueueName="legacy", **{"Attribute.1.Name": "DelaySeconds",
                                                                         "Attribute.1.Value": "0"})
    assert status == 200
    url = root.find("s:CreateQueueResult/s:QueueUrl", ns).text  # type: ignore[union-attr]
    assert url and url.endswith("/123456789012/legacy")
    path = urllib.parse.urlparse(url).path
    status, root = call(path, Action="SendMessage", MessageBody="xml body",
                        **{"MessageAttribute.1.Name": "k", "MessageAttribute.1.Value.DataType": "String",
                           "MessageAttribute.1.Value.StringValue": "v"})
    assert status == 200
    assert root.find("s:SendMessageResult/s:MD5OfMessageBody", ns).text == hashlib.md5(b"xml body").hexdigest()  # type: ignore[union-attr]
    status, root = call(path, Action="ReceiveMessage", **{"AttributeName.1": "All", "MessageAttributeName.1": "All"})
    message = root.find("s:ReceiveMessageResult/s:Message", ns)
    assert status == 200 and message is not None
    assert message.find("s:Body", ns).text == "xml body"  # type: ignore[union-attr]
    assert message.find("s:MessageAttribute/s:Value/s:StringValue", ns).text == "v"  # type: ignore[union-attr]
    handle = message.find("s:ReceiptHandle", ns).text  # type: ignore[union-attr]
    status, _ = call(path, Action="DeleteMessage", ReceiptHandle=handle or "")
    assert status == 200
    status, root = call("/", Action="GetQueueUrl", QueueName="missing")
    assert status == 400 and root.find("s:Error/s:Code", ns).text == "AWS.SimpleQueueService.NonExistentQueue"  # type: ignore[union-attr]
    status, root = call("/", Action="NoSuchAction")
    assert status == 400 and root.find("s:Error/s:Code", ns).text == "InvalidAction"  # type: ignore[union-attr]


def test_raw_http_refusals_are_one_json_message(sqs: Any) -> None:
    """What no SDK sends: malformed JSON, a body over 4 MiB, another method; each one JSON error
    with its status, and the server still serves /healthz, /metrics and the API after them."""
    import json
    import urllib.request

    base = sqs.meta.endpoint_url

    def call(method: str, path: str, body: bytes | None, **headers: str) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    target = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"}
    status, headers, body = call("POST", "/", b"{not json", **target)
    assert status == 400 and json.loads(body)["__type"] == "com.amazonaws.sqs#SerializationException"
    assert headers["x-amzn-query-error"] == "SerializationException;Sender" and headers["x-amzn-requestid"]
    status, _, body = call("POST", "/", b"{" + b" " * (5 * 1024 * 1024) + b"}", **target)
    assert status == 413 and json.loads(body)["message"] == "The request is too large."
    status, headers, body = call("PUT", "/123456789012/q", b"{}", **target)
    assert status == 405 and headers["allow"] == "GET, POST"
    assert json.loads(body)["__type"] == "com.amazonaws.sqs#InvalidAction"
    assert call("GET", "/healthz", None)[2] == b"ok\n"
    assert b"tenure_sqs_requests_total" in call("GET", "/metrics", None)[2]
    assert sqs.list_queues().get("QueueUrls") is None


def test_binary_md5_helper_matches_base64_storage() -> None:
    from tenure.sqs.wire import md5_of_attributes
    attrs = {"b": {"DataType": "Binary", "BinaryValue": b"\x01\x02"}, "a": {"DataType": "String", "StringValue": "x"}}
    stored = {"b": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x01\x02").decode()},
              "a": attrs["a"]}
    assert md5_of_attributes(stored) == md5_attributes(attrs)


def test_a_long_poll_whose_client_left_takes_no_message(sqs: Any) -> None:
    """A client that gives up its long poll (a killed consumer, a closed connection) must not
    have a message claimed for it: nobody would read the receipt, and the message would stay
    invisible for a whole visibility timeout. Found with Celery: a SIGKILLed worker's task came
    back one visibility timeout late."""
    import json
    import socket
    from urllib.parse import urlsplit

    url = sqs.create_queue(QueueName="left", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    endpoint = urlsplit(sqs.meta.endpoint_url)
    body = json.dumps({"QueueUrl": url, "WaitTimeSeconds": 20}).encode()
    request = (f"POST / HTTP/1.1\r\nHost: {endpoint.netloc}\r\nContent-Type: application/x-amz-json-1.0\r\n"
               f"X-Amz-Target: AmazonSQS.ReceiveMessage\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((endpoint.hostname, endpoint.port)) as conn:
        conn.sendall(request)
        time.sleep(0.5)  # the poll is waiting on the server
    time.sleep(0.5)  # the client is gone
    sqs.send_message(QueueUrl=url, MessageBody="for whoever is still there")
    time.sleep(0.5)  # the abandoned poll would have been woken by now
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages", [])
    assert [m["Body"] for m in got] == ["for whoever is still there"], "the message went to a client that left"


def test_queue_does_not_exist_is_a_400(sqs: Any) -> None:
    """QueueDoesNotExist is HTTP 400 in AWS JSON (the query protocol's is checked above), as in SQS."""
    import json
    import urllib.request

    with pytest.raises(ClientError) as exc:
        sqs.get_queue_url(QueueName="never-made")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    req = urllib.request.Request(sqs.meta.endpoint_url + "/", data=b'{"QueueName": "never-made"}', headers={
        "X-Amz-Target": "AmazonSQS.GetQueueUrl", "Content-Type": "application/x-amz-json-1.0"})
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(req, timeout=10)
    assert http.value.code == 400
    assert json.loads(http.value.read())["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"


def test_the_1_mib_message_limit(sqs: Any) -> None:
    """MaximumMessageSize: 1 MiB by default and at most (SQS since 2025); body and attributes count."""
    url = sqs.create_queue(QueueName="today")["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"]
    assert got == {"MaximumMessageSize": "1048576"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1048576"})
    with pytest.raises(ClientError) as exc:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1048577"})
    assert code(exc) == "InvalidAttributeValue"
    big = "é" * (1_048_576 // 2 - 10)
    sqs.send_message(QueueUrl=url, MessageBody=big)
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody=big, MessageAttributes={
            "pad": {"DataType": "String", "StringValue": "x" * 64}})
    assert code(exc) == "InvalidParameterValue"
    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == big
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    entry = {"MessageBody": "x" * 524_000, "MessageAttributes": {"pad": {"DataType": "String",
                                                                         "StringValue": "y" * 400}}}
    with pytest.raises(ClientError) as exc:  # a batch's total counts the attributes too
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", **entry}, {"Id": "b", **entry}])
    assert code(exc) == "AWS.SimpleQueueService.BatchRequestTooLong"


def test_batches_answer_per_entry(sqs: Any) -> None:
    """One bad entry fails alone (Id, Code, Message, SenderFault); batch-level errors stay so."""
    url = sqs.create_queue(QueueName="today")["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "2048"})
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok", "MessageBody": "fine", "MessageAttributes": {
            "foo.a": {"DataType": "String", "StringValue": "1"}, "foo.b": {"DataType": "String", "StringValue": "2"},
            "bar": {"DataType": "Number", "StringValue": "3"}}},
        {"Id": "long", "MessageBody": "x" * 2049},
        {"Id": "delay", "MessageBody": "x", "DelaySeconds": 901},
        {"Id": "attr", "MessageBody": "x", "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "nan"}}}])
    assert [r["Id"] for r in sent["Successful"]] == ["ok"]
    failed = {f["Id"]: f for f in sent["Failed"]}
    assert sorted(failed) == ["attr", "delay", "long"]
    assert all(f["SenderFault"] is True and f["Code"] == "InvalidParameterValue" and f["Message"]
               for f in failed.values())
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "bad", "ReceiptHandle": "not-a-handle"}, {"Id": "good", "ReceiptHandle": handle}])
    assert [r["Id"] for r in deleted["Successful"]] == ["good"]
    assert deleted["Failed"] == [{"Id": "bad", "SenderFault": True, "Code": "ReceiptHandleIsInvalid",
                                  "Message": deleted["Failed"][0]["Message"]}]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    changed = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "bad", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 5},
        {"Id": "range", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 43_201},
        {"Id": "good", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 0}])
    assert [r["Id"] for r in changed["Successful"]] == ["good"]
    assert {f["Id"]: f["Code"] for f in changed["Failed"]} == {"bad": "ReceiptHandleIsInvalid",
                                                               "range": "InvalidParameterValue"}
    assert all(f["SenderFault"] is True for f in changed["Failed"])
    for bad, expected in (([], "EmptyBatchRequest"), ([{"Id": "a b", "ReceiptHandle": "h"}], "InvalidBatchEntryId"),
                          ([{"Id": "a", "ReceiptHandle": "h"}] * 2, "BatchEntryIdsNotDistinct"),
                          ([{"Id": f"e{i}", "ReceiptHandle": "h"} for i in range(11)],
                           "TooManyEntriesInBatchRequest")):
        with pytest.raises(ClientError) as exc:
            sqs.delete_message_batch(QueueUrl=url, Entries=bad)
        assert code(exc) == f"AWS.SimpleQueueService.{expected}"


def test_message_attribute_names_take_prefixes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="prefixes")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes={
        "foo.a": {"DataType": "String", "StringValue": "1"}, "foo.b": {"DataType": "String", "StringValue": "2"},
        "food": {"DataType": "String", "StringValue": "3"}, "bar": {"DataType": "Number", "StringValue": "4"}})
    every = {"foo.a", "foo.b", "food", "bar"}
    for wanted, names in ((["foo.*"], {"foo.a", "foo.b"}), (["bar", "foo.a"], {"bar", "foo.a"}),
                          (["All"], every), ([".*"], every), (["nothing"], set()), ([], set())):
        [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, MessageAttributeNames=wanted)["Messages"]
        assert set(message.get("MessageAttributes", {})) == names, wanted


def test_an_empty_policy_removes_it(sqs: Any) -> None:
    import json

    url = sqs.create_queue(QueueName="today", Attributes={"Policy": ""})["QueueUrl"]
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    dlq = sqs.create_queue(QueueName="today-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"Version": "2012-10-17", "Statement": []})
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy, "RedrivePolicy": redrive})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["Policy"] == policy and got["RedrivePolicy"] == redrive
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": "", "RedrivePolicy": ""})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "Policy" not in got and "RedrivePolicy" not in got
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy", "RedrivePolicy"])
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == []


def test_fifo_validations_as_sqs_answers_them(sqs: Any) -> None:
    """Issue 36 item 3: a FIFO send without MessageGroupId, or without a deduplication id on a
    queue without ContentBasedDeduplication, is refused as SQS refuses it; in a batch the whole
    request is (as SQS and moto do); a per-message DelaySeconds of 0 is accepted; a RedrivePolicy
    must name a dead-letter queue of the source's type."""
    url = sqs.create_queue(QueueName="checks.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert code(exc) == "MissingParameter"
    assert exc.value.response["Error"]["Message"] == "The request must contain the parameter MessageGroupId."
    for entries, expected in (([{"Id": "a", "MessageBody": "x", "MessageDeduplicationId": "d"}], "MissingParameter"),
                              ([{"Id": "a", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"},
                                {"Id": "b", "MessageBody": "y", "MessageGroupId": "g"}], "InvalidParameterValue")):
        with pytest.raises(ClientError) as exc:
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert code(exc) == expected
    assert exc.value.response["Error"]["Message"] == ("The queue should either have ContentBasedDeduplication "
                                                      "enabled or MessageDeduplicationId provided explicitly")
    ok = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x", "MessageGroupId": "g",
                                                        "MessageDeduplicationId": "d", "DelaySeconds": 0}])
    assert [e["Id"] for e in ok["Successful"]] == ["a"] and not ok["Failed"]
    with pytest.raises(ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="e", DelaySeconds=5)
    assert exc.value.response["Error"]["Message"] == ("Value 5 for parameter DelaySeconds is invalid. Reason: The "
                                                      "request include parameter that is not valid for this queue type.")
    standard = sqs.create_queue(QueueName="plain-dlq")["QueueUrl"]
    fifo_dlq = sqs.create_queue(QueueName="fifo-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arns = {u: sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            for u in (standard, fifo_dlq)}
    for name, attrs, dlq in (("f.fifo", {"FifoQueue": "true"}, standard), ("s", {}, fifo_dlq)):
        policy = f'{{"deadLetterTargetArn": "{arns[dlq]}", "maxReceiveCount": 2}}'
        with pytest.raises(ClientError) as exc:
            sqs.create_queue(QueueName=name, Attributes={**attrs, "RedrivePolicy": policy})
        assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert exc.value.response["Error"]["Message"] == (f"Value {policy} for parameter RedrivePolicy is invalid. "
                                                          "Reason: Dead-letter queue must be same type of queue as "
                                                          "the source.")
    with pytest.raises(ClientError) as exc:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={
            "RedrivePolicy": f'{{"deadLetterTargetArn": "{arns[standard]}", "maxReceiveCount": 2}}'})
    assert code(exc) == "InvalidParameterValue"


def test_add_and_remove_permission_are_kept_in_the_policy(sqs: Any) -> None:
    import json

    url = sqs.create_queue(QueueName="shared")["QueueUrl"]
    arn = "arn:aws:sqs:us-east-1:123456789012:shared"
    sqs.add_permission(QueueUrl=url, Label="one", AWSAccountIds=["111111111111"], Actions=["SendMessage"])
    sqs.add_permission(QueueUrl=url, Label="two_2", AWSAccountIds=["222222222222", "333333333333"],
                       Actions=["ReceiveMessage", "DeleteMessage"])
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert policy == {"Version": "2012-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": [
        {"Sid": "one", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
         "Action": "SQS:SendMessage", "Resource": arn},
        {"Sid": "two_2", "Effect": "Allow",
         "Principal": {"AWS": ["arn:aws:iam::222222222222:root", "arn:aws:iam::333333333333:root"]},
         "Action": ["SQS:ReceiveMessage", "SQS:DeleteMessage"], "Resource": arn}]}
    refusals = (
        ({"Label": "one", "AWSAccountIds": ["111111111111"], "Actions": ["SendMessage"]}, "InvalidParameterValue",
         "Value one for parameter Label is invalid. Reason: Already exists."),
        ({"Label": "bad label!", "AWSAccountIds": ["111111111111"], "Actions": ["SendMessage"]},
         "InvalidParameterValue", None),
        ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": ["RemovePermission"]}, "InvalidParameterValue",
         "Value SQS:RemovePermission for parameter ActionName is invalid. Reason: Only the queue owner is allowed "
         "to invoke this action."),
        ({"Label": "x", "AWSAccountIds": ["12345"], "Actions": ["SendMessage"]}, "InvalidParameterValue", None),
        ({"Label": "x", "AWSAccountIds": [], "Actions": ["SendMessage"]}, "InvalidParameterValue",
         "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify."),
        ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": []}, "MissingParameter",
         "The request must contain the parameter Actions."),
        ({"Label": "x", "AWSAccountIds": ["111111111111"], "Actions": ["SendMessage"] * 8}, "OverLimit",
         "8 Actions were found, maximum allowed is 7."))
    for args, expected, message in refusals:
        with pytest.raises(ClientError) as exc:
            sqs.add_permission(QueueUrl=url, **args)
        assert code(exc) == expected, args
        assert message is None or exc.value.response["Error"]["Message"] == message
    sqs.remove_permission(QueueUrl=url, Label="one")
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["two_2"]
    with pytest.raises(ClientError) as exc:
        sqs.remove_permission(QueueUrl=url, Label="one")
    assert exc.value.response["Error"]["Message"] == ("Value one for parameter Label is invalid. Reason: can't find "
                                                      "label on existing policy.")
    sqs.remove_permission(QueueUrl=url, Label="two_2")
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])


def test_error_codes_and_messages_as_sqs_sends_them(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="msgs", tags={"a": "b"})["QueueUrl"]
    for call, expected in (
            (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[]),
             "There should be at least one SendMessageBatchRequestEntry in the request."),
            (lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[]),
             "There should be at least one DeleteMessageBatchRequestEntry in the request."),
            (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a b", "MessageBody": "x"}]),
             "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most "
             "80 letters long."),
            (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "b" * 1_048_577}]),
             "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."),
            (lambda: sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)}),
             "Too many tags added for queue msgs."),
            (lambda: sqs.untag_queue(QueueUrl=url, TagKeys=[]),
             "Tag keys must be between 1 and 128 characters in length."),
            (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
                "öther": {"DataType": "String", "StringValue": "s"}}),
             "The message attribute name 'öther' is invalid. Attribute name can contain A-Z, a-z, 0-9, underscore "
             "(_), hyphen (-), and period (.) characters."),
            (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
                "t": {"DataType": "Invalid", "StringValue": "s"}}),
             "The message attribute 't' has an invalid message attribute type, the set of supported type prefixes "
             "is Binary, Number, and String."),
            (lambda: sqs.create_queue(QueueName=""),
             "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")):
        with pytest.raises(ClientError) as exc:
            call()
        assert exc.value.response["Error"]["Message"] == expected
    with pytest.raises(ClientError) as exc:
        sqs.get_queue_attributes(QueueUrl="http://whatever-incorrect-queue-address", AttributeNames=["All"])
    assert code(exc) == "AWS.SimpleQueueService.NonExistentQueue"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # An attribute name with stray spaces is that attribute; a text maxReceiveCount reads back as a number.
    spaced = sqs.create_queue(QueueName="spaced", Attributes={"VisibilityTimeout ": "7"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=spaced, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "7"}


def test_retention_deletes_old_messages_audits_and_counts_them(cli_env: dict[str, str], tmp_path: Path, dsn: str,
                                                               schema: str) -> None:
    import urllib.request

    proc, url = start_sqs(cli_env, tmp_path / "sqs.log", "--no-auth", "--sweep-interval", "0.2s")
    try:
        sqs = client(url)
        q = sqs.create_queue(QueueName="brief", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        old = sqs.send_message(QueueUrl=q, MessageBody="old")["MessageId"]
        flying = sqs.send_message(QueueUrl=q, MessageBody="in flight")["MessageId"]
        sqs.send_message(QueueUrl=q, MessageBody="young")
        [got] = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=1, VisibilityTimeout=600)["Messages"]
        assert got["MessageId"] == old
        ids = [int(m.replace("-", ""), 16) for m in (old, flying)]
        with connect(dsn) as conn:
            conn.execute(f'UPDATE "{schema}".jobs SET created_at = now() - interval \'61 seconds\' WHERE id = ANY(%s)',
                         (ids,))

        def swept() -> bool:
            with connect(dsn) as conn:
                return conn.execute(f'SELECT count(*) AS n FROM "{schema}".job_events WHERE event = \'expired\' '
                                    "AND reason = 'retention'").fetchone()["n"] == 2
        wait_for(swept, 10, "the retention sweep")
        left = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=10)["Messages"]
        assert [m["Body"] for m in left] == ["young"]
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            assert 'tenure_sqs_messages_expired_total{queue="brief"} 2.0' in resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_move_tasks_are_shared_by_replicas_and_survive_their_runner(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A task started on one replica is listed and cancelled on another; a task whose replica
    was killed is resumed by another one."""
    a, url_a = start_sqs(cli_env, tmp_path / "a.log", "--no-auth", "--sweep-interval", "0.5s")
    b, url_b = start_sqs(cli_env, tmp_path / "b.log", "--no-auth", "--sweep-interval", "0.5s")
    try:
        one, two = client(url_a), client(url_b)
        dlq = one.create_queue(QueueName="moves-dlq")["QueueUrl"]
        dlq_arn = one.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        src = one.create_queue(QueueName="moves-src", Attributes={"RedrivePolicy": json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]
        for i in range(0, 40, 10):
            one.send_message_batch(QueueUrl=dlq, Entries=[{"Id": f"m{j}", "MessageBody": f"m{j}"}
                                                          for j in range(i, i + 10)])
        task = one.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=2)["TaskHandle"]
        [listed] = two.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
        assert listed["TaskHandle"] == task and listed["Status"] == "RUNNING"
        moved = two.cancel_message_move_task(TaskHandle=task)["ApproximateNumberOfMessagesMoved"]
        assert one.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "CANCELLED"
        # Started on a, which is then killed: b resumes it once a's heartbeat is stale.
        task = one.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=10)["TaskHandle"]
        time.sleep(0.3)
        a.kill()
        a.wait()
        wait_for(lambda: two.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "COMPLETED", 30,
                 "the resumed move task")
        entry = two.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
        assert entry["TaskHandle"] == task and entry["ApproximateNumberOfMessagesMoved"] == 40 - moved
        assert "resumed here" in (tmp_path / "b.log").read_text()
        assert two.get_queue_attributes(QueueUrl=src, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"]["ApproximateNumberOfMessages"] == "40"
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
