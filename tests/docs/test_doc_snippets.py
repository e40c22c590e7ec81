"""The README's quick start and every Python snippet in the README and docs/, run as written.

The snippets are extracted from the Markdown at test time. Each runs as its own script in an
empty directory against the test database. A snippet that defines a tenure ``app`` is then
served by a real `tenure worker` on the job the quick start enqueues, as a newcomer would.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docsupport import DOC_FILES, ROOT, Block, code_blocks, help_env, section

from support.processes import wait_for
from tenure.core.db import connect
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

SNIPPETS = [b for path in DOC_FILES for b in code_blocks(path) if b.lang in ("python", "py")]
APP_SNIPPETS = [b for b in SNIPPETS if re.search(r"^app = App\(", b.text, flags=re.MULTILINE)]


def quick_start() -> list[str]:
    """The README's quick-start commands, one shell line each, comments kept (they say "another terminal")."""
    blocks = re.findall(r"```sh\n(.*?)```", section(ROOT / "README.md", "Quick start"), flags=re.DOTALL)
    assert blocks, "the README's quick start has no sh block"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


@pytest.fixture
def fresh_schema(dsn: str) -> Iterator[str]:
    """A schema that does not exist yet: the quick start creates it with `tenure migrate`."""
    name = f"doc_{uuid.uuid4().hex[:12]}"
    yield name
    with connect(dsn) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _user_env(dsn: str, schema: str, *paths: Path) -> dict[str, str]:
    env = {**help_env(), "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), env.get("PYTHONPATH", "")])
    return env


def _shell(line: str, sourced: list[str]) -> list[str]:
    """The bash argv for ``line`` after the lines a user sourced (`. .venv/bin/activate`)."""
    return ["bash", "-c", " && ".join([*sourced, line])]


def test_the_docs_have_python_snippets() -> None:
    assert len(SNIPPETS) >= 4 and APP_SNIPPETS, [b.where for b in SNIPPETS]


@pytest.mark.parametrize("block", SNIPPETS, ids=lambda b: b.where)
def test_python_snippet_runs(block: Block, dsn: str, schema: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(block.text, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_user_env(dsn, schema, tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{block.where} fails as written:\n{out.stderr}"


def test_readme_testing_snippet_passes_under_pytest(dsn: str, tmp_path: Path) -> None:
    """The "Testing your tasks" snippet is a test file: saved as written and run by pytest (the
    plugin's fixtures on the test database), its tests pass."""
    blocks = re.findall(r"```python\n(.*?)```", section(ROOT / "README.md", "Testing your tasks"), flags=re.DOTALL)
    assert blocks, "the README's testing section has no python block"
    (tmp_path / "test_receipts.py").write_text(blocks[0], encoding="utf-8")
    env = {**_user_env(dsn, "unused", tmp_path), "TENURE_TEST_DATABASE_URL": dsn}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_receipts.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"README testing snippet fails under pytest:\n{out.stdout}\n{out.stderr}"
    assert "2 passed" in out.stdout, out.stdout


@pytest.mark.parametrize("block", APP_SNIPPETS, ids=lambda b: b.where)
def test_task_snippet_serves_the_quick_start_job(block: Block, dsn: str, fresh_schema: str,
                                                 tmp_path: Path) -> None:
    """The snippet's app, served by `tenure worker --burst`, completes the job the quick start
    enqueues, and its effect is recorded once under the snippet's idempotency key."""
    (tmp_path / "doc_tasks.py").write_text(block.text, encoding="utf-8")
    env = _user_env(dsn, fresh_schema, tmp_path)
    sourced = [line for line in quick_start() if line.startswith(". ")]
    for line in quick_start():
        if line.startswith("tenure migrate") or line.startswith("tenure enqueue"):
            out = subprocess.run(_shell(line, sourced), cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=120)
            assert out.returncode == 0, f"{line}: {out.stderr}"
    worker = subprocess.run(_shell("tenure worker --app doc_tasks:app --burst", sourced), cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stderr
    with connect(dsn) as conn:
        repo = Repository(conn, fresh_schema)
        job = repo.get_job(1)
        assert job is not None and job["status"] == "completed", (job, worker.stderr)
        executions = conn.execute(
            f'SELECT idempotency_key, status, result_ref FROM "{fresh_schema}".job_executions').fetchall()
    key = f"invoice:{job['payload']['invoice_id']}:email:v1"
    assert [(r["idempotency_key"], r["status"]) for r in executions] == [(key, "succeeded")], executions
    assert executions[0]["result_ref"], "effect.succeeded() stored the provider's reference"


def test_quick_start_word_for_word(dsn: str, fresh_schema: str, tmp_path: Path) -> None:
    """Two terminals: migrate, enqueue and a worker in the first; stats and `jobs show 1` in the
    second. The job completes, both commands show it, and SIGTERM stops the worker cleanly."""
    env = _user_env(dsn, fresh_schema)
    lines = quick_start()
    sourced: list[str] = []
    worker: subprocess.Popen[str] | None = None
    outputs: dict[str, str] = {}
    log = (tmp_path / "worker.log").open("w")
    try:
        for line in lines:
            if line.startswith("#"):
                continue  # "in another terminal"
            if line.startswith(". "):
                sourced.append(line)
                continue
            if shlex.split(line)[:2] == ["tenure", "worker"]:
                worker = subprocess.Popen(_shell(line, sourced), cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
                with connect(dsn) as conn:
                    wait_for(lambda: (j := Repository(conn, fresh_schema).get_job(1)) and j["status"] == "completed",
                             90, "the quick start's job to complete")
                continue
            out = subprocess.run(_shell(line, sourced), cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=120)
            assert out.returncode == 0, f"`{line}` exits {out.returncode}: {out.stderr}"
            outputs[line] = out.stdout
        assert worker is not None, "the quick start starts no worker"
        stats = next(v for k, v in outputs.items() if k.startswith("tenure stats"))
        row = next(r.split() for r in stats.splitlines()[1:] if r.split() and r.split()[0] == "default")
        header = stats.splitlines()[0].split()
        assert row[header.index("done")] == "1", stats
        show = next(v for k, v in outputs.items() if k.startswith("tenure jobs show"))
        assert re.search(r"^status\s+completed$", show, flags=re.MULTILINE), show
        assert re.search(r"^\s+\S+\s+completed\s", show, flags=re.MULTILINE), show
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=15)
        log.close()
