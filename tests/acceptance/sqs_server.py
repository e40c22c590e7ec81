"""Starting `tenure sqs` as a subprocess on a free port for the SQS tests, and boto3 clients for it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

URL = re.compile(r"sqs listening on (http://\S+)")


def start_sqs(env: dict[str, str], log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``tenure sqs ARGS --bind 127.0.0.1:0``; returns the process and its URL once it listens."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tenure.cli", "sqs", "--bind", "127.0.0.1:0", *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = URL.search(log.read_text(errors="replace"))
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"tenure sqs exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"tenure sqs did not start: {log.read_text()}")


def client(url: str, key: str = "test", secret: str = "test", region: str = "us-east-1") -> Any:
    return boto3.client("sqs", endpoint_url=url, region_name=region, aws_access_key_id=key,
                        aws_secret_access_key=secret,
                        config=Config(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5))
