"""`tenure sqs --credentials FILE`: SigV4 verified with real boto3 signing; the refusals SQS documents."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from botocore.exceptions import ClientError

from sqs_server import client, start_sqs
from support.processes import run_cli

pytestmark = pytest.mark.acceptance


@pytest.fixture
def signed_url(cli_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    creds = tmp_path / "sqs-credentials"
    creds.write_text("# key:secret:globs\nAKIDORDERS:s3cr3t/orders+key:orders-*,shared\n"
                     "AKIDADMIN:admin-secret:*\n")
    proc, url = start_sqs(cli_env, tmp_path / "sqs.log", "--credentials", str(creds))
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _code(call: Any) -> tuple[str, int]:
    with pytest.raises(ClientError) as exc:
        call()
    return str(exc.value.response["Error"]["Code"]), int(exc.value.response["ResponseMetadata"]["HTTPStatusCode"])


def test_signatures_keys_and_queue_globs(signed_url: str) -> None:
    orders = client(signed_url, "AKIDORDERS", "s3cr3t/orders+key")
    url = orders.create_queue(QueueName="orders-eu")["QueueUrl"]
    orders.send_message(QueueUrl=url, MessageBody="signed")
    assert orders.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "signed"
    admin = client(signed_url, "AKIDADMIN", "admin-secret")
    admin.create_queue(QueueName="billing")
    # A key sees and touches only the queues its globs match.
    assert [u.rsplit("/", 1)[1] for u in orders.list_queues()["QueueUrls"]] == ["orders-eu"]
    assert len(admin.list_queues()["QueueUrls"]) == 2
    assert _code(lambda: orders.create_queue(QueueName="billing-2")) == ("AccessDenied", 403)
    assert _code(lambda: orders.get_queue_url(QueueName="billing")) == ("AccessDenied", 403)
    wrong = client(signed_url, "AKIDORDERS", "not-the-secret")
    assert _code(lambda: wrong.list_queues()) == ("SignatureDoesNotMatch", 403)
    unknown = client(signed_url, "AKIDNOBODY", "x")
    assert _code(lambda: unknown.list_queues()) == ("InvalidClientTokenId", 403)
    other_region = client(signed_url, "AKIDADMIN", "admin-secret", region="eu-west-1")
    assert _code(lambda: other_region.list_queues())[1] == 403


def test_a_request_dated_more_than_15_minutes_off_is_refused(signed_url: str) -> None:
    admin = client(signed_url, "AKIDADMIN", "admin-secret")
    skewed = datetime.now(timezone.utc) - timedelta(minutes=16)
    with mock.patch("botocore.auth.get_current_datetime", return_value=skewed.replace(tzinfo=None)):
        code, status = _code(lambda: admin.list_queues())
    assert code == "RequestExpired" and status == 400
    admin.list_queues()  # the clock back: accepted again


def test_unsigned_requests_are_refused_without_no_auth(signed_url: str) -> None:
    import urllib.error
    import urllib.request
    req = urllib.request.Request(signed_url + "/", data=b"{}", headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=10)
    assert exc.value.code == 403
    assert exc.value.headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"
    assert b"com.amazonaws.sqs#MissingAuthenticationToken" in exc.value.read()


def test_bad_command_lines_exit_2_with_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    out = run_cli(cli_env, "sqs")
    assert out.returncode == 2 and "--credentials" in out.stderr
    out = run_cli(cli_env, "sqs", "--credentials", str(tmp_path / "missing"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "cannot read" in out.stderr
    bad = tmp_path / "bad"
    bad.write_text("just-a-key\n")
    out = run_cli(cli_env, "sqs", "--credentials", str(bad))
    assert out.returncode == 2 and f"{bad}:1:" in out.stderr
    out = run_cli(cli_env, "sqs", "--no-auth", "--account-id", "12")
    assert out.returncode == 2 and "--account-id" in out.stderr
    out = run_cli(cli_env, "sqs", "--no-auth", "--bind", "nonsense")
    assert out.returncode == 2 and "--bind" in out.stderr
