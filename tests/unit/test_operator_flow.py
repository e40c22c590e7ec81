"""spec.flow of a JobQueue (issue 38 item 7): parsing and validation (the same verdicts as the
CRD's schema and CEL rules, for every field of spec.flow), the plan that brings the database in
line, and the engine's level-based application, condition and status. Key weights and rate
limits in detail: test_operator_flow_rates.py."""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import pytest

from support.operator_fakes import NS, T0, FakeKube, add_secret, adopter, body, cluster_dns, cond, fetcher
from tenure.operator import crd
from tenure.operator import engine as en
from tenure.operator import figures as fg
from tenure.operator import flowspec as fs
from tenure.operator import manifests as mf
from tenure.operator import spec as s


@pytest.fixture(autouse=True)
def _cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_dns(monkeypatch)


def _spec(flow: Any = None) -> dict[str, Any]:
    spec = copy.deepcopy(body()["spec"])
    if flow is not None:
        spec["flow"] = flow
    return spec


# --------------------------------------------------------------------------- parse/validate


def test_absent_flow_is_none_and_empty_flow_owns_nothing_but_is_declared() -> None:
    assert s.parse_spec(_spec()).flow is None
    assert s.parse_spec({**_spec(), "flow": None}).flow is None
    assert s.parse_spec(_spec({})).flow == s.FlowSpec(0, ())


def test_good_flow_parses_and_running_zero_means_no_own_limit() -> None:
    flow = s.parse_spec(_spec({"perKeyRunning": 3, "keys": [
        {"key": "tenant:a", "running": 1}, {"key": "tenant:b", "running": 0},
        {"key": "é" * 100, "running": 1_000_000}]})).flow
    assert flow is not None and flow.per_key_running == 3
    assert flow.keys[0] == s.FlowKeySpec("tenant:a", 1)
    assert flow.key_limits() == {"tenant:a": 1, "é" * 100: 1_000_000}


@pytest.mark.parametrize(("flow", "message"), [
    ({"perKeyRunning": -1}, r"spec\.flow\.perKeyRunning must be a whole number from 0"),
    ({"perKeyRunning": 1_000_001}, r"spec\.flow\.perKeyRunning must be a whole number"),
    ({"perKeyRunning": "3"}, r"spec\.flow\.perKeyRunning must be an integer"),
    ({"perKeyRunning": True}, r"spec\.flow\.perKeyRunning must be an integer"),
    ("all", r"spec\.flow must be an object"),
    ({"keys": {"tenant:a": 1}}, r"spec\.flow\.keys must be a list"),
    ({"keys": ["tenant:a"]}, r"spec\.flow\.keys\[0\] must be an object"),
    ({"keys": [{"key": "a", "running": -1}]}, r"spec\.flow\.keys\[0\]\.running must be a whole"),
    ({"keys": [{"key": "a", "running": 2.5}]}, r"spec\.flow\.keys\[0\]\.running must be an integer"),
    ({"keys": [{"key": "a"}]}, r"spec\.flow\.keys\[0\] needs running or weight"),
    ({"keys": [{"running": 1}]}, r"spec\.flow\.keys\[0\]\.key is required"),
    ({"keys": [{"key": "", "running": 1}]}, r"spec\.flow\.keys\[0\]\.key: flow key must not be empty"),
    ({"keys": [{"key": "  ", "running": 1}]}, r"spec\.flow\.keys\[0\]\.key: flow key must not be empty"),
    ({"keys": [{"key": "a\x00b", "running": 1}]}, r"NUL"),
    ({"keys": [{"key": "é" * 101, "running": 1}]}, r"at most 200 bytes, got 202"),
    ({"keys": [{"key": 7, "running": 1}]}, r"spec\.flow\.keys\[0\]\.key must be a str"),
    ({"keys": [{"key": "a", "running": 1}, {"key": "a", "running": 2}]},
     r"spec\.flow\.keys\[1\]\.key 'a' is listed twice"),
    ({"keys": [{"key": f"k{i}", "running": 1} for i in range(s.FLOW_KEYS_MAX + 1)]},
     r"spec\.flow\.keys must have at most 1000 entries"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_bad_flow_is_refused_naming_the_field(flow: Any, message: str) -> None:
    with pytest.raises(s.SpecError, match=message):
        s.parse_spec(_spec(flow))


# --------------------------------------------------------------------------- the CRD agrees

# What each CEL rule of spec.flow means, in Python: a rule added or changed without its meaning
# here fails test_every_flow_rule_has_a_python_meaning.
CEL_MEANING: dict[str, Callable[[Any], bool]] = {
    "self.trim().size() > 0": lambda v: bool(v.strip()),
    f"bytes(self).size() <= {s.FLOW_KEY_MAX_BYTES}": lambda v: len(v.encode()) <= s.FLOW_KEY_MAX_BYTES,
    "!self.contains('\\u0000')": lambda v: "\x00" not in v,
    "has(self.running) || has(self.weight)": lambda v: "running" in v or "weight" in v,
    "self > 0.0": lambda v: v > 0,
}


def _flow_schema() -> dict[str, Any]:
    (version,) = crd.build_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["flow"]  # type: ignore[no-any-return]


def _schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    """What the API server checks for this schema: types, bounds, required fields, list-map
    uniqueness and the CEL rules (by their Python meaning). Enough for spec.flow."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict) or any(k not in value for k in schema.get("required", [])):
            return False
        props = schema.get("properties", {})
        ok = all(_schema_accepts(props[k], v) for k, v in value.items() if k in props)
    elif kind == "array":
        if not isinstance(value, list) or len(value) > schema.get("maxItems", len(value)):
            return False
        ok = all(_schema_accepts(schema["items"], v) for v in value)
        if ok and schema.get("x-kubernetes-list-type") == "map":
            ids = [tuple(v.get(k) for k in schema["x-kubernetes-list-map-keys"]) for v in value]
            ok = len(ids) == len(set(ids))
    elif kind in ("integer", "number"):
        ok = (isinstance(value, int if kind == "integer" else int | float) and not isinstance(value, bool)
              and schema["minimum"] <= value <= schema["maximum"])
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "string":
        ok = (isinstance(value, str) and schema["minLength"] <= len(value) <= schema["maxLength"]
              and re.search(schema.get("pattern", ""), value) is not None)
    else:
        raise AssertionError(f"type {kind} not modelled")
    return ok and all(CEL_MEANING[r["rule"]](value) for r in schema.get("x-kubernetes-validations", []))


def _python_accepts(flow: Any) -> bool:
    try:
        s.parse_spec(_spec(flow))
    except s.SpecError:
        return False
    return True


@pytest.mark.parametrize("flow", [
    {}, {"perKeyRunning": 0}, {"perKeyRunning": 5}, {"perKeyRunning": 1_000_000},
    {"perKeyRunning": -1}, {"perKeyRunning": 1_000_001}, {"perKeyRunning": "5"},
    {"keys": []},
    {"keys": [{"key": "tenant:a", "running": 0}]},
    {"keys": [{"key": "tenant:a", "running": 3}, {"key": "tenant:b", "running": 1}]},
    {"keys": [{"key": "x" * 200, "running": 1}]},
    {"keys": [{"key": "x" * 201, "running": 1}]},
    {"keys": [{"key": "é" * 100, "running": 1}]},
    {"keys": [{"key": "é" * 101, "running": 1}]},
    {"keys": [{"key": "", "running": 1}]},
    {"keys": [{"key": " \t", "running": 1}]},
    {"keys": [{"key": " padded ", "running": 1}]},
    {"keys": [{"key": "a\x00", "running": 1}]},
    {"keys": [{"key": "a", "running": -1}]},
    {"keys": [{"key": "a", "running": 1_000_001}]},
    {"keys": [{"key": "a"}]},
    {"keys": [{"running": 1}]},
    {"keys": [{"key": "a", "running": 1}, {"key": "a", "running": 1}]},
    {"keys": [{"key": f"k{i}", "running": 1} for i in range(s.FLOW_KEYS_MAX)]},
    {"keys": [{"key": f"k{i}", "running": 1} for i in range(s.FLOW_KEYS_MAX + 1)]},
    {"keys": [{"key": "a", "weight": 2}]}, {"keys": [{"key": "a", "weight": 0.25, "running": 3}]},
    {"keys": [{"key": "a", "weight": 1000}]}, {"keys": [{"key": "a", "weight": 1000.5}]},
    {"keys": [{"key": "a", "weight": 0}]}, {"keys": [{"key": "a", "weight": -1}]},
    {"keys": [{"key": "a", "weight": "2"}]}, {"keys": [{"key": "a", "weight": True}]},
    {"keys": [{"key": "a", "running": 0}]}, {"keys": [{"key": "a", "weight": 1}]},
    {"rateLimits": []},
    {"rateLimits": [{"name": "smtp", "perSecond": 10}]},
    {"rateLimits": [{"name": "api.v2-x_y", "perSecond": 0.5, "burst": 3, "perKey": True}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 1_000_000, "burst": 1_000_000}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 1_000_001}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 0}]},
    {"rateLimits": [{"name": "smtp", "perSecond": -2.5}]},
    {"rateLimits": [{"name": "smtp", "perSecond": "10"}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 10, "burst": 0}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 10, "burst": 1_000_001}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 10, "burst": 2.5}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 10, "perKey": "yes"}]},
    {"rateLimits": [{"name": "", "perSecond": 10}]},
    {"rateLimits": [{"name": "-smtp", "perSecond": 10}]},
    {"rateLimits": [{"name": "smtp mail", "perSecond": 10}]},
    {"rateLimits": [{"name": "é", "perSecond": 10}]},
    {"rateLimits": [{"name": "x" * 100, "perSecond": 10}]},
    {"rateLimits": [{"name": "x" * 101, "perSecond": 10}]},
    {"rateLimits": [{"name": "smtp"}]},
    {"rateLimits": [{"perSecond": 10}]},
    {"rateLimits": [{"name": "smtp", "perSecond": 10}, {"name": "smtp", "perSecond": 20}]},
    {"rateLimits": [{"name": f"r{i}", "perSecond": 1} for i in range(fs.FLOW_RATE_LIMITS_MAX)]},
    {"rateLimits": [{"name": f"r{i}", "perSecond": 1} for i in range(fs.FLOW_RATE_LIMITS_MAX + 1)]},
])
def test_python_and_the_crd_give_the_same_verdict(flow: dict[str, Any]) -> None:
    assert _python_accepts(flow) is _schema_accepts(_flow_schema(), flow), flow


def _rules(node: Any) -> list[str]:
    """Every CEL rule under ``node``, depth first."""
    if isinstance(node, dict):
        own = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
        return own + [r for k, v in node.items() if k != "x-kubernetes-validations" for r in _rules(v)]
    return [r for v in node for r in _rules(v)] if isinstance(node, list) else []


def test_every_flow_rule_has_a_python_meaning() -> None:
    assert set(_rules(_flow_schema())) == set(CEL_MEANING)


def test_flow_has_no_default_so_an_absent_flow_leaves_the_database_alone() -> None:
    schema = _flow_schema()
    assert "default" not in schema
    assert schema["properties"]["perKeyRunning"]["default"] == 0
    keys = schema["properties"]["keys"]
    assert keys["x-kubernetes-list-type"] == "map" and keys["x-kubernetes-list-map-keys"] == ["key"]
    assert keys["maxItems"] == s.FLOW_KEYS_MAX
    # A defaulted weight would make every entry pass "running or weight": none is declared.
    assert "default" not in keys["items"]["properties"]["weight"]
    rates = schema["properties"]["rateLimits"]
    assert rates["x-kubernetes-list-type"] == "map" and rates["x-kubernetes-list-map-keys"] == ["name"]
    assert "default" not in rates["items"]["properties"]["burst"]  # absent: tenure.flow.default_burst
    assert set(schema["properties"]) == {"perKeyRunning", "keys", "rateLimits"}


def test_a_flow_change_restarts_no_pod() -> None:
    assert mf.spec_hash(_spec()) == mf.spec_hash(_spec({"perKeyRunning": 4}))
    assert mf.spec_hash(_spec()) != mf.spec_hash({**_spec(), "concurrency": 9})


# --------------------------------------------------------------------------- plan and read


def test_plan_changes_only_what_differs_and_removes_unlisted_keys() -> None:
    wanted = s.FlowSpec(3, (s.FlowKeySpec("a", 1), s.FlowKeySpec("b", 5), s.FlowKeySpec("c", 0)))
    plan = fg.plan_flow(fg.FlowLimits(0, {"a": 1, "b": 4, "c": 2, "cli": 7}), wanted)
    assert plan == fg.FlowPlan(3, (("b", 5),), ("c", "cli"))
    assert plan.summary() == "perKeyRunning=3; 1 key limit(s) set; 2 key limit(s) removed"
    after = plan.after(fg.FlowLimits(0, {"a": 1, "b": 4, "c": 2, "cli": 7}))
    assert after == fg.FlowLimits(3, {"a": 1, "b": 5})
    again = fg.plan_flow(after, wanted)
    assert again.empty and again.summary() == "unchanged"
    assert fg.plan_flow(fg.FlowLimits(2, {"x": 1}), s.FlowSpec()) == fg.FlowPlan(0, (), ("x",))


class FakeFlowRepo:
    """The repository's flow face over a queue's flow_keys rows and the rate_limits table."""

    def __init__(self, per_key: int | None, rows: list[dict[str, Any]],
                 rates: list[dict[str, Any]] | None = None) -> None:
        self.per_key, self.rows, self.rates = per_key, rows, rates or []
        self.reads: list[str] = []

    def flow_queue_list(self) -> list[dict[str, Any]]:
        self.reads.append("queues")
        if self.per_key is None and not self.rows:
            return [{"queue": "other", "per_key_running": 1, "paused": False, "key_limits": 0}]
        return [{"queue": "emails", "per_key_running": self.per_key, "paused": False, "key_limits": 0}]

    def flow_key_settings(self, queue: str) -> list[dict[str, Any]]:
        assert queue == "emails"
        self.reads.append("keys")
        return self.rows

    def flow_rate_settings(self, names: list[str], owner: str) -> list[dict[str, Any]]:
        self.reads.append("rates")
        return [r for r in self.rates if r["name"] in names or r["updated_by"] == owner]


def _row(key: str, running: int | None, weight: float = 1.0) -> dict[str, Any]:
    return {"flow_key": key, "running": running, "weight": weight}


def test_read_flow_limits_reads_the_control_tables_only() -> None:
    assert fg.read_flow_limits(FakeFlowRepo(None, []), "emails") == fg.FlowLimits()  # type: ignore[arg-type]
    repo = FakeFlowRepo(4, [])
    assert fg.read_flow_limits(repo, "emails") == fg.FlowLimits(4)  # type: ignore[arg-type]
    # A key row carries a running limit, a weight or both (flow_keys_has_setting).
    repo = FakeFlowRepo(4, [_row("quiet", 9), _row("big", None, 4.0), _row("both", 2, 0.5)])
    assert fg.read_flow_limits(repo, "emails") == fg.FlowLimits(  # type: ignore[arg-type]
        4, {"quiet": 9, "both": 2}, {"big": 4.0, "both": 0.5})
    assert repo.reads == ["queues", "keys", "rates"]  # one read each, whatever the jobs


# --------------------------------------------------------------------------- the engine


class FakeFlowDb:
    """The database's flow limits, changed as apply_flow would."""

    def __init__(self, limits: fg.FlowLimits | None = None, fail: Exception | None = None) -> None:
        self.limits = limits or fg.FlowLimits()
        self.fail = fail
        self.calls: list[tuple[str, str, str, str]] = []

    def __call__(self, dsn: str, schema: str, queue: str, wanted: s.FlowSpec,
                 requested_by: str) -> fg.FlowApplied:
        self.calls.append((dsn, schema, queue, requested_by))
        if self.fail is not None:
            raise self.fail
        plan = fg.plan_flow(self.limits, wanted)
        self.limits = plan.after(self.limits)
        return fg.FlowApplied(plan, self.limits)


def _pass(kube: FakeKube, b: dict[str, Any], db: FakeFlowDb, *, scale: bool = True,
          now: dt.datetime = T0) -> en.Outcome:
    kube.exporter_index.index(b)
    return en.reconcile_jobqueue(b, kube, fetcher(fg.QueueFigures()), adopter(b), now, scale=scale,
                                 exporter_members=kube.exporter_index, flow=db)


def _next(b: dict[str, Any], out: en.Outcome, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body after kopf's merge patch of the status (None removes a field)."""
    nb = copy.deepcopy(b)
    status = {**nb["status"], **copy.deepcopy(out.status)}
    nb["status"] = {k: v for k, v in status.items() if v is not None}
    if spec is not None:
        nb["spec"] = spec
        nb["metadata"]["generation"] += 1
    return nb


def test_spec_flow_is_applied_level_based_with_condition_status_and_event() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb(fg.FlowLimits(0, {"cli": 7}))
    b = body(_spec({"perKeyRunning": 3, "keys": [{"key": "a", "running": 1}, {"key": "b", "running": 5}]}))
    out = _pass(kube, b, db)
    assert out.error_reason is None
    assert db.calls == [(fg.dsn_in_namespace("postgresql://u:p@db/q", NS), "tenure", "emails",
                         f"operator:{NS}/mail")]
    # The JobQueue owns every key limit of its queue: the CLI's "cli" is gone.
    assert db.limits == fg.FlowLimits(3, {"a": 1, "b": 5})
    assert out.status["flow"] == {"perKeyRunning": 3, "keyLimits": 2, "keyWeights": 0, "rateLimits": 0}
    flow_cond = cond(out, "FlowApplied")
    assert (flow_cond["status"], flow_cond["reason"]) == ("True", "Applied")
    assert flow_cond["observedGeneration"] == 4
    (event,) = [e for e in out.events if e.reason == "FlowLimitsApplied"]
    assert event.message == "perKeyRunning=3; 2 key limit(s) set; 1 key limit(s) removed"
    # Nothing differs on the next pass: no Event, the condition keeps its transition time.
    again = _pass(kube, _next(b, out), db, now=T0 + dt.timedelta(minutes=1))
    assert "FlowLimitsApplied" not in [e.reason for e in again.events]
    assert cond(again, "FlowApplied")["lastTransitionTime"] == flow_cond["lastTransitionTime"]


def test_change_passes_and_specs_without_flow_leave_the_database_alone() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb(fg.FlowLimits(2, {"cli": 7}))
    out = _pass(kube, body(), db)
    assert db.calls == [] and "flow" not in out.status
    assert [c for c in out.status["conditions"] if c["type"] == "FlowApplied"] == []
    change = _pass(kube, body(_spec({"perKeyRunning": 1})), db, scale=False)
    assert db.calls == [] and "flow" not in change.status


def test_removing_spec_flow_retires_the_condition_and_status_but_keeps_the_limits() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb()
    b = body(_spec({"keys": [{"key": "a", "running": 2}]}))
    out = _pass(kube, b, db)
    assert out.status["flow"] == {"perKeyRunning": 0, "keyLimits": 1, "keyWeights": 0, "rateLimits": 0}
    nb = _next(b, out, _spec())
    gone = _pass(kube, nb, db, now=T0 + dt.timedelta(minutes=1))
    assert len(db.calls) == 1 and db.limits == fg.FlowLimits(0, {"a": 2})
    assert "flow" in gone.status and gone.status["flow"] is None
    flow_cond = cond(gone, "FlowApplied")
    assert (flow_cond["status"], flow_cond["reason"]) == ("False", "NotManaged")
    later = _pass(kube, _next(nb, gone), db, now=T0 + dt.timedelta(minutes=2))
    assert "flow" not in later.status and cond(later, "FlowApplied")["reason"] == "NotManaged"


def test_a_flow_that_cannot_be_applied_degrades_the_queue_and_keeps_scaling() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb(fail=fg.StatsUnavailable("FlowSchemaMissing", "no flow_keys table"))
    out = _pass(kube, body(_spec({"perKeyRunning": 2})), db)
    assert out.error_reason == "FlowSchemaMissing" and not out.permanent
    assert "spec.flow not applied: no flow_keys table" in out.error_message
    flow_cond = cond(out, "FlowApplied")
    assert (flow_cond["status"], flow_cond["reason"]) == ("False", "FlowSchemaMissing")
    assert cond(out, "Degraded")["reason"] == "FlowSchemaMissing"
    assert "flow" not in out.status  # the last good status.flow is kept
    assert out.status["desiredReplicas"] == 1  # the figures were read and used
    assert ("Deployment", NS, "mail-worker") in kube.store


def test_an_invalid_flow_applies_nothing() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb()
    out = _pass(kube, body(_spec({"keys": [{"key": "a", "running": 1}, {"key": "a", "running": 1}]})), db)
    assert out.error_reason == "InvalidSpec" and out.permanent
    assert db.calls == [] and kube.store.keys() == {("Secret", NS, "db")}
