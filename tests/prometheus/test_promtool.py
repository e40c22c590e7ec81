"""promtool checks of the generated alert rules and dashboard queries.

Needs `promtool` from Debian's `prometheus` package (scripts/tools/prometheus.sh installs it).
Missing promtool fails the test when CI=true and skips it otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenure.observability.alerts import (
    ALERT_NAMES,
    AlertThresholds,
    build_rule_groups,
    prom_duration,
    render_rules,
)
from tenure.observability.dashboards import build_dashboards, render_dashboard

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = ROOT / "tests" / "prometheus"
RULES = ROOT / "dashboards" / "alerts.yaml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not installed (run scripts/tools/prometheus.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _test_files() -> list[Path]:
    files = sorted(TESTS_DIR.glob("*.yaml"))
    assert files, "no promtool test files"
    return files


def test_check_rules(promtool: str) -> None:
    result = _run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout


def test_rule_unit_tests(promtool: str) -> None:
    result = _run(promtool, "test", "rules", *(str(p) for p in _test_files()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout + result.stderr


def test_fast_variant_is_valid(promtool: str, tmp_path: Path) -> None:
    fast = AlertThresholds().with_for_seconds(5, evaluation_interval_seconds=1)
    path = tmp_path / "fast.yaml"
    path.write_text(render_rules(fast), encoding="utf-8")
    result = _run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    """Every panel query, with Grafana variables substituted, is valid PromQL."""
    rules: list[dict[str, str]] = []
    for stem, dashboard in build_dashboards().items():
        for panel in json.loads(render_dashboard(dashboard))["panels"]:
            for target in panel["targets"]:
                expr = (
                    target["expr"]
                    .replace("$__rate_interval", "1m")
                    .replace("$__interval", "1m")
                    .replace("$queue", ".*")
                )
                record = f"tenure:panel_check_{stem.replace('-', '_')}_{panel['id']}_{target['refId']}"
                rules.append({"record": record, "expr": expr})
    assert len(rules) >= 20
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = _run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def _mutated_rules(alert: str, delta_seconds: int) -> str:
    data: dict[str, Any] = build_rule_groups(AlertThresholds())
    for group in data["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                seconds = sum(
                    int(part[:-1]) * {"h": 3600, "m": 60, "s": 1}[part[-1]]
                    for part in _split_duration(rule["for"])
                )
                rule["for"] = prom_duration(seconds + delta_seconds)
    return yaml.safe_dump(data, sort_keys=False)


def _split_duration(text: str) -> list[str]:
    parts, current = [], ""
    for char in text:
        current += char
        if char.isalpha():
            parts.append(current)
            current = ""
    return parts


@pytest.mark.parametrize("delta_seconds", [-60, 60], ids=["for-1m", "for+1m"])
@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_suite_notices_a_for_off_by_one_minute(
    promtool: str, tmp_path: Path, alert: str, delta_seconds: int
) -> None:
    """The cases at T-1m and T pin each alert's `for`: shifting it by a minute must fail."""
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "alerts.yaml").write_text(_mutated_rules(alert, delta_seconds))
    tests = tmp_path / "tests" / "prometheus"
    tests.mkdir(parents=True)
    relevant = [p for p in _test_files() if f"alertname: {alert}\n" in p.read_text()]
    assert relevant, f"no promtool test mentions {alert}"
    for path in relevant:
        shutil.copy(path, tests / path.name)
    result = _run(promtool, "test", "rules", *(str(tests / p.name) for p in relevant))
    assert result.returncode != 0, f"{alert}: tests still pass with for shifted {delta_seconds}s"
    assert f"alertname: {alert}," in result.stdout + result.stderr
