"""A second real client, in another language: the AWS SDK for JavaScript v3 (``@aws-sdk/client-sqs``
from npm, installed on first use into tests/acceptance/sqs_js/node_modules) runs a send, receive,
visibility and delete script against a signed `tenure sqs`. Skipped, saying why, when node or npm
is missing or the install fails (no registry)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sqs_server import start_sqs

pytestmark = pytest.mark.acceptance
JS = Path(__file__).parent / "sqs_js"


def _sdk() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the JavaScript SDK test (Node 20: /usr/bin/node)")
    if (JS / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        return
    out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.skip(f"npm install @aws-sdk/client-sqs failed: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")


def test_javascript_sdk_v3_send_receive_visibility_delete(cli_env: dict[str, str], tmp_path: Path) -> None:
    _sdk()
    creds = tmp_path / "creds"
    creds.write_text("AKIDJS:js-secret/key:js-*\n")
    proc, url = start_sqs(cli_env, tmp_path / "sqs.log", "--credentials", str(creds))
    try:
        out = subprocess.run(["node", str(JS / "client.mjs"), url, "AKIDJS", "js-secret/key"], capture_output=True,
                             text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["md5OfBody"] == hashlib.md5("from javascript ✓".encode()).hexdigest()
    assert seen["received"] == ["batch one", "batch two", "from javascript ✓"]
    assert seen["attribute"] == "js" and seen["binary"] == [0, 1, 2]
    assert seen["receiveCount"] == "2" and seen["batchDeleted"] == 2 and seen["left"] == 0
    assert seen["missing"] == "QueueDoesNotExist"
