"""Unique jobs' pure logic (issue 39, item 3; docs/unique.md): the declaration's checks, the key's
payload-derived part, and how the CLI reads flags and file lines into a declaration."""

from __future__ import annotations

import argparse

import pytest

import tenure
from tenure.cli.enqueue import spec_from_line, unique_from
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import JobSpec
from tenure.core.unique import UNIQUE_STATES_DEFAULT, Unique, parse_unique_by, unique_base


def test_the_declaration_is_normalised() -> None:
    u = tenure.Unique(by=["customer_id", "region"], period=300.0)
    assert u.by == ("customer_id", "region") and u.period == 300 and isinstance(u.period, int)
    assert u.states == UNIQUE_STATES_DEFAULT == ("pending", "running") and u.on_conflict == "skip"
    assert Unique(by=["a"], states=("cancelled", "running", "pending")).states == ("pending", "running", "cancelled")
    assert Unique(by=["a"], period=60).bucket_period == 60
    assert Unique(by=["a"], period=60, on_conflict="debounce").bucket_period is None
    assert not Unique(by=["a"]).updates and Unique(by=["a"], on_conflict="replace").updates


@pytest.mark.parametrize("kwargs, says", [
    ({"by": []}, "at least one"), ({"by": "a"}, "list"), ({"by": [""]}, "non-empty"), ({"by": [" a"]}, "whitespace"),
    ({"by": [1]}, "strings"), ({"by": ["a", "a"]}, "twice"), ({"by": [str(i) for i in range(33)]}, "at most 32"),
    ({"by": ["a"], "period": 0}, "period"), ({"by": ["a"], "period": -1}, "period"),
    ({"by": ["a"], "period": 0.5}, "period"), ({"by": ["a"], "period": float("nan")}, "period"),
    ({"by": ["a"], "period": True}, "period"), ({"by": ["a"], "period": 10**10}, "period"),
    ({"by": ["a"], "states": ("running",)}, "pending"), ({"by": ["a"], "states": "pending"}, "list"),
    ({"by": ["a"], "states": ("pending", "running", "done")}, "unknown unique state"),
    ({"by": ["a"], "states": ("pending", "running", "completed")}, "job_history"),
    ({"by": ["a"], "on_conflict": "update"}, "on_conflict"),
    ({"by": ["a"], "on_conflict": "debounce"}, "needs a period"),
])
def test_bad_declarations_are_refused_with_one_line(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(JobSpecError, match=says) as exc:
        Unique(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def test_the_key_is_the_task_plus_the_chosen_fields() -> None:
    u = Unique(by=["customer_id", "region"])
    base = unique_base("sync", {"customer_id": 7, "region": "eu", "n": 1}, u)
    assert len(base) == 64 and int(base, 16) >= 0
    assert unique_base("sync", {"region": "eu", "customer_id": 7, "n": 2}, u) == base  # other fields, order
    assert unique_base("sync", {"customer_id": 7.0, "region": "eu"}, u) == base  # 7.0 is 7, as in jsonb
    assert unique_base("sync", {"customer_id": "7", "region": "eu"}, u) != base
    assert unique_base("sync", {"customer_id": 7, "region": None}, u) != base
    assert unique_base("other", {"customer_id": 7, "region": "eu"}, u) != base
    assert unique_base("sync", {"customer_id": 7, "region": "eu"}, Unique(by=["region", "customer_id"])) == base
    nested = Unique(by=["a"])
    assert unique_base("t", {"a": {"x": 1, "y": [1.0]}}, nested) == unique_base("t", {"a": {"y": [1], "x": 1}}, nested)
    # Period, states and on_conflict are not in the payload-derived part (the period's bucket is
    # added by the enqueue statement).
    assert unique_base("sync", {"customer_id": 7, "region": "eu"}, Unique(by=u.by, period=60)) == base


def test_a_missing_field_or_a_non_object_payload_is_refused() -> None:
    u = Unique(by=["customer_id"])
    with pytest.raises(JobSpecError, match="'customer_id' is missing from the payload"):
        unique_base("t", {"customer": 1}, u)
    for payload in (None, [1], "x", 3):
        with pytest.raises(JobSpecError, match="JSON object payload"):
            unique_base("t", payload, u)
    with pytest.raises(JobSpecError, match="missing"):
        JobSpec("t", {}, unique=u).validate()
    with pytest.raises(JobSpecError, match="tenure.Unique"):
        JobSpec("t", {}, unique="customer_id").validate()  # type: ignore[arg-type]
    assert JobSpec("t", {"customer_id": None}, unique=u).validate() == '{"customer_id":null}'


def test_flags_and_file_lines_make_a_declaration() -> None:
    assert parse_unique_by(" a , b") == ("a", "b")
    for bad in ("", ",", "a,,b", "a,a"):
        with pytest.raises(JobSpecError):
            parse_unique_by(bad)
    assert unique_from(None, None, None, None) is None
    with pytest.raises(JobSpecError, match="needs unique by"):
        unique_from(None, "300", None, None)
    u = unique_from("a,b", "5m", "pending,running,failed", "replace")
    assert u == Unique(by=("a", "b"), period=300, states=("pending", "running", "failed"), on_conflict="replace")
    with pytest.raises(JobSpecError, match="unique period"):
        unique_from("a", "soon", None, None)
    defaults = argparse.Namespace(delay=0.0, queue="default", max_attempts=5, priority=0, flow_key=None,
                                  rate_limit=None, unique_by="a", unique_period=None, unique_states=None,
                                  unique_on_conflict=None)
    spec = spec_from_line({"task": "t", "payload": {"a": 1, "b": 2}, "unique_by": ["b"], "unique_period": 60}, defaults)
    assert spec.unique == Unique(by=["b"], period=60)
    assert spec_from_line({"task": "t", "payload": {"a": 1}}, defaults).unique == Unique(by=["a"])
    with pytest.raises(JobSpecError, match="missing"):
        spec_from_line({"task": "t", "payload": {"b": 1}}, defaults)


def test_a_task_declares_it_and_app_enqueue_passes_it() -> None:
    app = tenure.App()
    u = Unique(by=["customer_id"], period=300)

    @app.task(unique=u)
    def sync(ctx: object) -> None:
        return None

    assert app.tasks["sync"].unique == u
    with pytest.raises(ConfigError, match="tenure.Unique"):
        app.task("other", unique=["customer_id"])  # type: ignore[arg-type]
