"""`tenure sqs` and `tenure ui` never load the worker runtime (issue 37, item 2): ``import
tenure`` imports its public names on first use, so the servers start without the handler
machinery. Checked on ``python -X importtime``'s list of every module a process imports."""

from __future__ import annotations

import subprocess
import sys

import pytest


def imported_modules(*args: str) -> list[str]:
    """The modules ``python -X importtime ARGS`` imports (the process must succeed)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]


@pytest.mark.parametrize("command", ["sqs", "ui"])
def test_the_servers_load_no_worker_module(command: str) -> None:
    modules = imported_modules("-m", "tenure", command, "--help")
    assert f"tenure.{command}" in modules  # the list is the command's
    assert [m for m in modules if m == "tenure.worker" or m.startswith("tenure.worker.")] == []


def test_the_public_names_still_import_from_tenure() -> None:
    code = ("import tenure; from tenure import App, JobContext, enqueue, cancel, CancelReport, LeaseLost; "
            "assert App.__module__ == 'tenure.worker.app' and set(tenure.__all__) <= set(dir(tenure)); "
            "import sys; assert 'tenure.worker.app' in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import tenure, sys; tenure.NoSuchName"], capture_output=True,
                          text=True, timeout=120)
    assert "AttributeError" in proc.stderr and "NoSuchName" in proc.stderr
