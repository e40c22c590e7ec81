"""Helpers for running the CLI and workers as subprocesses against the test database."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.processes import spawner, tenure_env

HERE = Path(__file__).parent


@pytest.fixture
def cli_env(dsn: str, schema: str) -> dict[str, str]:
    return tenure_env(dsn, schema, HERE)


@pytest.fixture
def spawn(cli_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    with spawner(cli_env, tmp_path) as start:
        yield start  # type: ignore[misc]
