"""Reading the Markdown docs the way the doc tests need them, and running `tenure` as a user does.

The docs under test: README.md, everything in docs/, the chart's README and the e2e READMEs.
Nothing here is copied from them: every test extracts what it checks from the files at run time.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = tuple(sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "charts/tenure/README.md",
                          *(ROOT / "e2e").rglob("README.md")]))
TENURE = str(Path(sys.executable).with_name("tenure"))
"""The installed console script: the CLI exactly as a user runs it (never its internals)."""


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language tag, the doc and the line of its opening fence."""

    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+)\s*([\w+-]*)", lines[i])
        if fence:
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence.group(2)):
                body.append(lines[i][len(fence.group(1)):])
                i += 1
            blocks.append(Block(path, start + 1, fence.group(3).lower(), "\n".join(body) + "\n"))
        i += 1
    return blocks


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    in_block = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip().startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            out.append((n, line))
    return out


def inline_code(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every `inline code` span outside fenced blocks. A span may wrap onto the
    next line (its line break reads as a space); table pipes are unescaped."""
    lines = prose(path)
    text = "\n".join(line for _, line in lines)
    starts, offset = [], 0
    for _, line in lines:
        starts.append(offset)
        offset += len(line) + 1
    spans: list[tuple[int, str]] = []
    for m in re.finditer(r"`([^`]+)`", text):
        index = max(i for i, start in enumerate(starts) if start <= m.start())
        spans.append((lines[index][0], m.group(1).replace("\n", " ").replace("\\|", "|")))
    return spans


def section(path: Path, heading: str) -> str:
    """The text under the Markdown heading that starts with ``heading``, up to the next heading of
    its level or above (lines inside fenced code blocks are never headings)."""
    out: list[str] = []
    level = 0
    in_block = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
        m = None if in_block else re.match(r"^(#+) (.*)$", line)
        if level and m and len(m.group(1)) <= level:
            break
        if level:
            out.append(line)
        elif m and m.group(2).startswith(heading):
            level = len(m.group(1))
    assert level, f"{path.name} has no heading {heading!r}"
    return "\n".join(out) + "\n"


def help_env() -> dict[str, str]:
    """No line wrapping in --help (argparse reads COLUMNS), no inherited database settings."""
    env = {**os.environ, "COLUMNS": "1000"}
    for var in ("TENURE_DATABASE_URL", "TENURE_SCHEMA", "TENURE_RETRY_BASE_DELAY", "TENURE_RETRY_MAX_DELAY",
                "TENURE_RETRY_MAX_ATTEMPTS", "TENURE_LOG_JSON"):
        env.pop(var, None)
    return env


@functools.lru_cache(maxsize=None)
def cli_help(*command: str) -> str:
    """``tenure COMMAND... --help`` from a subprocess ("" when that command does not exist)."""
    out = subprocess.run([TENURE, *command, "--help"], env=help_env(), capture_output=True, text=True, timeout=300)
    return out.stdout if out.returncode == 0 else ""


def _choices(help_text: str) -> list[str]:
    m = re.search(r"^\s*\{([\w,-]+)\}", help_text, flags=re.MULTILINE)
    return m.group(1).split(",") if m else []


@functools.lru_cache(maxsize=None)
def command_tree() -> dict[tuple[str, ...], str]:
    """Every command path (``("dlq", "replay")``...) with its --help text; ``()`` is the top level."""
    tree: dict[tuple[str, ...], str] = {(): cli_help()}
    level: list[tuple[str, ...]] = [(c,) for c in _choices(tree[()])]
    with ThreadPoolExecutor(max_workers=4) as pool:  # one process per command, level by level
        while level:
            for path, text in zip(level, pool.map(lambda p: cli_help(*p), level)):
                tree[path] = text
            level = [(*path, c) for path in level for c in _choices(tree[path])]
    return tree


def options(help_text: str) -> dict[str, str]:
    """``--flag`` -> its help line(s) (with the default, when argparse prints one)."""
    opts: dict[str, str] = {}
    current: list[str] = []
    for line in help_text.splitlines():
        m = re.match(r"^\s{2}(-\S.*?)(?:\s{2,}(.*))?$", line)
        if m:
            current = re.findall(r"(--[a-z][a-z0-9-]*)", m.group(1))
            for flag in current:
                opts[flag] = m.group(2) or ""
        elif current and line.startswith(" " * 10) and line.strip():
            for flag in current:
                opts[flag] = (opts[flag] + " " + line.strip()).strip()
        elif not line.strip():
            current = []
    return opts


def help_default(help_line: str) -> str | None:
    """The default a help line states: ``(default 5)``, ``(default: 5)``, ``(default $ENV or 5)``,
    ``(what it is; default 5)``."""
    m = re.search(r"(?:\(|[;,]\s*)default:? (?:[^)]*? or )?([^()\s]+)\)", help_line)
    return m.group(1) if m else None


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def same_value(doc: str, helped: str) -> bool:
    """A doc's value and a --help default agree: equal as durations/numbers (``1h`` = ``3600.0s``) or as text."""
    a, b = _DURATION.match(doc.strip()), _DURATION.match(helped.strip())
    if a and b:
        return abs(float(a.group(1)) * _UNITS[a.group(2)] - float(b.group(1)) * _UNITS[b.group(2)]) < 1e-9
    return doc.strip().strip("`") == helped.strip()
