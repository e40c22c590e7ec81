"""The reconcile engine behind the kopf handlers (tenure.operator.engine), driven with an
in-memory cluster and exporter index."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from support.operator_fakes import (
    NS,
    T0,
    FakeKube,
    add_secret,
    adopt,
    body,
    cluster_dns,
    cond,
    feed_back,
    fetcher,
    run,
)
from tenure.operator import engine as en
from tenure.operator import exporter as ex
from tenure.operator import figures as fg
from tenure.operator import manifests as rc
from tenure.operator import spec as s


@pytest.fixture(autouse=True)
def _cluster_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_dns(monkeypatch)


def test_first_pass_creates_owned_children_and_scales_from_stats() -> None:
    kube = FakeKube()
    add_secret(kube)
    out = run(kube, body(), fg.QueueFigures(ready=35, running=0, scheduled=2, running_expired=1))
    assert out.error_reason is None
    assert kube.kinds() == ["CronJob", "Deployment", "Deployment", "Job",
                            "PodDisruptionBudget", "Secret", "Service", "Service"]
    for (kind, _, _), obj in kube.store.items():
        if kind != "Secret":
            assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    st = out.status
    assert (st["ready"], st["running"], st["runningExpired"], st["scheduled"]) == (35, 0, 1, 2)
    assert (st["desiredReplicas"], st["replicas"], st["observedGeneration"]) == (4, 4, 4)
    assert st["lastScaleReason"].startswith("initial size 4")
    assert [e.reason for e in out.events] == ["MigrationStarted", "ScaledUp"]
    assert cond(out, "Ready")["status"] == "True"
    assert cond(out, "Degraded")["status"] == "False"
    assert cond(out, "SchemaReady")["reason"] == "Migrated"


def test_restart_converges_without_duplicates_or_new_events() -> None:
    store: dict[tuple[str, str, str], dict[str, Any]] = {}
    kube = FakeKube(store)
    add_secret(kube)
    figures = fg.QueueFigures(ready=35)
    b = feed_back(body(), run(kube, body(), figures))
    before = copy.deepcopy(store)
    # A new operator process: fresh client, same cluster, the status kopf had patched.
    again = run(FakeKube(store), b, figures, now=T0 + dt.timedelta(seconds=10))
    assert store == before
    assert again.events == ()
    assert again.status["replicas"] == 4
    assert cond(again, "Ready")["lastTransitionTime"] == cond(
        en.Outcome(b["status"]), "Ready"
    )["lastTransitionTime"]


def test_missing_secret_degrades_and_keeps_replicas() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), fg.QueueFigures(ready=70)))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7
    del kube.store[("Secret", NS, "db")]
    out = run(kube, b, fg.QueueFigures(), now=T0 + dt.timedelta(seconds=600))
    assert out.error_reason == "SecretMissing"
    assert not out.permanent
    assert cond(out, "Degraded") | {"status": "True", "reason": "SecretMissing"} == cond(
        out, "Degraded"
    )
    assert cond(out, "Ready")["status"] == "False"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7
    assert out.status["replicas"] == 7
    assert [e.type for e in out.events] == ["Warning"]
    # Same failure again: no second Warning event, still degraded.
    out2 = run(kube, feed_back(b, out), fg.QueueFigures(), now=T0 + dt.timedelta(seconds=610))
    assert out2.events == ()
    assert cond(out2, "Degraded")["status"] == "True"


def test_missing_key_in_secret() -> None:
    kube = FakeKube()
    kube.store[("Secret", NS, "db")] = {"data": {"other": "eA=="}}
    out = run(kube, body(), fg.QueueFigures())
    assert out.error_reason == "SecretKeyMissing"
    assert "'url'" in out.error_message


def test_unreadable_secret_degrades_instead_of_escaping() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), fg.QueueFigures(ready=70)))
    kube.fail_get = "Secret"
    out = run(kube, b, fg.QueueFigures(), now=T0 + dt.timedelta(seconds=600))
    assert out.error_reason == "SecretUnreadable" and "forbidden" in out.error_message
    assert cond(out, "Degraded")["status"] == "True"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 7


def test_unreachable_database_never_scales_to_zero() -> None:
    spec = body()["spec"]
    spec["scaling"] = {"minReplicas": 0, "allowScaleToZero": True, "scaleDownStabilizationSeconds": 0}
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(spec), run(kube, body(spec), fg.QueueFigures(ready=20)))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 2
    down = fg.StatsUnavailable("DatabaseUnreachable", "connection refused")
    out = run(kube, b, down, now=T0 + dt.timedelta(hours=1))
    assert out.error_reason == "DatabaseUnreachable"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 2
    assert "ready" not in out.status or out.status["ready"] == 20
    # Back up and empty: now it may go to zero.
    out = run(kube, feed_back(b, out), fg.QueueFigures(), now=T0 + dt.timedelta(hours=1, seconds=10))
    assert out.error_reason is None
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0
    assert cond(out, "Degraded")["status"] == "False"


def test_new_queue_without_stats_starts_at_the_floor() -> None:
    kube = FakeKube()  # no secret at all
    spec = body()["spec"]
    spec["scaling"] = {"minReplicas": 0, "allowScaleToZero": True}
    out = run(kube, body(spec), fg.QueueFigures())
    assert out.error_reason == "SecretMissing"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 1


def test_change_pass_keeps_replicas_and_does_not_clear_degraded() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), fg.QueueFigures(ready=50)))
    del kube.store[("Secret", NS, "db")]
    b = feed_back(b, run(kube, b, fg.QueueFigures(), now=T0 + dt.timedelta(seconds=10)))
    b["spec"]["image"] = "tenure:2"
    out = run(kube, b, fg.QueueFigures(), now=T0 + dt.timedelta(seconds=20), scale=False)
    assert out.error_reason is None
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["replicas"] == 5
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:2"
    # A successful change pass writes no conditions, so Degraded stays as the timer left it
    # (and a change pass racing a timer pass cannot replace newer conditions).
    assert "conditions" not in out.status
    after = feed_back(b, out)
    (degraded,) = [c for c in after["status"]["conditions"] if c["type"] == "Degraded"]
    assert degraded["status"] == "True"


def test_invalid_spec_is_permanent_and_touches_nothing() -> None:
    kube = FakeKube()
    spec = body()["spec"]
    spec["heartbeatSeconds"] = 30
    spec["leaseSeconds"] = 60
    out = run(kube, body(spec), fg.QueueFigures())
    assert (out.error_reason, out.permanent) == ("InvalidSpec", True)
    assert "at most a third" in out.error_message
    assert kube.store == {}


def test_service_monitor_follows_the_spec_when_the_api_exists() -> None:
    kube = FakeKube()
    kube.monitoring = True
    add_secret(kube)
    run(kube, body(), fg.QueueFigures())
    assert ("ServiceMonitor", NS, "mail") in kube.store
    spec = body()["spec"]
    spec["metrics"] = {"serviceMonitor": False}
    run(kube, body(spec), fg.QueueFigures())
    assert ("ServiceMonitor", NS, "mail") not in kube.store
    exporter = ex.exporter_name(NS, s.parse_spec(spec))
    # The queue's own and its database's exporter ServiceMonitor (no other JobQueue wants it).
    assert kube.deleted == [("ServiceMonitor", "mail"), ("ServiceMonitor", exporter)]


def test_no_service_monitor_without_its_api() -> None:
    kube = FakeKube()
    add_secret(kube)
    run(kube, body(), fg.QueueFigures())
    assert "ServiceMonitor" not in kube.kinds()
    assert kube.deleted == []


def test_apply_failure_degrades_with_the_server_message() -> None:
    kube = FakeKube()
    add_secret(kube)
    kube.fail_apply = "CronJob"
    out = run(kube, body(), fg.QueueFigures())
    assert out.error_reason == "ApplyFailed"
    assert "forbidden" in out.error_message
    assert not out.permanent


def test_scale_down_event_and_scaling_condition() -> None:
    kube = FakeKube()
    add_secret(kube)
    b = feed_back(body(), run(kube, body(), fg.QueueFigures(ready=80)))
    out = run(kube, b, fg.QueueFigures(), now=T0 + dt.timedelta(seconds=61))
    assert [e.reason for e in out.events] == ["ScaledDown"]
    assert cond(out, "Scaling")["reason"] == "ScaledDown"
    assert out.status["replicas"] == 1
    # Next pass: nothing changes, pods ready -> Scaling False.
    out = run(kube, feed_back(b, out), fg.QueueFigures(), now=T0 + dt.timedelta(seconds=71))
    assert out.events == ()
    assert cond(out, "Scaling")["status"] == "False"


def test_children_names_match_the_builders() -> None:
    kube = FakeKube()
    add_secret(kube)
    run(kube, body(), fg.QueueFigures())
    names = {(k, n) for k, _, n in kube.store}
    assert ("Deployment", rc.worker_name("mail")) in names
    assert ("CronJob", rc.reaper_name("mail")) in names
    assert ("Service", rc.service_name("mail")) in names
    assert ("PodDisruptionBudget", rc.pdb_name("mail")) in names


def test_spec_paused_and_max_running_are_applied_and_a_paused_queue_keeps_its_pods() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), fg.QueueFigures(ready=35))
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    spec = {**body()["spec"], "paused": True, "maxRunning": 5}
    applied: list[tuple[str, str, str, bool, int]] = []

    def controls(dsn: str, schema: str, queue: str, paused: bool, limit: int) -> None:
        applied.append((dsn, schema, queue, paused, limit))

    b = feed_back(body(spec), first)
    out = en.reconcile_jobqueue(b, kube, fetcher(fg.QueueFigures(ready=500)), adopt, T0 + dt.timedelta(minutes=5),
                               scale=True, controls=controls)
    assert applied == [(fg.dsn_in_namespace("postgresql://u:p@db/q", NS), "tenure", "emails", True, 5)]
    assert (out.status["paused"], out.status["maxRunning"]) == (True, 5)
    assert "QueueControlsApplied" in [e.reason for e in out.events]
    # A backlog of 500 on a paused queue does not scale the workers up: the pods are kept as they are.
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    # Level-based: once the database agrees, nothing is applied again.
    again = en.reconcile_jobqueue(feed_back(b, out), kube, fetcher(fg.QueueFigures(ready=500, paused=True,
                                                                                max_running=5)),
                                 adopt, T0 + dt.timedelta(minutes=6), scale=True, controls=controls)
    assert len(applied) == 1 and again.error_reason is None


def test_spec_max_running_must_be_a_non_negative_integer() -> None:
    from tenure.operator.spec import SpecError, parse_spec

    base = body()["spec"]
    assert parse_spec({**base, "maxRunning": 3}).max_running == 3
    for bad in (-1, "5", True):
        with pytest.raises(SpecError, match="maxRunning"):
            parse_spec({**base, "maxRunning": bad})
    with pytest.raises(SpecError, match="paused"):
        parse_spec({**base, "paused": "yes"})


def test_spec_vacuum_dead_rows_reaches_the_worker_and_zero_leaves_it_to_autovacuum() -> None:
    from tenure.operator.manifests import worker_args
    from tenure.operator.spec import SpecError, parse_spec

    base = body()["spec"]
    assert parse_spec(base).vacuum_dead_rows == 100_000
    args = worker_args(parse_spec({**base, "vacuumDeadRows": 0}))
    assert args[args.index("--vacuum-dead-rows") + 1] == "0"
    for bad in (-1, "5", True):
        with pytest.raises(SpecError, match="vacuumDeadRows"):
            parse_spec({**base, "vacuumDeadRows": bad})


# --------------------------------------------------------------------------- managed migrations


def _job(kube: FakeKube) -> dict[str, Any]:
    (job,) = [obj for (kind, _, _), obj in kube.store.items() if kind == "Job"]
    return job


def test_unmigrated_database_gets_a_job_and_workers_wait_at_zero() -> None:
    kube = FakeKube()
    kube.job_outcome = None  # the Job runs (no pod has finished yet)
    add_secret(kube)
    # No stats before the schema exists: a fetch here would fail the test.
    out = run(kube, body(), AssertionError("stats read before the schema is current"))
    assert out.error_reason is None
    job = _job(kube)
    spec = s.parse_spec(body()["spec"])
    assert job["metadata"]["name"] == rc.migration_job_name("mail", spec)
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["args"]) == ("tenure:1", ["migrate"])
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e for e in container["env"]}
    assert env["TENURE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "url"}
    assert env["TENURE_SCHEMA"]["value"] == "tenure"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0
    assert kube.store[("CronJob", NS, "mail-reaper")]["spec"]["suspend"] is True
    assert cond(out, "SchemaReady")["status"] == "False"
    assert cond(out, "SchemaReady")["reason"] == "Migrating"
    assert cond(out, "Ready")["reason"] == "Migrating"
    assert cond(out, "Degraded")["status"] == "False"
    assert out.status["migrationJob"] == job["metadata"]["name"]
    assert [e.reason for e in out.events] == ["MigrationStarted"]

    # The Job succeeds: the next pass scales from stats and unsuspends the reaper.
    kube.store[("Job", NS, job["metadata"]["name"])]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    out = run(kube, feed_back(body(), out), fg.QueueFigures(ready=35), now=T0 + dt.timedelta(seconds=10))
    assert cond(out, "SchemaReady")["reason"] == "Migrated"
    assert cond(out, "Ready")["status"] == "True"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 4
    assert kube.store[("CronJob", NS, "mail-reaper")]["spec"]["suspend"] is False


def test_image_change_holds_the_running_workers_until_the_new_migration_succeeded() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), fg.QueueFigures(ready=20))
    old_job = _job(kube)["metadata"]["name"]
    kube.job_outcome = None
    new_spec = body()["spec"]
    new_spec["image"] = "tenure:2"
    out = run(kube, feed_back(body(new_spec), first), fg.QueueFigures(ready=20),
              now=T0 + dt.timedelta(seconds=10))
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:1"
    assert dep["spec"]["replicas"] == 2
    cron = kube.store[("CronJob", NS, "mail-reaper")]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "tenure:1")
    assert cond(out, "SchemaReady")["reason"] == "Migrating"
    new_job = rc.migration_job_name("mail", s.parse_spec(new_spec))
    assert new_job != old_job and ("Job", NS, old_job) in kube.store
    # Succeeded: workers roll to the new image and the older Job is retired.
    kube.store[("Job", NS, new_job)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    run(kube, feed_back(body(new_spec), out), fg.QueueFigures(ready=20),
        now=T0 + dt.timedelta(seconds=20))
    dep = kube.store[("Deployment", NS, "mail-worker")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "tenure:2"
    assert ("Job", NS, old_job) not in kube.store and ("Job", old_job) in kube.deleted


def test_a_stale_pass_never_retires_the_migration_job_of_a_newer_spec() -> None:
    """Issue 22, item 9: kopf runs a JobQueue's timer and its change handlers concurrently, so
    a timer pass can still hold the body from before an image change while the update handler
    creates the new image's Job. That pass saw its own (old) Job succeeded and deleted every
    other migration Job, the new one included; the e2e harness then found the Job it was
    finishing gone (404), or finished and then recreated as running. Jobs now carry the
    generation they were made for, and a pass retires only its own generation's or older."""
    kube = FakeKube()
    add_secret(kube)
    old = body()
    first = run(kube, old, fg.QueueFigures())
    old_job = first.status["migrationJob"]
    kube.job_outcome = None
    new = body()
    new["spec"]["image"] = "tenure:2"
    new["metadata"]["generation"] = 5
    changed = run(kube, feed_back(new, first), fg.QueueFigures(), scale=False)
    new_job = changed.status["migrationJob"]
    assert kube.store[("Job", NS, new_job)]["metadata"]["annotations"] == {
        rc.MIGRATION_GENERATION_ANNOTATION: "5"}
    # The timer's pass with the body from before the change.
    run(kube, feed_back(old, first), fg.QueueFigures(), now=T0 + dt.timedelta(seconds=1))
    assert ("Job", NS, new_job) in kube.store and ("Job", new_job) not in kube.deleted
    # The new Job succeeds: the next pass retires the old one.
    kube.store[("Job", NS, new_job)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]}
    run(kube, feed_back(new, changed), fg.QueueFigures(), now=T0 + dt.timedelta(seconds=2))
    assert ("Job", NS, old_job) not in kube.store


def test_a_migration_job_without_a_generation_is_retired_as_the_oldest() -> None:
    kube = FakeKube()
    add_secret(kube)
    legacy = rc.build_migration_job("mail", NS, s.parse_spec({**body()["spec"], "image": "tenure:0"}))
    assert "annotations" not in legacy["metadata"]
    kube.apply(legacy)
    run(kube, body(), fg.QueueFigures())
    assert ("Job", NS, legacy["metadata"]["name"]) not in kube.store


def _failed_pod(message: str) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"state": {"terminated": {
        "exitCode": 2, "message": message}}}]}}


def test_schema_newer_than_the_code_is_degraded_and_never_retried() -> None:
    kube = FakeKube()
    kube.job_outcome = "Failed"
    kube.pods = [_failed_pod("tenure: error: schema 'tenure' is at version 9 but this tenure "
                             "knows 2: upgrade tenure\n")]
    add_secret(kube)
    out = run(kube, body(), AssertionError("no stats"), now=T0 + dt.timedelta(hours=2))
    assert out.error_reason == "SchemaNewerThanCode"
    assert "tenure:1" in out.error_message and "version 9" in out.error_message
    assert cond(out, "Degraded")["reason"] == "SchemaNewerThanCode"
    assert cond(out, "SchemaReady")["status"] == "False"
    assert ("Job", NS, _job(kube)["metadata"]["name"]) in kube.store  # not deleted: no retry
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 0


def test_failed_migration_is_reported_then_run_again_after_the_retry_delay() -> None:
    kube = FakeKube()
    kube.job_outcome = "Failed"
    kube.pods = [_failed_pod("tenure: error: cannot connect to the database: refused")]
    add_secret(kube)
    out = run(kube, body(), AssertionError("no stats"), now=T0 + dt.timedelta(seconds=30))
    assert out.error_reason == "MigrationFailed"
    assert "cannot connect to the database" in out.error_message
    assert [k for k, _ in kube.deleted] == []
    out = en.reconcile_jobqueue(body(), kube, fetcher(AssertionError("no stats")), adopt,
                               T0 + dt.timedelta(seconds=301), scale=True,
                               migration_retry_seconds=300)
    assert out.error_reason == "MigrationFailed"
    assert [k for k, _ in kube.deleted] == ["Job"]


def test_unmanaged_migrations_create_no_job() -> None:
    kube = FakeKube()
    add_secret(kube)
    spec = body()["spec"]
    spec["migrations"] = {"managed": False}
    out = run(kube, body(spec), fg.QueueFigures(ready=5))
    assert "Job" not in kube.kinds()
    assert cond(out, "SchemaReady")["reason"] == "Unmanaged"
    assert kube.store[("Deployment", NS, "mail-worker")]["spec"]["replicas"] == 1
    # The operator-wide switch does the same for a JobQueue that asks for management.
    kube2 = FakeKube()
    add_secret(kube2)
    en.reconcile_jobqueue(body(), kube2, fetcher(fg.QueueFigures()), adopt, T0, scale=True,
                         manage_migrations=False)
    assert "Job" not in kube2.kinds()


def test_schema_lost_after_migration_runs_the_job_again() -> None:
    kube = FakeKube()
    add_secret(kube)
    out = run(kube, body(), fg.StatsUnavailable("SchemaMissing", "relation jobs does not exist"))
    assert out.error_reason == "SchemaMissing"
    assert [k for k, _ in kube.deleted] == ["Job"]


# --------------------------------------------------------------------------- cron schedule


@pytest.mark.parametrize("schedule", [
    "* * * * *", "*/5 * * * *", "0 3 * * 1-5", "0,30 8-18/2 1,15 JAN-MAR sun", "59 23 31 12 7",
    "@hourly", "@daily", "0 0 ? * *",
])
def test_valid_cron_schedules_pass(schedule: str) -> None:
    s.validate_cron(schedule)


@pytest.mark.parametrize("schedule, message", [
    ("99 99 99 99 99", "minute: 99 is outside 0-59"),
    ("0 24 * * *", "hour: 24 is outside 0-23"),
    ("0 0 0 * *", "day of month: 0 is outside 1-31"),
    ("0 0 1 13 *", "month: 13 is outside 1-12"),
    ("0 0 * * 8", "day of week: 8 is outside 0-7"),
    ("*/0 * * * *", "step '0' must be a positive integer"),
    ("30-10 * * * *", "runs backwards"),
    ("0 0 * FOO *", "'FOO' is not a number"),
    ("1,,2 * * * *", "empty list element"),
    ("? * * * *", "only allowed in the day fields"),
    ("@every", "unknown macro"),
    ("* * * *", "expected 5 fields"),
])
def test_invalid_cron_schedules_are_refused_with_the_field(schedule: str, message: str) -> None:
    with pytest.raises(s.ScheduleError) as err:
        s.validate_cron(schedule)
    assert message in str(err.value)


def test_invalid_schedule_degrades_and_leaves_the_cronjob_alone() -> None:
    kube = FakeKube()
    add_secret(kube)
    first = run(kube, body(), fg.QueueFigures())
    before = copy.deepcopy(kube.store[("CronJob", NS, "mail-reaper")])
    spec = body()["spec"]
    spec["reaper"] = {"schedule": "99 99 99 99 99"}
    out = run(kube, feed_back(body(spec), first), fg.QueueFigures())
    assert out.error_reason == "InvalidSchedule" and out.permanent
    assert "minute: 99 is outside 0-59" in out.error_message
    assert cond(out, "Degraded")["reason"] == "InvalidSchedule"
    assert kube.store[("CronJob", NS, "mail-reaper")] == before
