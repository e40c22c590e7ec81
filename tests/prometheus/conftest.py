"""Fixtures for the live Prometheus/Alertmanager tests: the Debian binaries (missing ones fail
under CI=true and skip locally), and `tenure` subprocesses against the test database.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if path:
            return path
    message = f"{' / '.join(names)} not installed (run scripts/tools/prometheus.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _binary("prometheus")


@pytest.fixture(scope="session")
def alertmanager_bin() -> str:
    return _binary("prometheus-alertmanager", "alertmanager")


@pytest.fixture
def tenure_env(dsn: str, schema: str) -> dict[str, str]:
    """Environment for `tenure` subprocesses: the test schema and the `livestack` task module."""
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("TENURE_LOG_JSON", None)
    return env


Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def tenure_proc(tenure_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    """Start `tenure ARGS...` subprocesses; each one still running at teardown is killed (by pid)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        name = f"tenure-{len(procs)}-{args[0]}.log"
        with open(tmp_path / name, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tenure.cli", *args], env=tenure_env,
                                    stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        if p.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)  # resume a SIGSTOPped one so it is reaped promptly
            p.kill()
        p.wait(timeout=15)

