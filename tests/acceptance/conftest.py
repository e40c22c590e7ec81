"""Helpers for running the CLI and workers as subprocesses against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def cli_env(dsn: str, schema: str) -> dict[str, str]:
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("TENURE_LOG_JSON", None)
    return env


@pytest.fixture
def spawn(cli_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(tmp_path / f"proc-{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tenure.cli", *args], env=env or cli_env,
                                    stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def run_cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tenure.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
