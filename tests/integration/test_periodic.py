"""Periodic jobs against a real PostgreSQL: exactly once per slot with concurrent schedulers,
bounded catch-up after an outage, time zones, validation."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from tenure import App
from tenure.core.errors import ConfigError
from tenure.core.repository import Repository
from tenure.worker.periodic import Schedule, Scheduler

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 12, 0, 30, tzinfo=timezone.utc)


def _jobs(repo: Repository, task: str) -> list[dict[str, object]]:
    return [r for r in repo.job_list(task=task, limit=10_000)]


def test_three_concurrent_schedulers_enqueue_each_slot_exactly_once(dsn: str, schema: str,
                                                                    repo: Repository) -> None:
    """Three schedulers (own connections) look at the same instants at once, 120 slots long."""
    s = Schedule("*/5 * * * *", name="report", task="report", payload={"kind": "daily"})
    schedulers = [Scheduler([s], dsn=dsn, schema=schema) for _ in range(3)]
    steps = [T0 + timedelta(minutes=5 * i, seconds=j) for i in range(120) for j in (0, 1)]
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def run(sched: Scheduler) -> None:
        try:
            for now in steps:
                barrier.wait()
                sched.run_once(now)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(sc,)) for sc in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for sc in schedulers:
        sc.close()
    assert not errors
    jobs = _jobs(repo, "report")
    keys = [str(j["idempotency_key"]) for j in jobs]
    assert len(keys) == len(set(keys)) == 119  # slots 12:05 .. 21:55 (the first look registers)
    assert sum(sc.enqueued for sc in schedulers) == 119
    assert f"periodic:report:{(T0 + timedelta(minutes=4, seconds=30)).isoformat()}" in keys
    expected = {f"periodic:report:{(datetime(2026, 1, 5, 12, 5, tzinfo=timezone.utc) + timedelta(minutes=5 * i)).isoformat()}"
                for i in range(119)}
    assert set(keys) == expected


def test_missed_slots_catch_up_is_bounded(dsn: str, schema: str, repo: Repository) -> None:
    one = Schedule("* * * * *", name="minutely", task="m")
    three = Schedule("* * * * *", name="minutely3", task="m3", catch_up=3)
    with Scheduler([one, three], dsn=dsn, schema=schema) as sched:
        _outage(sched, repo)


def _outage(sched: Scheduler, repo: Repository) -> None:
    sched.run_once(T0)  # registers both at T0
    sched.run_once(T0 + timedelta(hours=2))  # a two-hour outage: 120 slots missed
    assert [j["idempotency_key"] for j in _jobs(repo, "m")] == [
        f"periodic:minutely:{datetime(2026, 1, 5, 14, 0, tzinfo=timezone.utc).isoformat()}"]
    assert len(_jobs(repo, "m3")) == 3
    rows = repo.periodic_get(["minutely", "minutely3"])
    assert rows["minutely"]["skipped_total"] == 119 and rows["minutely3"]["skipped_total"] == 117
    assert sched.skipped == 236
    sched.run_once(T0 + timedelta(hours=2, seconds=10))  # nothing new is due
    assert len(_jobs(repo, "m")) == 1


def test_named_time_zone_and_dst(dsn: str, schema: str, repo: Repository) -> None:
    s = Schedule("0 9 * * *", name="berlin", task="b", timezone="Europe/Berlin")
    with Scheduler([s], dsn=dsn, schema=schema) as sched:
        sched.run_once(datetime(2026, 3, 27, 0, 0, tzinfo=timezone.utc))
        sched.run_once(datetime(2026, 3, 27, 8, 0, tzinfo=timezone.utc))  # 09:00 CET = 08:00 UTC
        sched.run_once(datetime(2026, 3, 30, 7, 0, tzinfo=timezone.utc))  # 09:00 CEST = 07:00 UTC
    keys = sorted(str(j["idempotency_key"]) for j in _jobs(repo, "b"))
    assert keys == ["periodic:berlin:2026-03-27T08:00:00+00:00", "periodic:berlin:2026-03-30T07:00:00+00:00"]
    # catch_up 1: the 28th and 29th were skipped while nobody looked
    assert repo.periodic_get(["berlin"])["berlin"]["skipped_total"] == 2


def test_a_new_schedule_does_not_backfill(dsn: str, schema: str, repo: Repository) -> None:
    with Scheduler([Schedule("* * * * *", name="fresh", task="f")], dsn=dsn, schema=schema) as sched:
        assert sched.run_once(T0) == []
        assert len(sched.run_once(T0 + timedelta(seconds=30))) == 1  # 12:01:00


def test_app_periodic_declares_task_and_schedule() -> None:
    app = App()

    @app.periodic("*/5 * * * *", name="cleanup", payload={"older_than": 3600}, timeout=30)
    def cleanup(ctx: object) -> None:
        return None

    assert app.schedules[0].task == "cleanup" and app.tasks["cleanup"].timeout == 30
    assert app.schedules[0].payload == {"older_than": 3600}
    for bad in ("61 * * * *", "every minute", ""):
        with pytest.raises(ConfigError, match="invalid cron"):
            app.periodic(bad, name=f"x{len(bad)}")
    with pytest.raises(ConfigError, match="time zone"):
        app.periodic("* * * * *", name="tz", timezone="Mars/Olympus")
    with pytest.raises(ConfigError, match="declared twice"):
        app.periodic("* * * * *", name="cleanup")
    with pytest.raises(ConfigError, match="catch_up"):
        app.periodic("* * * * *", name="c", catch_up=0)
