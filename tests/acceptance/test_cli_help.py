"""Every `tenure` command and subcommand answers ``--help`` as a subprocess, none is missing, and a
command module that fails to import fails `tenure` loudly instead of dropping its command."""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tenure.cli import build_parser

pytestmark = pytest.mark.acceptance

COMMANDS = {"migrate", "enqueue", "worker", "reaper", "exporter", "stats", "jobs", "jobs show", "prune", "dlq",
            "dlq list", "dlq show", "dlq replay", "dlq purge", "demo", "operator", "doctor", "chaos"}
GLOBAL_OPTIONS = ("--database-url", "--schema", "--log-json", "--log-level")


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append((*prefix, name))
                paths += _command_paths(sub, (*prefix, name))
    return paths


def _help(path: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tenure.cli", *path, "--help"], capture_output=True, text=True,
                          timeout=120)


def test_every_command_and_subcommand_has_help() -> None:
    paths = _command_paths(build_parser())
    assert {" ".join(p) for p in paths} >= COMMANDS, "a command is missing"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(paths, pool.map(_help, paths)))
    top = _help(())
    assert top.returncode == 0 and top.stdout.startswith("usage: tenure "), top.stderr
    for name in {p[0] for p in paths}:
        assert name in top.stdout, f"`tenure --help` does not list {name}"
    for path, result in results.items():
        command = " ".join(path)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stderr == "", (command, result.stderr)
        assert result.stdout.startswith(f"usage: tenure {command}"), (command, result.stdout[:200])
        for option in GLOBAL_OPTIONS:  # accepted after the subcommand too
            assert option in result.stdout, (command, option)


def test_a_command_module_that_cannot_import_fails_loudly() -> None:
    """Before the cli package, a failed import silently removed `tenure doctor` and `tenure chaos`.
    Now the command itself and `tenure --help` (every parser) fail with the import error; another
    command, which builds only its own parser, is not affected."""
    for argv, code in ((["doctor", "--help"], 1), (["--help"], 1), (["stats", "--help"], 0)):
        script = ("import sys; sys.modules['tenure.observability.doctor'] = None\n"
                  f"from tenure.cli import main\nmain({argv!r})")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert result.returncode == code, (argv, result.stdout, result.stderr)
        if code:
            assert "ModuleNotFoundError" in result.stderr and "tenure.observability.doctor" in result.stderr, \
                result.stderr


def test_unknown_options_and_commands_exit_2_with_one_line() -> None:
    for argv in (["no-such-command"], ["stats", "--no-such-flag"], ["dlq"], ["reaper", "--grace", "soon"]):
        result = subprocess.run([sys.executable, "-m", "tenure.cli", *argv], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2, (argv, result.stderr)
        assert result.stderr.startswith("tenure: error: ") and result.stderr.count("\n") == 1, (argv, result.stderr)
