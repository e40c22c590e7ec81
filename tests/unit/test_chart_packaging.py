"""Shipping around the chart: shell scripts are shellcheck-clean, the Dockerfile keeps its promises."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "e2e" / "kind" / "run.sh", ROOT / "scripts" / "tools" / "helm.sh",
           ROOT / "scripts" / "tools" / "docker.sh", ROOT / "scripts" / "tools" / "kind.sh",
           *sorted((ROOT / "scripts" / "tools" / "kind").glob("*.sh"))]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_scripts_are_shellcheck_clean(script: pathlib.Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        message = "shellcheck not installed: run scripts/tools/helm.sh (apt-get install shellcheck)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run(
        [shellcheck, "--severity=style", "--external-sources", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=script.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.access(script, os.X_OK), f"{script} is not executable"


def _stages(text: str) -> list[str]:
    return re.split(r"^FROM\s", text, flags=re.MULTILINE)[1:]


def test_dockerfile_is_multi_stage_non_root_with_tenure_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = _stages(text)
    assert len(stages) >= 2, "multi-stage build expected"
    final = stages[-1]
    assert re.search(r"^USER\s+10001(:10001)?\s*$", final, re.MULTILINE), "numeric non-root USER"
    assert 'ENTRYPOINT ["tenure"]' in final
    # The final stage installs nothing: it only copies the built virtualenv.
    for tool in ("apt-get install", "gcc", "build-essential", "pip install"):
        assert tool not in final, tool
    assert "COPY --from=build /opt/tenure /opt/tenure" in final
    # The chart's securityContext runs as 10001 with a read-only root: the image agrees.
    values = (ROOT / "charts" / "tenure" / "values.yaml").read_text()
    assert "runAsUser: 10001" in values
    assert "TENURE_HOME=/tmp/tenure" in final


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "tests", "e2e", "bench"} <= ignored
    # ...but never what the build needs.
    assert not {"src", "pyproject.toml", "README.md"} & ignored


def test_kind_script_exercises_the_whole_path() -> None:
    # run.sh prepares the cluster; the scenarios live in e2e/kind/test_kind.py, which it runs.
    text = (ROOT / "e2e" / "kind" / "run.sh").read_text() + (ROOT / "e2e" / "kind" / "test_kind.py").read_text()
    assert "e2e/kind/test_kind.py" in (ROOT / "e2e" / "kind" / "run.sh").read_text()
    for step in (
        "kind create cluster",
        "docker build",
        "kind load docker-image",
        "postgres",
        "helm upgrade --install",
        "helm test",
        "examples/jobqueue.yaml",
        "enqueue",
        "completed",
    ):
        assert step in text, step
