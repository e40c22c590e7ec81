"""Run moto's SQS test suite against `tenure sqs` and print the count (issue 36 item 3).

    .venv/bin/python scripts/moto_sqs_suite.py [--moto 5.2.1] [--dsn DSN] [-k EXPR] [--json OUT]

What it does, step by step:

1. ``pip download moto==VERSION --no-deps --no-binary :all:`` (the sdist carries ``tests/test_sqs``)
   into ``~/.cache/tenure/moto-VERSION`` and unpacks it; a venv there gets
   ``moto[sqs,server]==VERSION``, pytest and freezegun (moto's tests import them). Cached.
2. A fresh schema on ``--dsn`` (default ``$TENURE_DATABASE_URL``, else an embedded server in
   ``~/.cache/tenure/moto-pg``), ``tenure migrate``, then ``tenure sqs --no-auth --account-id
   123456789012`` (moto's account) on a free port.
3. pytest on moto's ``tests/test_sqs/test_sqs.py`` and ``test_sqs_message_attributes.py`` (the
   files that judge SQS's behaviour; the others test moto's server, CloudFormation, Lambda, IAM
   and its multi-account mode) in moto's server mode: ``TEST_SERVER_MODE=true``,
   ``TEST_SERVER_MODE_ENDPOINT`` = the server, so every ``boto3.client`` in a ``mock_aws``
   block is sent to `tenure sqs`. moto's reset call (``POST /moto-api/reset``) is turned off
   (``MOTO_CALL_RESET_API=false``); instead a plugin deletes every queue through the SQS API
   before each test. Tests that read moto's in-process state skip themselves in server mode.
4. Prints passed/failed/skipped/errors and each failure's first line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tenure"
FILES = ("tests/test_sqs/test_sqs.py", "tests/test_sqs/test_sqs_message_attributes.py")
PLUGIN = '''
import boto3, os, pytest

@pytest.fixture(autouse=True)
def _tenure_reset():
    """moto's reset, through the SQS API: delete every queue."""
    sqs = boto3.client("sqs", endpoint_url=os.environ["TEST_SERVER_MODE_ENDPOINT"], region_name="us-east-1")
    for url in sqs.list_queues(MaxResults=1000).get("QueueUrls", []):
        sqs.delete_queue(QueueUrl=url)
    yield
'''


def prepare(version: str) -> tuple[Path, Path]:
    """moto's unpacked sdist and the python of a venv with moto installed."""
    home = CACHE / f"moto-{version}"
    src = home / f"moto-{version}"
    if not (src / "tests" / "test_sqs").is_dir():
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"moto=={version}", "--no-deps", "--no-binary",
                        ":all:", "-d", str(home), "-q"], check=True)
        with tarfile.open(home / f"moto-{version}.tar.gz") as tar:
            tar.extractall(home, filter="data")
    python = home / "venv" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"moto[sqs,server]=={version}", "pytest",
                        "freezegun"], check=True)
    return src, python


def database(dsn: str | None) -> str:
    if dsn:
        return dsn
    from tenure.core.embedded import ensure_server
    return ensure_server(CACHE / "moto-pg" / "data").dsn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moto", default="5.2.1", help="moto version whose tests run (default 5.2.1)")
    parser.add_argument("--dsn", default=os.environ.get("TENURE_DATABASE_URL"))
    parser.add_argument("-k", default=None, help="pytest -k expression (a subset)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    src, python = prepare(args.moto)
    dsn = database(args.dsn)
    schema = f"moto_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    env.pop("TENURE_LOG_JSON", None)
    work = Path(tempfile.mkdtemp(prefix="tenure-moto-"))
    subprocess.run([sys.executable, "-m", "tenure.cli", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
    log = work / "sqs.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "tenure.cli", "sqs", "--no-auth", "--bind", "127.0.0.1:0",
                                   "--account-id", "123456789012"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        import time
        url = None
        for _ in range(600):
            found = re.search(r"sqs listening on (http://\S+)", log.read_text(errors="replace"))
            if found:
                url = found.group(1)
                break
            if server.poll() is not None:
                break
            time.sleep(0.05)
        if url is None:
            print(log.read_text(), file=sys.stderr)
            return 2
        (work / "tenure_moto_reset.py").write_text(PLUGIN)
        junit = work / "junit.xml"
        test_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TENURE_"))}
        test_env.update(TEST_SERVER_MODE="true", TEST_SERVER_MODE_ENDPOINT=url, MOTO_CALL_RESET_API="false",
                        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                        AWS_DEFAULT_REGION="us-east-1", PYTHONPATH=str(work))
        cmd = [str(python), "-m", "pytest", "-q", "-p", "tenure_moto_reset", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "junit_family=xunit1", *FILES]
        if args.k:
            cmd += ["-k", args.k]
        subprocess.run(cmd, cwd=src, env=test_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results = summarise(junit)
    finally:
        server.terminate()
        server.wait(timeout=15)
        subprocess.run([sys.executable, "-c", "import sys, psycopg; c = psycopg.connect(sys.argv[1], autocommit=True);"
                        " c.execute(f'DROP SCHEMA IF EXISTS \"{sys.argv[2]}\" CASCADE')", dsn, schema], check=False)
    counts = {k: len(v) for k, v in results.items()}
    print(f"moto {args.moto} SQS suite against tenure sqs: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped ({sum(counts.values())} tests)")
    for name, why in sorted(results["failed"].items()):
        print(f"  FAILED {name}: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


def summarise(junit: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {"passed": {}, "failed": {}, "skipped": {}}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('file') or case.get('classname')}::{case.get('name')}".replace("tests/test_sqs/", "")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            out["failed"][name] = (failure.get("message") or "").splitlines()[0][:200] if failure.get("message") \
                else ""
        elif skipped is not None:
            out["skipped"][name] = (skipped.get("message") or "")[:200]
        else:
            out["passed"][name] = ""
    return out


if __name__ == "__main__":
    sys.exit(main())
