"""Running `tenure` as subprocesses against the test database (acceptance and Prometheus tests)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any


def tenure_env(dsn: str, schema: str, *import_paths: Path) -> dict[str, str]:
    """The environment of a `tenure` subprocess: this test's database and schema, plain logs,
    and ``import_paths`` on PYTHONPATH (for the tests' task modules)."""
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema,
           "PYTHONPATH": os.pathsep.join([*map(str, import_paths), os.environ.get("PYTHONPATH", "")])}
    env.pop("TENURE_LOG_JSON", None)
    return env


@contextmanager
def spawner(env: dict[str, str], log_dir: Path) -> Iterator[object]:
    """Yields ``start(*args, env=None)``, which runs ``tenure ARGS`` with its output in
    ``log_dir``; every process still running at the end is resumed (if stopped) and killed."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env_override: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(log_dir / f"tenure-{len(procs)}-{args[0]}.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tenure.cli", *args], env=env_override or env,
                                    stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for p in procs:
            if p.poll() is None:
                with suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)  # a SIGSTOPped process must run to die promptly
                p.kill()
            p.wait(timeout=15)


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


def wait_registered(repo: Any, workers: list[subprocess.Popen[bytes]], timeout: float = 30) -> dict[int, str]:
    """Each `tenure worker` process's registry id by pid, once all of them are alive in the
    registry (``repo.worker_list()``)."""
    pids = {p.pid for p in workers}

    def registered() -> dict[int, str] | None:
        ids = {int(w["pid"]): str(w["id"]) for w in repo.worker_list() if w["alive"] and int(w["pid"]) in pids}
        return ids if len(ids) == len(pids) else None

    found: dict[int, str] = wait_for(registered, timeout, f"{len(pids)} workers registered")
    return found


def start_server(env: dict[str, str], log: Path, args: list[str], banner: re.Pattern[str],
                 timeout: float = 30) -> tuple[subprocess.Popen[bytes], str]:
    """``tenure ARGS`` as a server process logging to ``log``; the process and the first group of
    ``banner`` (its URL) once the log shows it. Fails with the log if it exits or never says so."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tenure.cli", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = banner.search(log.read_text(errors="replace"))
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"tenure {args[0]} exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"tenure {args[0]} did not start: {log.read_text()}")
