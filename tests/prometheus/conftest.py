"""Fixtures for the live Prometheus/Alertmanager tests: the Debian binaries (missing ones fail
under CI=true and skip locally), and `tenure` subprocesses against the test database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.processes import spawner
from support.processes import tenure_env as tenure_env_for

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
    return tenure_env_for(dsn, schema, HERE)


Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def tenure_proc(tenure_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    """Start `tenure ARGS...` subprocesses; each one still running at teardown is killed."""
    with spawner(tenure_env, tmp_path) as start:
        yield start  # type: ignore[misc]

