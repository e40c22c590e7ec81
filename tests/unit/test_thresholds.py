"""Alert thresholds: each knob declared once (default, type, rule) and read by the rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tenure.core.errors import ConfigError
from tenure.observability.alerts import RULE_GROUPS, build_rules, render_rules
from tenure.observability.thresholds import RULE_KEY, AlertThresholds

FIELDS = dataclasses.fields(AlertThresholds)


def _changed(value: Any) -> Any:
    """A different value that keeps every knob and relation valid."""
    if isinstance(value, str):
        return value + "x" if value.startswith("http") else "x" + value
    if isinstance(value, int):
        return value * 2 + 1
    return value * 1.5


def test_every_knob_carries_its_validation_rule() -> None:
    assert FIELDS, "AlertThresholds has no fields"
    for f in FIELDS:
        assert callable(f.metadata.get(RULE_KEY)), f"{f.name} is not declared with knob()"
        assert f.default is not dataclasses.MISSING, f.name


@pytest.mark.parametrize("name", [f.name for f in FIELDS])
def test_every_knob_reaches_the_rule_file(name: str) -> None:
    default = AlertThresholds()
    changed = dataclasses.replace(default, **{name: _changed(getattr(default, name))})
    changed.validate()
    assert render_rules(changed) != render_rules(default), f"{name} does not change the rules"


@pytest.mark.parametrize("changes, message", [
    ({"dedup_spike_factor": 1}, "dedup_spike_factor must be > 1"),
    ({"dependency_timeout_growth_factor": 0.5}, "dependency_timeout_growth_factor must be > 1"),
    ({"retry_share_of_claims": 0}, r"retry_share_of_claims must be in \(0, 1\]"),
    ({"reaper_stalled_seconds": 0}, "reaper_stalled_seconds must be > 0"),
    ({"reconnect_burst_count": -1}, "reconnect_burst_count must be >= 0"),
    ({"exporter_job_regex": ""}, "exporter_job_regex must not be empty"),
    ({"dependency_timeout_baseline_window_seconds": 600},
     "dependency_timeout_baseline_window_seconds must be > dependency_timeout_window_seconds"),
])
def test_rules_and_relations_reject_bad_knobs(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AlertThresholds(**changes).validate()


def test_each_group_module_builds_only_its_own_group() -> None:
    t = AlertThresholds()
    names = [rule.name for rule in build_rules(t)]
    assert len(names) == len(set(names))
    for group, build in RULE_GROUPS:
        rules = build(t)
        assert rules and {rule.group for rule in rules} == {group}
