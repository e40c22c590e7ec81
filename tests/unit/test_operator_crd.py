"""The JobQueue CRD: generated == committed (package and chart), and its schema is sound."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import yaml

from tenure.operator import crd
from tenure.operator import spec as s
from tenure.operator.spec import parse_spec

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_CRD = ROOT / "src" / "tenure" / "operator" / "crd.yaml"
CHART_CRD = ROOT / crd.CHART_CRD_RELATIVE
FIX = "run `python -m tenure.operator.crd --write` and commit the result"


def test_package_crd_matches_generator() -> None:
    assert PACKAGE_CRD.read_text() == crd.render_package_crd(), FIX


def test_chart_crd_matches_generator() -> None:
    assert CHART_CRD.read_text() == crd.render_chart_crd(), FIX


def test_installed_package_ships_the_same_crd() -> None:
    assert crd.packaged_crd_text() == crd.render_package_crd(), FIX


def _chart_crd_body() -> dict[str, Any]:
    lines = CHART_CRD.read_text().splitlines()
    assert lines[1] == "{{- if .Values.crds.create }}"
    assert lines[-1] == "{{- end }}"
    body = "\n".join(lines[2:-1])
    assert "{{" not in body, "a template delimiter inside the CRD would be evaluated by Helm"
    return yaml.safe_load(body)  # type: ignore[no-any-return]


def test_the_three_crds_agree() -> None:
    generated = crd.build_crd()
    packaged = yaml.safe_load(PACKAGE_CRD.read_text())
    chart = _chart_crd_body()
    assert chart["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    assert packaged == generated
    assert chart == generated


def _version() -> dict[str, Any]:
    (version,) = crd.build_crd()["spec"]["versions"]
    return version  # type: ignore[no-any-return]


def test_names_status_subresource_and_printer_columns() -> None:
    obj = crd.build_crd()
    assert obj["metadata"]["name"] == "jobqueues.tenure.dev"
    names = obj["spec"]["names"]
    assert (names["kind"], names["shortNames"]) == ("JobQueue", ["jq"])
    v = _version()
    assert v["name"] == "v1alpha1" and v["storage"] and v["served"]
    assert v["subresources"] == {"status": {}}
    paths = {c["jsonPath"] for c in v["additionalPrinterColumns"]}
    assert {
        ".status.ready",
        ".status.running",
        ".status.runningExpired",
        ".status.replicas",
        ".metadata.creationTimestamp",
    } <= paths
    status_props = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for column in v["additionalPrinterColumns"]:
        head, _, field = column["jsonPath"].lstrip(".").partition(".")
        if head == "status":
            assert field in status_props, column


def _rules(schema: dict[str, Any], name: str = "") -> list[tuple[str, str, str]]:
    """(rule, message, name of the node the rule sits on) of every CEL rule."""
    out: list[tuple[str, str, str]] = []
    for rule in schema.get("x-kubernetes-validations", []):
        out.append((rule["rule"], rule["message"], name))
    for key, sub in schema.get("properties", {}).items():
        out.extend(_rules(sub, key))
    if "items" in schema:
        out.extend(_rules(schema["items"], name))
    return out


def test_cel_rules_cover_the_cross_field_constraints() -> None:
    root = _version()["schema"]["openAPIV3Schema"]
    found = _rules(root)
    rules = {rule: message for rule, message, _ in found}
    assert "self.heartbeatSeconds * 3 <= self.leaseSeconds" in rules
    assert "self.minReplicas <= self.maxReplicas" in rules
    assert any(r.startswith("self.matches(") for r in rules)
    for rule, message, node in found:
        # A readable message names the field(s) the rule reads (a rule on a string: that field).
        fields = re.findall(r"self\.(\w+)", rule)
        named = [f for f in fields if f in message and f != "metadata"]
        scalar = not fields or all(f in ("trim", "size", "contains", "matches") for f in fields)
        assert named or (scalar and f"{node} " in message) or "schedule" in message or (
            "name" in message), (rule, message)


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server's structural defaulting does (enough for this schema)."""
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = sub["default"]
            if key in value:
                value[key] = _apply_defaults(sub, value[key])
    return value


def test_crd_defaults_are_the_operator_defaults() -> None:
    minimal = {"queue": "q", "image": "i", "app": "m:a", "database": {"secretRef": {"name": "x"}}}
    spec_schema = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    defaulted = _apply_defaults(spec_schema, yaml.safe_load(yaml.safe_dump(minimal)))
    assert defaulted["scaling"]["maxReplicas"] == s.MAX_REPLICAS_DEFAULT
    assert defaulted["reaper"]["schedule"] == s.REAPER_SCHEDULE_DEFAULT
    assert defaulted["database"]["secretRef"]["key"] == s.DATABASE_SECRET_KEY_DEFAULT
    assert parse_spec(defaulted) == parse_spec(minimal)
    # The defaults satisfy the CEL rules.
    assert defaulted["heartbeatSeconds"] * 3 <= defaulted["leaseSeconds"]
    assert defaulted["scaling"]["minReplicas"] <= defaulted["scaling"]["maxReplicas"]


@pytest.mark.parametrize(
    ("schedule", "ok"),
    [
        ("* * * * *", True),
        ("*/5 * * * *", True),
        ("0 3 * * MON-FRI", True),
        ("15,45 0-6 1 JAN ?", True),
        ("@hourly", True),
        ("@daily", True),
        ("* * * *", False),
        ("* * * * * *", False),
        ("@every 5m", False),
        ("@often", False),
        ("*  * * * *", False),
        ("rm -rf / ; * *", False),
    ],
)
def test_cron_shape_rule(schedule: str, ok: bool) -> None:
    # RE2 (CEL) and Python agree on this regex: classes, alternation and anchors only.
    assert bool(re.match(crd.CRON_SHAPE_REGEX, schedule)) is ok


def test_default_schedule_passes_the_cron_rule() -> None:
    assert re.match(crd.CRON_SHAPE_REGEX, s.REAPER_SCHEDULE_DEFAULT)


def test_schema_is_structural() -> None:
    """Every node has a type (or int-or-string / preserve-unknown), as the API server requires."""

    def walk(node: dict[str, Any], path: str) -> None:
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), path
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(_version()["schema"]["openAPIV3Schema"], "")


def test_name_length_rule_fits_the_longest_child_name() -> None:
    from tenure.operator import manifests as rc

    longest = "a" * s.NAME_MAX_LENGTH
    assert len(rc.reaper_name(longest)) <= 52  # CronJob name limit
    for fn in (rc.worker_name, rc.service_name, rc.pdb_name, rc.service_monitor_name):
        assert len(fn(longest)) <= 63


def test_object_defaults_carry_every_field_their_rules_read() -> None:
    """The API server evaluates a node's CEL rules on its ``default`` as written (nested
    defaults not applied): ``default: {}`` under ``self.minReplicas <= ...`` voids the CRD."""

    def walk(node: dict[str, Any], path: str) -> int:
        checked = 0
        if isinstance(node.get("default"), dict) and node.get("x-kubernetes-validations"):
            for rule in node["x-kubernetes-validations"]:
                for field in re.findall(r"self\.(\w+)", rule["rule"]):
                    assert field in node["default"], (path, rule["rule"])
                    checked += 1
        for key, sub in node.get("properties", {}).items():
            checked += walk(sub, f"{path}.{key}")
        return checked

    assert walk(_version()["schema"]["openAPIV3Schema"], "") >= 4
