"""The shared exporter (tenure.operator.exporter): groups from the kopf index, one group per
pass, the previous group retired, and the exporter held until its image's migration ran."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from support.operator_fakes import (
    NS,
    T0,
    FakeKube,
    add_secret,
    body,
    cluster_dns,
    cond,
    feed_back,
    run,
)
from tenure.operator import exporter as ex
from tenure.operator import figures as fg
from tenure.operator import spec as s


@pytest.fixture(autouse=True)
def _cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_dns(monkeypatch)


def _queue(name: str, uid: str, created: str, **db: str) -> dict[str, Any]:
    b = body()
    b["metadata"].update(name=name, uid=uid, creationTimestamp=created)
    b["spec"]["database"] = {"secretRef": {"name": db.get("secret", "db")},
                             "schema": db.get("schema", "tenure")}
    b["spec"]["image"] = f"tenure:{name}"
    return b


def _image(kube: FakeKube, name: str) -> str:
    dep = kube.store[("Deployment", NS, name)]
    return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def test_one_exporter_per_database_shared_by_its_jobqueues() -> None:
    kube = FakeKube()
    add_secret(kube)
    a = _queue("a", "u-a", "2026-01-01T00:00:00Z")
    b = _queue("b", "u-b", "2026-01-02T00:00:00Z")
    c = _queue("c", "u-c", "2026-01-03T00:00:00Z", schema="other")
    kube.exporter_index.index(a, b, c)
    outs = {q["metadata"]["name"]: run(kube, q, fg.QueueFigures()) for q in (a, b, c)}
    shared = ex.exporter_name(NS, s.parse_spec(a["spec"]))
    other = ex.exporter_name(NS, s.parse_spec(c["spec"]))
    assert {n: o.status["exporter"] for n, o in outs.items()} == {
        "a": shared, "b": shared, "c": other} and shared != other
    deployments = sorted(n for (k, _, n) in kube.store if k == "Deployment" and "exporter" in n)
    assert deployments == sorted([shared, other])
    dep = kube.store[("Deployment", NS, shared)]
    assert [(o["name"], o["controller"]) for o in dep["metadata"]["ownerReferences"]] == [
        ("a", False), ("b", False)]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "tenure:a"  # the oldest member's
    assert container["args"][0] == "exporter" and dep["spec"]["replicas"] == 1
    svc = kube.store[("Service", NS, shared)]
    assert svc["spec"]["ports"][0]["port"] == ex.EXPORTER_PORT
    assert svc["spec"]["selector"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items())

    # c turns its exporter off: its pass retires the exporter nobody uses any more.
    c = feed_back(c, outs["c"])
    c["spec"]["metrics"] = {"exporter": False}
    out = run(kube, c, fg.QueueFigures())
    assert out.status["exporter"] is None
    assert ("Deployment", NS, other) not in kube.store and ("Service", NS, other) not in kube.store
    # a is deleted (kopf drops it from the index): b's next pass leaves b the only owner, and
    # the exporter runs b's image.
    kube.exporter_index.drop("u-a")
    run(kube, feed_back(b, outs["b"]), fg.QueueFigures())
    owners = kube.store[("Deployment", NS, shared)]["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["b"]
    assert _image(kube, shared) == "tenure:b"


def test_a_pass_applies_only_its_own_exporter_and_lists_no_jobqueues() -> None:
    kube = FakeKube()
    add_secret(kube)
    a = _queue("a", "u-a", "2026-01-01T00:00:00Z")
    c = _queue("c", "u-c", "2026-01-03T00:00:00Z", schema="other")
    kube.exporter_index.index(a, c)
    run(kube, c, fg.QueueFigures())
    kube.applied.clear()
    run(kube, feed_back(a, run(kube, a, fg.QueueFigures())), fg.QueueFigures())
    other = ex.exporter_name(NS, s.parse_spec(c["spec"]))
    assert ("Deployment", other) not in kube.applied
    assert ("Deployment", ex.exporter_name(NS, s.parse_spec(a["spec"]))) in kube.applied
    assert not [kind for kind, _ in kube.listed if kind in ("JobQueue", "Deployment")]


def test_moving_to_another_database_leaves_the_old_exporter_to_its_other_users() -> None:
    kube = FakeKube()
    add_secret(kube)
    a = _queue("a", "u-a", "2026-01-01T00:00:00Z")
    b = _queue("b", "u-b", "2026-01-02T00:00:00Z")
    kube.exporter_index.index(a, b)
    a = feed_back(a, run(kube, a, fg.QueueFigures()))
    kube.exporter_index.index(feed_back(b, run(kube, b, fg.QueueFigures())))  # b is migrated
    shared = ex.exporter_name(NS, s.parse_spec(a["spec"]))
    a["spec"]["database"]["schema"] = "other"
    out = run(kube, a, fg.QueueFigures())
    moved = ex.exporter_name(NS, s.parse_spec(a["spec"]))
    assert out.status["exporter"] == moved != shared
    assert [o["name"] for o in kube.store[("Deployment", NS, shared)]["metadata"][
        "ownerReferences"]] == ["b"]
    assert _image(kube, shared) == "tenure:b"
    assert [o["name"] for o in kube.store[("Deployment", NS, moved)]["metadata"][
        "ownerReferences"]] == ["a"]


def test_the_index_holds_only_jobqueues_that_want_an_exporter() -> None:
    b = body()
    ((key, member),) = ex.exporter_member(b).items()
    assert key == (NS, ex.exporter_name(NS, s.parse_spec(b["spec"])))
    assert (member.name, member.uid, member.schema_ready) == ("mail", "u-1", False)
    off = copy.deepcopy(b)
    off["spec"]["metrics"] = {"exporter": False}
    deleting = copy.deepcopy(b)
    deleting["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    invalid = copy.deepcopy(b)
    invalid["spec"]["leaseSeconds"] = 1
    # {} (not None): kopf then drops the object's earlier entries from the index.
    assert ex.exporter_member(off) == ex.exporter_member(deleting) == ex.exporter_member(invalid) == {}


def test_schema_readiness_is_read_from_the_member_status() -> None:
    b = body()
    spec = s.parse_spec(b["spec"])
    job = ex.mf.migration_job_name("mail", spec)
    migrated = {"migrationJob": job,
                "conditions": [{"type": "SchemaReady", "status": "True", "reason": "Migrated"}]}
    assert ex.schema_ready_in_status("mail", spec, migrated)
    assert not ex.schema_ready_in_status("mail", spec, {**migrated, "migrationJob": "mail-migrate-old"})
    unmanaged = {"conditions": [{"type": "SchemaReady", "status": "True", "reason": "Unmanaged"}]}
    assert ex.schema_ready_in_status("mail", spec, unmanaged)
    assert not ex.schema_ready_in_status("mail", spec, {})


# --------------------------------------------------------------------------- item 6: held


def test_a_new_exporter_waits_at_zero_until_the_migration_succeeded() -> None:
    kube = FakeKube()
    kube.job_outcome = None  # the migration Job runs
    add_secret(kube)
    out = run(kube, body(), fg.QueueFigures())
    exporter = out.status["exporter"]
    assert cond(out, "SchemaReady")["reason"] == "Migrating"
    assert kube.store[("Deployment", NS, exporter)]["spec"]["replicas"] == 0
    job = out.status["migrationJob"]
    kube.store[("Job", NS, job)]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    run(kube, feed_back(body(), out), fg.QueueFigures())
    assert kube.store[("Deployment", NS, exporter)]["spec"]["replicas"] == 1


def test_an_image_change_holds_the_running_exporter_on_the_old_image() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), fg.QueueFigures())
    exporter = first.status["exporter"]
    assert _image(kube, exporter) == "tenure:1"
    kube.job_outcome = None
    new = body()
    new["spec"]["image"] = "tenure:2"
    new["metadata"]["generation"] = 5
    out = run(kube, feed_back(new, first), fg.QueueFigures())
    dep = kube.store[("Deployment", NS, exporter)]
    assert (_image(kube, exporter), dep["spec"]["replicas"]) == ("tenure:1", 1)
    kube.store[("Job", NS, out.status["migrationJob"])]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    run(kube, feed_back(new, out), fg.QueueFigures())
    assert _image(kube, exporter) == "tenure:2"


def test_the_exporter_waits_for_the_oldest_members_migration() -> None:
    """The exporter runs the oldest member's image: while that member's status says its
    image is not migrated, another member's pass keeps the exporter as it is."""
    kube = FakeKube()
    add_secret(kube)
    a = _queue("a", "u-a", "2026-01-01T00:00:00Z")
    b = _queue("b", "u-b", "2026-01-02T00:00:00Z")
    kube.exporter_index.index(a, b)
    a = feed_back(a, run(kube, a, fg.QueueFigures()))
    shared = a["status"]["exporter"]
    a["spec"]["image"] = "tenure:a2"  # a's new migration has not run: a's status says so
    a["status"]["conditions"] = [{"type": "SchemaReady", "status": "False", "reason": "Migrating"}]
    kube.exporter_index.index(a)
    run(kube, b, fg.QueueFigures())
    assert _image(kube, shared) == "tenure:a"
    a["status"]["conditions"] = [{"type": "SchemaReady", "status": "True", "reason": "Migrated"}]
    a["status"]["migrationJob"] = ex.mf.migration_job_name("a", s.parse_spec(a["spec"]))
    kube.exporter_index.index(a)
    run(kube, b, fg.QueueFigures(), now=T0)
    assert _image(kube, shared) == "tenure:a2"
