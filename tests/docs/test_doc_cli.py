"""Every `tenure` command line the docs show, and every flag default they state, against the CLI's
own ``--help`` (a subprocess of the installed ``tenure`` script, never the parser's internals).

Also the few CLI statements that need a run rather than ``--help``: where the global options may
go, which grace the reaper refuses, and which columns `tenure stats --queue Q` prints.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from docsupport import (
    DOC_FILES,
    ROOT,
    TENURE,
    code_blocks,
    command_tree,
    help_default,
    help_env,
    inline_code,
    options,
    prose,
    same_value,
)

SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
# `tenure` in command position: start of a span/line, after a shell operator or prompt, or a venv's bin/.
COMMAND = re.compile(r"(?:^|[;&|(]\s*|\$\s+|bin/)tenure((?:\s+[^\s#;&]+)*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Mention:
    """``tenure PATH... ARGS`` written in a doc."""

    path: Path
    line: int
    command: tuple[str, ...]
    args: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _shell_lines(path: Path) -> Iterator[tuple[int, str]]:
    for block in code_blocks(path):
        if block.lang not in SHELL_LANGS:
            continue
        joined, first = "", 0
        for offset, raw in enumerate(block.text.splitlines(), start=1):
            line = raw.split(" #")[0] if not raw.lstrip().startswith("#") else ""
            if not joined:
                first = block.line + offset
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            yield first, joined + line
            joined = ""


def mentions() -> list[Mention]:
    tree = command_tree()
    found: list[Mention] = []
    for path in DOC_FILES:
        for line, text in [*inline_code(path), *_shell_lines(path)]:
            for m in COMMAND.finditer(text):
                tokens = m.group(1).split()
                command: tuple[str, ...] = ()
                rest = list(tokens)
                # Global options may come first: `tenure --schema S stats`.
                while rest and rest[0].startswith("--") and rest[0].split("=")[0] in options(tree[()]):
                    rest = rest[2:] if "=" not in rest[0] and len(rest) > 1 else rest[1:]
                while rest and (*command, rest[0]) in tree:
                    command, rest = (*command, rest[0]), rest[1:]
                found.append(Mention(path, line, command, " ".join(tokens)))
    return found


MENTIONS = mentions()


def test_the_docs_show_commands_at_all() -> None:
    commands = {m.command[0] for m in MENTIONS if m.command}
    assert {"migrate", "enqueue", "worker", "reaper", "stats", "dlq", "doctor", "chaos"} <= commands


@pytest.mark.parametrize("mention", [m for m in MENTIONS if FLAG.search(m.args)], ids=lambda m: m.where)
def test_every_flag_in_a_documented_command_exists(mention: Mention) -> None:
    tree = command_tree()
    known = set(options(tree[mention.command])) if mention.command else set()
    known |= set(options(tree[()])) if not mention.command else set()
    flags = {f for f in FLAG.findall(mention.args)}
    # Global options written before the subcommand are checked against the top level.
    head = mention.args.split(mention.command[0])[0] if mention.command else ""
    global_flags = set(FLAG.findall(head))
    missing = {f for f in flags - global_flags if f not in known}
    missing |= {f for f in global_flags if f not in options(tree[()])}
    assert not missing, (f"{mention.where}: `tenure {mention.args}` uses {sorted(missing)}, which "
                         f"`tenure {' '.join(mention.command)} --help` does not list")


# -- defaults ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DefaultClaim:
    path: Path
    line: int
    flag: str
    value: str
    command: tuple[str, ...] | None  # None: resolved from the flag and the nearest command mentioned before

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


VALUE = r"\d+(?:\.\d+)?\s?(?:ms|s|m|h|d)?"
PROSE_DEFAULTS = (
    re.compile(rf"`(--[a-z][a-z0-9-]*)`\s*\(\s*(?:default\s+)?({VALUE})(?:\s+by default)?\s*[,)]"),
    re.compile(r"`(--[a-z][a-z0-9-]*)`,?\s*\(?default:?\s+`?([\w.-]+(?:\s?s\b)?)`?"),
)


def default_claims() -> list[DefaultClaim]:
    claims: list[DefaultClaim] = []
    for m in MENTIONS:  # synopses: `tenure doctor [--window 1h]`
        for flag, value in re.findall(r"\[(--[a-z][a-z0-9-]*)\s+(\d[\w.]*)\]", m.args):
            claims.append(DefaultClaim(m.path, m.line, flag, value, m.command))
    for path in DOC_FILES:
        for line, text in prose(path):
            for pattern in PROSE_DEFAULTS:
                for flag, value in pattern.findall(text):
                    claims.append(DefaultClaim(path, line, flag, value, None))
    return claims


def _resolve(claim: DefaultClaim) -> tuple[str, ...]:
    if claim.command is not None:
        return claim.command
    tree = command_tree()
    candidates = [c for c in tree if c and claim.flag in options(tree[c])]
    if len(candidates) == 1:
        return candidates[0]
    before = [m for m in MENTIONS if m.path == claim.path and m.line <= claim.line and m.command in candidates]
    assert before, f"{claim.where}: cannot tell which command's {claim.flag} is meant (one of {candidates})"
    return before[-1].command


CLAIMS = default_claims()


def test_the_docs_state_flag_defaults_at_all() -> None:
    flags = {c.flag for c in CLAIMS}
    assert {"--window", "--workers", "--max-lease-total", "--completed-interval"} <= flags, flags


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.where}{c.flag}")
def test_every_documented_default_matches_help(claim: DefaultClaim) -> None:
    command = _resolve(claim)
    line = options(command_tree()[command]).get(claim.flag)
    assert line is not None, f"{claim.where}: `tenure {' '.join(command)}` has no {claim.flag}"
    helped = help_default(line)
    assert helped is not None, (f"{claim.where}: the doc says {claim.flag} defaults to {claim.value!r}; "
                                f"`tenure {' '.join(command)} --help` states no default: {line!r}")
    assert same_value(claim.value, helped), (
        f"{claim.where}: the doc says {claim.flag} defaults to {claim.value!r}, "
        f"`tenure {' '.join(command)} --help` says {helped!r}")


# -- statements that need a run ---------------------------------------------------------------

def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TENURE, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def db_env(dsn: str, schema: str) -> dict[str, str]:
    """A user's environment: the test database, but no TENURE_SCHEMA (the commands name it)."""
    return {**help_env(), "TENURE_DATABASE_URL": dsn}


@pytest.mark.acceptance
def test_runbook_global_options_are_accepted_where_it_says(db_env: dict[str, str], schema: str) -> None:
    """docs/runbooks.md: "All `tenure` commands accept `--database-url` ... and `--schema`"."""
    text = (ROOT / "docs/runbooks.md").read_text(encoding="utf-8")
    claim = re.search(r"All `tenure` commands accept `--database-url`[^.]*\.", text.replace("\n", " "))
    assert claim, "the runbook's conventions no longer say where --database-url and --schema go"
    before = _run(db_env, "--schema", schema, "stats", "--json")
    assert before.returncode == 0 and before.stdout.strip() == "[]", before.stderr
    if "before the subcommand" in claim.group(0):
        return
    # As written, "every command accepts them": also after the subcommand, for every command.
    after = _run(db_env, "stats", "--schema", schema, "--json")
    assert after.returncode == 0 and after.stdout.strip() == "[]", (
        f"`tenure stats --schema S` exits {after.returncode}: {after.stderr.strip()}")
    tree = command_tree()
    leaves = [c for c in tree if c and not any(len(o) > len(c) and o[: len(c)] == c for o in tree)]
    refused = [" ".join(c) for c in leaves
               if not {"--database-url", "--schema"} <= set(options(tree[c]))]
    assert refused == [], f"these commands do not accept --database-url/--schema after the subcommand: {refused}"


@pytest.mark.acceptance
def test_reaper_takes_the_heartbeat_floor_from_the_registry(db_env: dict[str, str], schema: str) -> None:
    """README: a `tenure worker` grace shorter than its heartbeat exits 2 with one line, while the
    reaper's `--heartbeat` "is only the floor" and "a grace below a heartbeat is not an error"."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "a `tenure worker` `--grace` shorter than its `--heartbeat`" in readme
    assert "a grace below a heartbeat is not an error" in readme
    env = {**db_env, "TENURE_SCHEMA": schema}
    out = _run(env, "reaper", "--once", "--grace", "0.5")
    assert out.returncode == 0, f"`tenure reaper --once --grace 0.5` exits {out.returncode}: {out.stdout}{out.stderr}"
    bad = _run(env, "worker", "--app", "tenure.demo.tasks:app", "--heartbeat", "2", "--grace", "1", "--burst")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "grace" in bad.stderr, bad.stderr


# What the runbooks say `tenure stats --queue Q` shows -> the table column that shows it.
STATS_FIGURES = {
    "ready": r"\bready\b", "scheduled": r"\bsched", "running": r"\brunning\b", "expired": r"expired",
    "heartbeat lag": r"hb_lag|heartbeat_lag", "p95": r"p95", "redelivered": r"redeliver",
    "in flight": r"in_flight|inflight", "oldest running": r"oldest_run", "oldest ready": r"oldest_ready",
    "live workers": r"workers",
}


@pytest.mark.acceptance
def test_stats_table_shows_what_the_runbooks_say(db_env: dict[str, str], schema: str) -> None:
    text = (ROOT / "docs/runbooks.md").read_text(encoding="utf-8").replace("\n", " ")
    said: set[str] = set()
    for m in re.finditer(r"`tenure stats --queue Q`([^`]*?)(?:[;.]\s|`|$)", text):
        context = m.group(1).lower()
        said |= {figure for figure in STATS_FIGURES if figure in context}
    assert said, "the runbooks no longer say what `tenure stats --queue Q` shows"
    env = {**db_env, "TENURE_SCHEMA": schema}
    enqueued = _run(env, "enqueue", "noop", "--queue", "q1")
    assert enqueued.returncode == 0, enqueued.stderr
    out = _run(env, "stats", "--queue", "q1")
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    missing = sorted(f for f in said if not re.search(STATS_FIGURES[f], header))
    assert missing == [], f"the runbooks say `tenure stats --queue Q` shows {missing}; its header is {header!r}"



# Placeholders of the runbooks' commands, as an operator would fill them in for this test's data.
PLACEHOLDERS = {"M:A": "tenure.demo.tasks:app", "C": "upstream_5xx", "Q": "default"}


@pytest.mark.acceptance
def test_runbook_dlq_replay_commands_validate(db_env: dict[str, str], schema: str) -> None:
    """Every `tenure dlq replay ... --dry-run` in the runbooks, placeholders filled, lists the valid
    job and skips the one its task's validator refuses, moving nothing; then "without
    `--dry-run`" replays only the valid one."""
    from tenure.core.db import connect
    from tenure.core.repository import JobSpec, Repository

    commands = [m for m in MENTIONS if m.path.name == "runbooks.md" and m.command == ("dlq", "replay")
                and "--dry-run" in m.args]
    assert commands, "the runbooks no longer show a dlq replay dry run"
    env = {**db_env, "TENURE_SCHEMA": schema}
    for mention in commands:
        args = [PLACEHOLDERS.get(t, t) for t in mention.args.split()]
        assert "--app" in args, f"{mention.where}: `tenure {mention.args}` validates nothing without --app"
        with connect(env["TENURE_DATABASE_URL"]) as conn:
            repo = Repository(conn, schema)
            conn.execute(f'DELETE FROM "{schema}".jobs')
            repo.enqueue_many([JobSpec("send_invoice_email", {"invoice_id": "not-a-number"}),
                               JobSpec("send_invoice_email", {"invoice_id": 7})])
            bad, good = repo.claim("w", ["default"], 2, 30)
            for job in (bad, good):
                assert repo.dead_letter("w", job.id, job.lock_token, error="boom", error_code="upstream_5xx")
            dry = _run(env, *args)
            assert dry.returncode == 0, f"{mention.where}: {dry.stderr}"
            assert f"would replay {good.id}\n" in dry.stdout and f"would skip {bad.id}: " in dry.stdout, dry.stdout
            assert repo.queue_stats("default")[0].failed == 2, "a dry run moved jobs"
            real = _run(env, *[a for a in args if a != "--dry-run"])
            assert real.returncode == 0, real.stderr
            assert (repo.get_job(good.id) or {})["status"] == "pending"
            assert (repo.get_job(bad.id) or {})["status"] == "failed"
