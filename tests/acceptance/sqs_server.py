"""Starting `tenure sqs` as a subprocess on a free port for the SQS tests, and boto3 clients for it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from support.processes import start_server

URL = re.compile(r"sqs listening on (http://\S+)")


def start_sqs(env: dict[str, str], log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``tenure sqs ARGS --bind 127.0.0.1:0``; returns the process and its URL once it listens."""
    return start_server(env, log, ["sqs", "--bind", "127.0.0.1:0", *args], URL)


def client(url: str, key: str = "test", secret: str = "test", region: str = "us-east-1") -> Any:
    return boto3.client("sqs", endpoint_url=url, region_name=region, aws_access_key_id=key,
                        aws_secret_access_key=secret,
                        config=Config(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5))
