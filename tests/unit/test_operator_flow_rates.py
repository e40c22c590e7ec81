"""spec.flow's key weights and rate limits (issue 38 item 7, second part): parsing and
validation naming the field, the plan (only what differs; unlisted key weights removed, an
unlisted rate limit deleted only when this JobQueue set it last), and the engine's status,
condition and Event. The CRD's verdicts on the same fields: test_operator_flow.py."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from support.operator_fakes import NS, T0, FakeKube, add_secret, adopter, body, cluster_dns, cond, fetcher
from tenure.operator import engine as en
from tenure.operator import figures as fg
from tenure.operator import flowspec as fs
from tenure.operator import spec as s

OWNER = f"operator:{NS}/mail"


@pytest.fixture(autouse=True)
def _cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_dns(monkeypatch)


def _spec(flow: Any) -> dict[str, Any]:
    return {**copy.deepcopy(body()["spec"]), "flow": flow}


def _flow(flow: Any) -> s.FlowSpec:
    parsed = s.parse_spec(_spec(flow)).flow
    assert parsed is not None
    return parsed


# --------------------------------------------------------------------------- parse/validate


def test_weights_and_rate_limits_parse_with_their_defaults() -> None:
    flow = _flow({"keys": [{"key": "big", "weight": 4}, {"key": "small", "weight": 0.25, "running": 2},
                           {"key": "capped", "running": 3}],
                  "rateLimits": [{"name": "smtp", "perSecond": 2.5},
                                 {"name": "api", "perSecond": 100, "burst": 10, "perKey": True}]})
    assert flow.keys == (s.FlowKeySpec("big", 0, 4.0), s.FlowKeySpec("small", 2, 0.25),
                         s.FlowKeySpec("capped", 3))
    assert isinstance(flow.keys[0].weight, float)
    assert flow.key_limits() == {"small": 2, "capped": 3}
    assert flow.key_weights() == {"big": 4.0, "small": 0.25}
    assert flow.rate_limits[0] == s.RateLimitSpec("smtp", 2.5)
    # Without burst the database gets tenure.flow.default_burst: a second's worth, at least 1.
    assert flow.rate_settings() == {"smtp": fs.RateSetting(2.5, 3, False), "api": fs.RateSetting(100.0, 10, True)}
    assert s.RateLimitSpec("slow", 0.1).setting() == fs.RateSetting(0.1, 1, False)
    # weight 1 and running 0 are the defaults: an entry with only those sets nothing.
    assert _flow({"keys": [{"key": "a", "weight": 1}, {"key": "b", "running": 0}]}).key_weights() == {}


@pytest.mark.parametrize(("flow", "message"), [
    ({"keys": [{"key": "a", "weight": 0}]}, r"spec\.flow\.keys\[0\]\.weight: a weight must be a number above 0"),
    ({"keys": [{"key": "a", "weight": -0.5}]}, r"spec\.flow\.keys\[0\]\.weight: a weight must be"),
    ({"keys": [{"key": "a", "weight": 1000.01}]}, r"spec\.flow\.keys\[0\]\.weight: .*at most 1000"),
    ({"keys": [{"key": "a", "weight": float("inf")}]}, r"spec\.flow\.keys\[0\]\.weight"),
    ({"keys": [{"key": "a", "weight": "2"}]}, r"spec\.flow\.keys\[0\]\.weight must be a number"),
    ({"keys": [{"key": "a", "weight": True}]}, r"spec\.flow\.keys\[0\]\.weight must be a number"),
    ({"keys": [{"key": "a", "weight": 2}, {"key": "a", "running": 1}]},
     r"spec\.flow\.keys\[1\]\.key 'a' is listed twice"),
    ({"rateLimits": {"smtp": 1}}, r"spec\.flow\.rateLimits must be a list"),
    ({"rateLimits": ["smtp"]}, r"spec\.flow\.rateLimits\[0\] must be an object with name and perSecond"),
    ({"rateLimits": [{"perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name is required"),
    ({"rateLimits": [{"name": "smtp"}]}, r"spec\.flow\.rateLimits\[0\]\.perSecond is required"),
    ({"rateLimits": [{"name": "", "perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name: "),
    ({"rateLimits": [{"name": "-x", "perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name: "),
    ({"rateLimits": [{"name": "a b", "perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name: "),
    ({"rateLimits": [{"name": "x" * 101, "perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name: "),
    ({"rateLimits": [{"name": 7, "perSecond": 1}]}, r"spec\.flow\.rateLimits\[0\]\.name must be a str"),
    ({"rateLimits": [{"name": "smtp", "perSecond": 0}]},
     r"spec\.flow\.rateLimits\[0\]\.perSecond: a rate must be a number of tokens per second above 0"),
    ({"rateLimits": [{"name": "smtp", "perSecond": -1}]}, r"spec\.flow\.rateLimits\[0\]\.perSecond: "),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1_000_001}]}, r"spec\.flow\.rateLimits\[0\]\.perSecond: "),
    ({"rateLimits": [{"name": "smtp", "perSecond": "fast"}]},
     r"spec\.flow\.rateLimits\[0\]\.perSecond must be a number"),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1, "burst": 0}]},
     r"spec\.flow\.rateLimits\[0\]\.burst: a burst must be a whole number from 1"),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1, "burst": 1_000_001}]},
     r"spec\.flow\.rateLimits\[0\]\.burst: "),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1, "burst": 1.5}]},
     r"spec\.flow\.rateLimits\[0\]\.burst must be an integer"),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1, "perKey": 1}]},
     r"spec\.flow\.rateLimits\[0\]\.perKey must be a bool"),
    ({"rateLimits": [{"name": "smtp", "perSecond": 1}, {"name": "smtp", "perSecond": 2}]},
     r"spec\.flow\.rateLimits\[1\]\.name 'smtp' is listed twice"),
    ({"rateLimits": [{"name": f"r{i}", "perSecond": 1} for i in range(fs.FLOW_RATE_LIMITS_MAX + 1)]},
     r"spec\.flow\.rateLimits must have at most 100 entries"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_bad_weights_and_rate_limits_are_refused_naming_the_field(flow: Any, message: str) -> None:
    with pytest.raises(s.SpecError, match=message):
        s.parse_spec(_spec(flow))


def test_validate_judges_a_flow_spec_built_in_code_alike() -> None:
    """FlowSpec.validate (JobQueueSpec.validate) refuses what parsing would, as a SpecError."""
    good = s.parse_spec(_spec({}))
    for flow, message in ((s.FlowSpec(keys=(s.FlowKeySpec("a", weight=0.0),)), r"keys\[0\]\.weight"),
                          (s.FlowSpec(rate_limits=(s.RateLimitSpec("ok", 0.0),)), r"rateLimits\[0\]\.perSecond"),
                          (s.FlowSpec(rate_limits=(s.RateLimitSpec("ok", 1.0, 0),)), r"rateLimits\[0\]\.burst"),
                          (s.FlowSpec(rate_limits=(s.RateLimitSpec("no way", 1.0),)), r"rateLimits\[0\]\.name")):
        with pytest.raises(s.SpecError, match=message):
            type(good)(**{**good.__dict__, "flow": flow}).validate()


# --------------------------------------------------------------------------- the plan


def _rates(**settings: tuple[float, int, bool]) -> dict[str, fs.RateSetting]:
    return {name: fs.RateSetting(*value) for name, value in settings.items()}


def test_plan_sets_and_removes_weights_apart_from_running_limits() -> None:
    wanted = _flow({"keys": [{"key": "a", "weight": 3}, {"key": "b", "running": 2},
                             {"key": "c", "weight": 0.5, "running": 1}]})
    current = fg.FlowLimits(0, {"b": 2, "c": 4, "old": 1}, {"a": 3.0, "b": 2.0, "cli": 9.0})
    plan = fg.plan_flow(current, wanted)
    assert plan == fg.FlowPlan(None, (("c", 1),), ("old",), (("c", 0.5),), ("b", "cli"))
    assert plan.summary() == ("1 key limit(s) set; 1 key limit(s) removed; 1 key weight(s) set; "
                              "2 key weight(s) removed")
    after = plan.after(current)
    assert after == fg.FlowLimits(0, {"b": 2, "c": 1}, {"a": 3.0, "c": 0.5})
    assert fg.plan_flow(after, wanted).empty


def test_plan_sets_listed_rate_limits_that_differ_and_deletes_only_its_own() -> None:
    wanted = _flow({"rateLimits": [{"name": "smtp", "perSecond": 10}, {"name": "api", "perSecond": 5, "burst": 20},
                                   {"name": "new", "perSecond": 1, "perKey": True}]})
    current = fg.FlowLimits(rates=_rates(smtp=(10.0, 10, False),    # equal (default burst): untouched
                                         api=(5.0, 5, False),       # another burst: set back
                                         mine=(1.0, 1, False),      # unlisted, ours: deleted
                                         theirs=(1.0, 1, False)),   # unlisted, someone else's: kept
                            owned_rates=frozenset({"mine"}))
    plan = fg.plan_flow(current, wanted)
    assert plan.set_rates == (("api", fs.RateSetting(5.0, 20, False)), ("new", fs.RateSetting(1.0, 1, True)))
    assert plan.delete_rates == ("mine",)
    assert plan.summary() == "2 rate limit(s) set; 1 rate limit(s) deleted"
    after = plan.after(current)
    # What it set is its own now; "smtp" (equal, never written) stays whoever's it was.
    assert after.owned_rates == {"api", "new"}
    assert set(after.rates) == {"smtp", "api", "new", "theirs"}
    again = fg.plan_flow(after, wanted)
    assert again.empty and again.summary() == "unchanged"
    # Dropping every rate limit deletes its own ones only.
    assert fg.plan_flow(after, s.FlowSpec()).delete_rates == ("api", "new")


def test_a_rate_limit_set_last_by_someone_else_is_never_deleted() -> None:
    current = fg.FlowLimits(rates=_rates(shared=(3.0, 3, False)), owned_rates=frozenset())
    assert fg.plan_flow(current, s.FlowSpec()).empty


class OwnerRepo:
    def flow_queue_list(self) -> list[dict[str, Any]]:
        return []

    def flow_key_settings(self, queue: str) -> list[dict[str, Any]]:
        return []

    def flow_rate_settings(self, names: list[str], owner: str) -> list[dict[str, Any]]:
        rows = [{"name": "listed", "per_second": 2.0, "burst": 2, "per_key": False, "updated_by": "cli:me@host"},
                {"name": "mine", "per_second": 1.0, "burst": 4, "per_key": True, "updated_by": OWNER},
                {"name": "other", "per_second": 1.0, "burst": 1, "per_key": False, "updated_by": "cli:me@host"}]
        return [r for r in rows if r["name"] in names or r["updated_by"] == owner]


def test_read_knows_which_rate_limits_this_jobqueue_set_last() -> None:
    wanted = _flow({"rateLimits": [{"name": "listed", "perSecond": 2}]})
    limits = fg.read_flow_limits(OwnerRepo(), "emails", wanted, OWNER)  # type: ignore[arg-type]
    assert limits.rates == _rates(listed=(2.0, 2, False), mine=(1.0, 4, True))
    assert limits.owned_rates == {"mine"}
    assert fg.plan_flow(limits, wanted) == fg.FlowPlan(delete_rates=("mine",))


# --------------------------------------------------------------------------- the engine


class FakeFlowDb:
    """The database's flow settings, changed as apply_flow would."""

    def __init__(self, limits: fg.FlowLimits) -> None:
        self.limits = limits

    def __call__(self, dsn: str, schema: str, queue: str, wanted: s.FlowSpec, requested_by: str) -> fg.FlowApplied:
        assert requested_by == OWNER
        plan = fg.plan_flow(self.limits, wanted)
        self.limits = plan.after(self.limits)
        return fg.FlowApplied(plan, self.limits)


def test_the_engine_reports_weights_and_rate_limits_in_status_condition_and_event() -> None:
    kube = FakeKube()
    add_secret(kube)
    db = FakeFlowDb(fg.FlowLimits(rates=_rates(gone=(1.0, 1, False)), owned_rates=frozenset({"gone"})))
    b = body(_spec({"perKeyRunning": 2, "keys": [{"key": "big", "weight": 4}, {"key": "a", "running": 1}],
                    "rateLimits": [{"name": "smtp", "perSecond": 10}]}))
    kube.exporter_index.index(b)
    out = en.reconcile_jobqueue(b, kube, fetcher(fg.QueueFigures()), adopter(b), T0, scale=True,
                                exporter_members=kube.exporter_index, flow=db)
    assert out.error_reason is None
    assert out.status["flow"] == {"perKeyRunning": 2, "keyLimits": 1, "keyWeights": 1, "rateLimits": 1}
    flow_cond = cond(out, "FlowApplied")
    assert (flow_cond["status"], flow_cond["reason"]) == ("True", "Applied")
    assert flow_cond["message"] == ("the database holds perKeyRunning=2, 1 key limit(s), 1 key weight(s) "
                                    "and the 1 rate limit(s) of the spec")
    (event,) = [e for e in out.events if e.reason == "FlowLimitsApplied"]
    assert event.message == ("perKeyRunning=2; 1 key limit(s) set; 1 key weight(s) set; 1 rate limit(s) set; "
                             "1 rate limit(s) deleted")
    assert db.limits.owned_rates == {"smtp"}
    again = en.reconcile_jobqueue(b, kube, fetcher(fg.QueueFigures()), adopter(b), T0 + dt.timedelta(minutes=1),
                                  scale=True, exporter_members=kube.exporter_index, flow=db)
    assert "FlowLimitsApplied" not in [e.reason for e in again.events]
