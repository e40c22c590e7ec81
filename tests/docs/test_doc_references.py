"""What the docs point at must exist: every repository path and link, the README's layout, every
requirement number cited (R1–R21, listed in docs/requirements.md), and every metric name
(documented in docs/metrics.md). Pure file reads, no database.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from docsupport import DOC_FILES, ROOT, code_blocks, inline_code, prose

TOP_DIRS = ("src", "docs", "tests", "charts", "e2e", "bench", "scripts", "examples", "dashboards")
ANCHORED = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP_DIRS)})/[\w.*<>/-]*[\w*>/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SLASHED = re.compile(r"^\.?\w[\w-]*(?:/[\w.*<>-]+)+/?$")


def _git_ignored(path: str) -> bool:
    """Outputs that commands write (bench/results/...) are git-ignored and not in a clean clone."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0


def _exists(candidate: str, doc: Path) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", candidate).rstrip("/")
    if _git_ignored(re.sub(r"[*<>]", "x", candidate)):
        return True
    for base in (ROOT, doc.parent, ROOT / "src", ROOT / "src" / "tenure"):
        if any(ch in pattern for ch in "*?["):
            if list(base.glob(pattern)):
                return True
        elif (base / pattern).exists():
            return True
    return False


def mentioned_paths() -> list[tuple[str, str, Path]]:
    """(where, path, doc) for repository paths in prose, inline code, code blocks and links."""
    found: list[tuple[str, str, Path]] = []
    for doc in DOC_FILES:
        rel = doc.relative_to(ROOT)
        lines = [*prose(doc), *((b.line + i, t) for b in code_blocks(doc) for i, t in enumerate(b.text.splitlines(), 1))]
        for n, text in lines:
            for m in ANCHORED.finditer(text):
                found.append((f"{rel}:{n}", m.group(1), doc))
            for m in LINK.finditer(text):
                target = m.group(1).split("#")[0]
                if target and "://" not in target and not target.startswith("mailto:"):
                    found.append((f"{rel}:{n}", target, doc))
        for n, span in inline_code(doc):
            for token in span.split():
                token = token.strip("()[],;:'\"")
                if SLASHED.match(token) and not token.startswith((".venv", "~")) and "..." not in token:
                    found.append((f"{rel}:{n}", token, doc))
    return found


PATHS = mentioned_paths()


def test_the_docs_mention_paths_at_all() -> None:
    assert len(PATHS) > 50 and any(p == "docs/metrics.md" or p.endswith("metrics.md") for _, p, _ in PATHS)


def test_every_path_the_docs_mention_exists() -> None:
    missing = sorted({f"{where}: {path}" for where, path, doc in PATHS if not _exists(path, doc)})
    assert missing == [], "paths in the docs that do not exist:\n" + "\n".join(missing)


def _layout_paths(block: str) -> list[str]:
    """Paths the README's layout tree names: `core/ sql/ (schema.sql, migrations/)` -> core/sql/schema.sql.

    Words in parentheses after a file or a plain word are a description, not paths."""
    paths: list[str] = []
    package = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            if line.rstrip().endswith("/") and len(line.split()) == 1:
                package = line.strip()  # `src/tenure/`: the indented lines below are inside it
            else:  # root level: `charts/tenure  Helm chart   dashboards/  generated ...`
                paths += [t for t in line.split() if "/" in t]
            continue
        first = re.match(r"^ {2}([\w-]+/)\s", line)
        if first:
            top = package + first.group(1)
            paths.append(top)
            line = line[first.end():]
        stack: list[str | None] = [top]
        for m in re.finditer(r"([\w.-]+/?)(\s*\()?|(\))", line):
            if m.group(3):
                if len(stack) > 1:
                    stack.pop()
                continue
            token, here = m.group(1), stack[-1]
            is_path = token.endswith("/") or re.search(r"\.(py|sql|yaml|json|md|sh|pml)$", token)
            if here is not None and is_path:
                paths.append(here + token)
            if m.group(2):
                stack.append(here + token if here is not None and token.endswith("/") else None)
    return paths


def test_readme_layout_names_real_paths() -> None:
    readme = ROOT / "README.md"
    block = next(b for b in code_blocks(readme) if b.text.startswith("src/tenure/"))
    paths = _layout_paths(block.text)
    assert "src/tenure/core/sql/queries/" in paths and "src/tenure/worker/runtime.py" in paths, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == [], f"{block.where}: the layout names paths that do not exist: {missing}"


REQUIREMENTS = ROOT / "docs" / "requirements.md"


def test_every_cited_requirement_is_listed() -> None:
    listed = {int(n) for n in re.findall(r"^- R(\d+) \*\*", REQUIREMENTS.read_text(encoding="utf-8"), re.MULTILINE)}
    assert listed == set(range(1, 22))
    cited: dict[int, str] = {}
    for doc in DOC_FILES:
        if doc == REQUIREMENTS:
            continue
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for a, b in re.findall(r"\bR(\d+)(?:\s*[–-]\s*R(\d+))?\b", line):
                for r in range(int(a), int(b or a) + 1):
                    cited.setdefault(r, f"{doc.relative_to(ROOT)}:{n}")
    assert cited, "no requirement cited at all"
    assert {r: w for r, w in cited.items() if r not in listed} == {}


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_a_reader_cannot_open(doc: Path) -> None:
    """Sources outside the repository (the seeds, the project's SPEC file) are not cited."""
    text = doc.read_text(encoding="utf-8")
    assert not re.search(r"\bseed \d{3}\b|\bSPEC\b|SPEC\.md", text), doc


HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def test_every_metric_name_in_the_docs_is_documented() -> None:
    documented = set(re.findall(r"^\| `(tenure_[a-z0-9_]+)` \|", (ROOT / "docs/metrics.md").read_text(encoding="utf-8"),
                                flags=re.MULTILINE))
    assert "tenure_jobs_released_total" in documented
    # The pytest plugin's fixtures (README "Testing your tasks") share the prefix; they must exist.
    import tenure.testing

    fixtures = {"tenure_dsn", "tenure_schema"}
    assert all(callable(getattr(tenure.testing, f, None)) for f in fixtures)
    unknown: set[str] = set()
    for doc in DOC_FILES:
        for name in re.findall(r"(?<![\w.])(tenure_[a-z0-9_]+)", doc.read_text(encoding="utf-8")):
            base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
            if name not in documented | fixtures and base not in documented and not name.endswith("_"):
                unknown.add(f"{doc.relative_to(ROOT)}: {name}")
    assert unknown == set()


def _emitted_operations() -> set[str]:
    """String literals the package passes as a stale write's ``operation`` (metric label and
    job_events), found in the source: the metric's ``labels(..., op)``, the ``_count_stale`` /
    ``_on_stale`` callbacks, ``record_stale_write`` and ``_cas``, and the runtime's kind mapping."""
    positions = {"_count_stale": -1, "_on_stale": -1, "record_stale_write": 3, "_cas": 1}
    found: set[str] = set()
    for path in (ROOT / "src" / "tenure").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name, args = node.func.attr, node.args
                target: ast.expr | None = None
                if name == "labels" and isinstance(node.func.value, ast.Attribute) \
                        and node.func.value.attr == "stale_writes" and args:
                    target = args[-1]
                elif name in positions and len(args) > abs(positions[name]) - (positions[name] < 0):
                    target = args[positions[name]]
                if isinstance(target, ast.Constant) and isinstance(target.value, str):
                    found.add(target.value)
                elif target is not None:
                    # Only a pass-through parameter or the mapping below may be dynamic.
                    passthrough = isinstance(target, ast.Name) and target.id == "operation"
                    mapped = isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id == "_STALE_OPERATION"
                    assert passthrough or mapped, f"{path}:{node.lineno}: operation {ast.unparse(target)}"
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_STALE_OPERATION"
                                                    for t in node.targets) and isinstance(node.value, ast.Dict):
                found |= {v.value for v in node.value.values if isinstance(v, ast.Constant)}
    return found


def test_stale_write_operation_values_are_what_the_code_emits() -> None:
    from tenure.worker.metrics import STALE_WRITE_OPERATIONS

    text = (ROOT / "docs/metrics.md").read_text(encoding="utf-8")
    m = re.search(r"`operation` = ([\w, ]+)", text)
    assert m, "docs/metrics.md no longer lists the operation values"
    documented = {v.strip() for v in m.group(1).split(",")}
    emitted = _emitted_operations()
    assert {"complete", "heartbeat", "effect_succeed"} <= emitted, emitted  # the scan works
    assert documented == set(STALE_WRITE_OPERATIONS) == emitted, (documented, STALE_WRITE_OPERATIONS, emitted)


def test_readme_handler_context_is_what_handlers_get() -> None:
    """README "Writing tasks": every attribute it lists exists on JobContext, and `lease_lost` has
    the type it names."""
    from tenure.worker.context import JobContext

    text = (ROOT / "README.md").read_text(encoding="utf-8").replace("\n", " ")
    m = re.search(r"The context provides (.*?)\. Raise", text)
    assert m, "README no longer lists the handler context"
    names = {n.split("(")[0] for n in re.findall(r"`([a-z_]+(?:\([^`]*\))?)`", m.group(1))}
    assert {"lease_lost", "check_lease", "fencing_token", "effect"} <= names, names
    kind = re.search(r"`lease_lost` \(an? `(\w+)`", m.group(1))
    assert kind, "README no longer says what lease_lost is"
    signal = JobContext.__dataclass_fields__["lease_lost"].default_factory()  # type: ignore[misc]
    assert type(signal).__name__ == kind.group(1)
    # The names given for lease_lost's own methods (`is_set()`, `wait()`) belong to its type.
    unknown = [n for n in names if not hasattr(JobContext, n) and n not in JobContext.__dataclass_fields__
               and not hasattr(signal, n)]
    assert unknown == []


def test_readme_invalid_cron_schedule_is_refused() -> None:
    """README (Kubernetes): the API server checks the schedule's shape and the operator its
    field values, with `Degraded`/`InvalidSchedule`. A schedule of the right shape but out of
    range (`99 99 99 99 99`) must be refused by the API server's rule or by the operator's spec
    validation, as the README says."""
    import yaml

    from tenure.operator import crd
    from tenure.operator.spec import SpecError, parse_spec

    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("\n", " ")
    assert "cron schedule of the right shape" in readme and "`InvalidSchedule`" in readme
    example = next(d for d in yaml.safe_load_all((ROOT / "examples/jobqueue.yaml").read_text(encoding="utf-8"))
                   if d and d.get("kind") == "JobQueue")
    spec = {**example["spec"], "reaper": {**example["spec"].get("reaper", {}), "schedule": "99 99 99 99 99"}}
    by_api_server = not re.match(crd.CRON_SHAPE_REGEX, "99 99 99 99 99")
    try:
        parse_spec(spec).validate()
        by_operator = False
    except SpecError:
        by_operator = True
    assert by_api_server or by_operator, "a JobQueue with reaper.schedule '99 99 99 99 99' is accepted"
