"""kopf registration (tenure.operator.handlers), the operator's settings, and the one writer of
conditions and memory of Events (tenure.operator.status)."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest

from support.operator_fakes import FakeKube
from tenure.core.errors import ConfigError
from tenure.operator import exporter as ex
from tenure.operator import handlers as hd
from tenure.operator import status as st
from tenure.operator.settings import OperatorConfig
from tenure.operator.status import ConditionValue, Event, Failure, PassReport

T0 = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.UTC)


def test_upsert_condition_moves_transition_time_only_on_flip() -> None:
    c1 = st.upsert_condition([], "Ready", ConditionValue(True, "Ok", ""), T0, 1)
    later = T0 + dt.timedelta(minutes=5)
    c2 = st.upsert_condition(c1, "Ready", ConditionValue(True, "Ok", "still"), later, 2)
    assert c2[0]["lastTransitionTime"] == c1[0]["lastTransitionTime"]
    assert (c2[0]["message"], c2[0]["observedGeneration"]) == ("still", 2)
    c3 = st.upsert_condition(c2, "Ready", ConditionValue(False, "Broken", "x"), later, 2)
    assert c3[0]["lastTransitionTime"] == "2026-03-01T08:05:00Z"
    c4 = st.upsert_condition(c3, "Degraded", ConditionValue(True, "Broken", "x"), later, 2)
    assert [c["type"] for c in c4] == ["Ready", "Degraded"]


def test_only_full_passes_write_conditions() -> None:
    """The one writer: a change pass (kopf runs it concurrently with the timer) writes no
    conditions, failed or not; a full pass writes Degraded and Ready from its failure."""
    failed = Failure("SecretMissing", "Secret shop/db not found")
    assert st.conditions_for({}, PassReport(full=False, failure=failed), T0, 3) is None
    conditions = st.conditions_for({}, PassReport(full=True, failure=failed), T0, 3)
    assert conditions is not None
    by_type = {c["type"]: c for c in conditions}
    assert (by_type["Degraded"]["status"], by_type["Degraded"]["reason"]) == ("True", "SecretMissing")
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "SecretMissing")
    healthy = st.conditions_for({"conditions": conditions}, PassReport(
        full=True, ready=ConditionValue(True, "Reconciled", "ok")), T0, 3)
    assert healthy is not None
    assert {c["type"]: c["status"] for c in healthy} == {"Degraded": "False", "Ready": "True"}


def test_warning_only_when_degraded_changes_reason() -> None:
    failed = Failure("DatabaseUnreachable", "refused")
    assert st.warning_for({}, failed) == Event("Warning", "DatabaseUnreachable", "refused")
    already = {"conditions": [{"type": "Degraded", "status": "True", "reason": "DatabaseUnreachable"}]}
    assert st.warning_for(already, failed) is None
    assert st.warning_for(already, Failure("SecretMissing", "x")) is not None
    assert st.warning_for(already, None) is None


def test_operator_config() -> None:
    cfg = OperatorConfig.from_env({"TENURE_OPERATOR_INTERVAL_SECONDS": "5"})
    assert cfg.interval_seconds == 5
    assert [cfg.backoff(r) for r in (0, 1, 2)] == [5, 10, 20]
    assert cfg.backoff(50) == cfg.backoff_max_seconds
    with pytest.raises(ConfigError):
        OperatorConfig.from_env({"TENURE_OPERATOR_INTERVAL_SECONDS": "soon"})
    with pytest.raises(ConfigError):
        OperatorConfig(interval_seconds=0).validate()
    with pytest.raises(ConfigError, match="true or false"):
        OperatorConfig.from_env({"TENURE_OPERATOR_MANAGE_MIGRATIONS": "maybe"})


def test_register_wires_login_timer_change_index_and_event_handlers() -> None:
    """A private kopf registry gets no default login handler: ours must be there, or the
    operator cannot authenticate at all. (Reads kopf's registry internals.)"""
    import kopf

    registry = kopf.OperatorRegistry()
    hd.register(registry, OperatorConfig(interval_seconds=7), lambda: FakeKube())
    activities = {a.activity.value for a in registry._activities.get_all_handlers()}
    assert {"authentication", "startup", "probe"} <= activities
    (timer,) = registry._spawning.get_all_handlers()
    assert timer.interval == 7
    assert timer.selector.group == "tenure.dev"
    reasons = {c.reason for c in registry._changing.get_all_handlers()}
    assert {kopf.Reason.CREATE, kopf.Reason.UPDATE} <= reasons
    assert any(c.initial for c in registry._changing.get_all_handlers())  # resume
    (index,) = registry._indexing.get_all_handlers()
    assert index.id == ex.INDEX_ID and index.selector.any_name == "jobqueues"
    (watch,) = registry._watching.get_all_handlers()
    assert watch.selector.any_name == "jobqueues"


class Patch:
    def __init__(self) -> None:
        self.status: dict[str, Any] = {}


def _jobqueue(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "tenure.dev/v1alpha1", "kind": "JobQueue",
        "metadata": {"name": "mail", "namespace": "shop", "uid": uid, "generation": 1},
        "spec": {"queue": "emails", "image": "tenure:1", "app": "shop.tasks:app",
                 "database": {"secretRef": {"name": "db"}}},
        "status": {},
    }


def test_a_deleted_jobqueue_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure memory (one Warning per outage) has one owner and forgets a JobQueue when
    its DELETED watch event arrives; a pass still running then cannot bring it back."""
    import kopf

    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "event", lambda body, **kw: posted.append((kw["type"], kw["reason"])))
    registry = kopf.OperatorRegistry()
    kube = FakeKube()  # no Secret: every full pass fails with SecretMissing
    handlers = hd.register(registry, OperatorConfig(interval_seconds=7), lambda: kube)
    body = _jobqueue("u-gone")
    for _ in range(2):
        with pytest.raises(kopf.TemporaryError, match="SecretMissing"):
            handlers.run(body, Patch(), 0, full=True, index={})
    assert posted.count(("Warning", "SecretMissing")) == 1  # announced once
    assert handlers.announcements.remembered() == {"u-gone": "SecretMissing"}

    (watch,) = registry._watching.get_all_handlers()
    # kopf calls the handler only for DELETED events (its `when` filter), and logs each call.
    assert watch.when is not None
    assert not watch.when(event={"type": "MODIFIED", "object": body}, type="MODIFIED")
    assert watch.when(event={"type": "DELETED", "object": body}, type="DELETED")
    watch.fn(event={"type": "MODIFIED", "object": body}, body=body)
    assert handlers.announcements.remembered() == {"u-gone": "SecretMissing"}
    watch.fn(event={"type": "DELETED", "object": body}, body=body)
    assert handlers.announcements.remembered() == {}
    with pytest.raises(kopf.TemporaryError):  # a pass that was under way when it went
        handlers.run(body, Patch(), 0, full=True, index={})
    assert handlers.announcements.remembered() == {}


def test_a_pass_patches_status_and_clears_the_memory_when_healthy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf

    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    monkeypatch.setattr("tenure.operator.figures.resolves", lambda name: False)
    kube = FakeKube()
    handlers = hd.JobQueueHandlers(OperatorConfig(), lambda: kube)
    monkeypatch.setattr(handlers, "fetch", lambda dsn, schema, queue: hd.QueueFigures(ready=3))
    monkeypatch.setattr(handlers, "controls", lambda *args: None)
    body = _jobqueue("u-1")
    with pytest.raises(kopf.TemporaryError):
        handlers.run(body, Patch(), 0, full=True, index={})
    kube.store[("Secret", "shop", "db")] = {"data": {"url": base64.b64encode(b"host=db").decode()}}
    patch = Patch()
    outcome = handlers.run(body, patch, 0, full=True, index={})
    assert outcome.failure is None and patch.status["ready"] == 3
    assert {c["type"] for c in patch.status["conditions"]} >= {"Ready", "Degraded", "SchemaReady"}
    assert handlers.announcements.remembered() == {}
