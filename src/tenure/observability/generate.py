"""Write (or check) every generated observability file.

Usage: ``python -m tenure.observability.generate [--root DIR] [--check]``.

Writes ``dashboards/{overview,lease-health,retries-dedup}.json``, ``dashboards/alerts.yaml``
and the Helm chart copies ``charts/tenure/files/alerts.yaml`` and
``charts/tenure/files/dashboards/*.json`` under ``--root`` (default: the current directory,
which must be the repository root). With ``--check`` nothing is written: it exits 1 and lists
every file that is missing, differs, or is a stale generated file no longer produced.

Limits: always renders the default :class:`AlertThresholds`; a deployment with other
thresholds generates its own rules with :func:`generated_files`.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

from tenure.observability.alerts import AlertThresholds, render_rules
from tenure.observability.dashboards import build_dashboards, render_dashboard

DASHBOARD_DIRS = ("dashboards", "charts/tenure/files/dashboards")
RULE_FILES = ("dashboards/alerts.yaml", "charts/tenure/files/alerts.yaml")


def generated_files(thresholds: AlertThresholds | None = None) -> dict[str, str]:
    """Relative path -> file content for every generated file."""
    t = thresholds or AlertThresholds()
    files: dict[str, str] = {}
    for stem, dashboard in build_dashboards(t).items():
        text = render_dashboard(dashboard)
        for directory in DASHBOARD_DIRS:
            files[f"{directory}/{stem}.json"] = text
    rules = render_rules(t)
    for path in RULE_FILES:
        files[path] = rules
    return dict(sorted(files.items()))


def stale_files(root: Path, expected: dict[str, str]) -> list[str]:
    """Generated-looking files (``*.json`` in the dashboard directories) nobody produces."""
    stale: list[str] = []
    for directory in DASHBOARD_DIRS:
        base = root / directory
        if not base.is_dir():
            continue
        for path in sorted(base.glob("*.json")):
            rel = path.relative_to(root).as_posix()
            if rel not in expected:
                stale.append(rel)
    return stale


def check(root: Path, expected: dict[str, str]) -> list[str]:
    """Human-readable problems (empty when every file is up to date)."""
    problems: list[str] = []
    for rel, content in expected.items():
        path = root / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
            continue
        actual = path.read_text(encoding="utf-8")
        if actual != content:
            diff = difflib.unified_diff(
                actual.splitlines(keepends=True), content.splitlines(keepends=True),
                fromfile=f"{rel} (committed)", tofile=f"{rel} (generated)", n=1,
            )
            problems.append(f"differs: {rel}\n" + "".join(list(diff)[:40]))
    problems.extend(f"stale (not generated any more): {rel}" for rel in stale_files(root, expected))
    return problems


def write(root: Path, expected: dict[str, str]) -> list[str]:
    """Write files whose content changed; return their relative paths."""
    written: list[str] = []
    for rel, content in expected.items():
        path = root / rel
        if path.is_file() and path.read_text(encoding="utf-8") == content:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(rel)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.observability.generate",
        description="Generate tenure's Grafana dashboards and Prometheus alert rules.",
    )
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root to write into (default: current directory)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any generated file is missing or differs")
    args = parser.parse_args(argv)
    root: Path = args.root
    expected = generated_files()
    if args.check:
        problems = check(root, expected)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m tenure.observability.generate", file=sys.stderr)
            return 1
        print(f"{len(expected)} generated files up to date")
        return 0
    written = write(root, expected)
    for rel in written:
        print(f"wrote {rel}")
    print(f"{len(expected)} generated files, {len(written)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
