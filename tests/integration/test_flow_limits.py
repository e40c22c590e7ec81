"""Flow keys and per-key running limits against a real PostgreSQL (issue 38, items 1 and 2):
the claim never takes a job whose key has its limit running, across claimers; a running job
holds its key's slot until its lease ends (completion, failure, release, the reaper); a late
completion frees nothing; keys show in the job and the status; bad input changes nothing."""

from __future__ import annotations

from collections import Counter

import pytest

from support.claimers import race_claimers
from tenure import flow
from tenure.core.db import Connection, connect
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import JobSpec, Repository
from tenure.reaper.reaper import Reaper, ReaperConfig

pytestmark = pytest.mark.integration


def _running_by_key(conn: Connection, schema: str) -> Counter[str | None]:
    rows = conn.execute(f"SELECT flow_key FROM \"{schema}\".jobs WHERE status = 'running'").fetchall()
    return Counter(r["flow_key"] for r in rows)  # type: ignore[call-overload]


def test_a_flow_key_is_stored_claimed_and_validated(repo: Repository) -> None:
    job = repo.enqueue("t", flow_key="tenant:acme").id
    repo.enqueue_many([JobSpec("t", flow_key="tenant:b"), JobSpec("t")])
    assert (repo.get_job(job) or {})["flow_key"] == "tenant:acme"
    jobs = repo.claim("w", ["default"], 10, 30)
    assert sorted((j.flow_key for j in jobs), key=str) == [None, "tenant:acme", "tenant:b"]
    repo.complete_many("w", [(j.id, j.lock_token) for j in jobs])
    assert (repo.get_job(job) or {})["flow_key"] == "tenant:acme"  # kept in job_history
    for bad in ("", " ", "x" * 201, "é" * 101, "a\x00b"):
        with pytest.raises(JobSpecError, match="flow key"):
            repo.enqueue("t", flow_key=bad)
        with pytest.raises(JobSpecError, match="flow key"):
            repo.enqueue_many([JobSpec("t"), JobSpec("t", flow_key=bad)])
    assert repo.enqueue("t", flow_key="é" * 100).created  # 200 bytes: the most there is
    assert len(repo.job_list()) == 4


def test_per_key_limit_caps_each_key_and_leaves_others_and_unkeyed_alone(repo: Repository, conn: Connection,
                                                                        schema: str) -> None:
    # A hot key first in line, then two other keys and unkeyed jobs behind it.
    repo.enqueue_many([JobSpec("t", flow_key="hot") for _ in range(30)]
                      + [JobSpec("t", flow_key=k) for k in ("a", "b") for _ in range(3)]
                      + [JobSpec("t") for _ in range(2)])
    flow.set_per_key_running(conn, "default", 2, schema=schema)
    first = repo.claim("w1", ["default"], 50, 30)
    assert Counter(j.flow_key for j in first) == {"hot": 2, "a": 2, "b": 2, None: 2}
    assert repo.claim("w2", ["default"], 50, 30) == []  # every key at its limit, unkeyed drained
    hot = [j for j in first if j.flow_key == "hot"]
    repo.complete_many("w1", [(hot[0].id, hot[0].lock_token)])
    again = repo.claim("w2", ["default"], 50, 30)
    assert [j.flow_key for j in again] == ["hot"]  # one slot freed, one taken
    # One key's own limit overrides the queue's; 0 removes it again.
    flow.set_key_running(conn, "default", "hot", 4, schema=schema)
    assert Counter(j.flow_key for j in repo.claim("w2", ["default"], 50, 30)) == {"hot": 2}
    flow.set_key_running(conn, "default", "hot", 0, schema=schema)
    flow.set_per_key_running(conn, "default", 0, schema=schema)
    rest = repo.claim("w3", ["default"], 50, 30)
    assert Counter(j.flow_key for j in rest) == {"hot": 25, "a": 1, "b": 1}


def test_a_long_run_of_one_key_at_the_head_does_not_cut_a_claim_short(repo: Repository, conn: Connection,
                                                                     schema: str) -> None:
    """The first pass locks 4x the room of candidates, all of the hot key, and keeps one; the
    claim passes again in its transaction, where the hot key is full, and takes the others."""
    repo.enqueue_many([JobSpec("t", flow_key="hot") for _ in range(60)]
                      + [JobSpec("t", flow_key=f"k{i}") for i in range(5) for _ in range(2)])
    flow.set_per_key_running(conn, "default", 1, schema=schema)
    got = repo.claim("w", ["default"], 10, 30)
    assert Counter(j.flow_key for j in got) == {"hot": 1, "k0": 1, "k1": 1, "k2": 1, "k3": 1, "k4": 1}


def test_a_key_limit_alone_gates_the_queue(repo: Repository, conn: Connection, schema: str) -> None:
    """A limit for one key only (no per-key default) gates claims of the queue too."""
    repo.enqueue_many([JobSpec("t", flow_key="k") for _ in range(5)] + [JobSpec("t", flow_key="other")
                                                                          for _ in range(5)])
    assert len(repo.claim("w", ["default"], 1, 30)) == 1  # ungated before the limit: hot path
    flow.set_key_running(conn, "default", "k", 2, schema=schema)
    got = Counter(j.flow_key for j in repo.claim("w", ["default"], 50, 30))
    assert got == {"k": 1, "other": 5}
    assert _running_by_key(conn, schema)["k"] == 2


def test_a_slot_is_held_until_the_lease_ends_and_a_late_completion_frees_nothing(
        repo: Repository, conn: Connection, dsn: str, schema: str) -> None:
    repo.enqueue_many([JobSpec("t", flow_key="k") for _ in range(4)])
    flow.set_per_key_running(conn, "default", 1, schema=schema)
    (frozen,) = repo.claim("w1", ["default"], 10, 30)
    assert repo.claim("w2", ["default"], 10, 30) == []
    # The frozen worker's lease ends: the reaper's path puts the job back (as after expiry).
    conn.execute(f'UPDATE "{schema}".jobs SET lease_expires_at = now() - interval \'1 s\' WHERE id = %s',
                 (frozen.id,))
    assert repo.claim("w2", ["default"], 10, 30) == []  # expired but not reaped: the slot is still held
    assert [r.id for r in Reaper(ReaperConfig(grace=0.0), dsn=dsn, schema=schema).run_once(repo)] == [frozen.id]
    (second,) = repo.claim("w2", ["default"], 10, 30)
    # The frozen worker wakes and completes late: refused, and the key's slot stays taken.
    assert repo.complete_many("w1", [(frozen.id, frozen.lock_token)]) == {frozen.id: False}
    assert _running_by_key(conn, schema)["k"] == 1
    assert repo.claim("w3", ["default"], 10, 30) == []
    repo.complete_many("w2", [(second.id, second.lock_token)])
    assert len(repo.claim("w3", ["default"], 10, 30)) == 1


def test_per_key_limit_holds_under_concurrent_claimers(dsn: str, schema: str) -> None:
    """6 claimers race for 20 keys limited to 2 each: no key ever has more than 2 running."""
    with connect(dsn) as conn:
        Repository(conn, schema).enqueue_many([JobSpec("t", flow_key=f"k{i % 20}") for i in range(600)])
        flow.set_per_key_running(conn, "default", 2, schema=schema)
    peaks = race_claimers(dsn, schema, claimers=6, batch=15, total=600, sample_sql=(
        f"SELECT max(n) AS n FROM (SELECT count(*) AS n FROM \"{schema}\".jobs "
        "WHERE status = 'running' AND flow_key IS NOT NULL GROUP BY flow_key) k"))
    assert peaks and max(peaks) <= 2
    assert max(peaks) == 2  # the limit was reached, so it is what held the counts down


def test_status_counts_blocked_jobs_and_changes_are_recorded(repo: Repository, conn: Connection,
                                                            schema: str) -> None:
    repo.enqueue_many([JobSpec("t", flow_key="hot") for _ in range(10)] + [JobSpec("t", flow_key="cold")])
    flow.set_per_key_running(conn, "default", 3, schema=schema, requested_by="alice")
    flow.set_key_running(conn, "default", "cold", 5, schema=schema, requested_by="bob")
    repo.claim("w", ["default"], 50, 30)
    (queue,) = flow.flow_status(conn, schema=schema)
    keys = {k["flow_key"]: k for k in queue.keys}
    assert (keys["hot"]["running"], keys["hot"]["running_limit"], keys["hot"]["ready"], keys["hot"]["blocked"]) \
        == (3, 3, 7, 7)
    assert (keys["cold"]["running"], keys["cold"]["running_limit"], keys["cold"]["own_limit"],
            keys["cold"]["blocked"]) == (1, 5, True, 0)
    assert queue.keys_total == 2 and queue.blocked == 7 and queue.per_key_running == 3
    assert repo.flow_key_limits("default") == {"cold": 5}  # the operator's read: own limits only
    (busiest,) = flow.flow_status(conn, schema=schema, keys=1)  # totals count every key, not those shown
    assert [k["flow_key"] for k in busiest.keys] == ["hot"] and (busiest.keys_total, busiest.blocked) == (2, 7)
    changes = flow.flow_changes(conn, schema=schema)
    assert [(c["changed_by"], c["flow_key"], c["setting"], c["old_value"], c["new_value"]) for c in changes] == [
        ("bob", "cold", "running", None, "5"), ("alice", None, "per_key_running", None, "3")]


def test_bad_limits_are_refused_and_change_nothing(conn: Connection, schema: str) -> None:
    for bad in (-1, 1.5, True, "3", 10**7):
        with pytest.raises(ConfigError):
            flow.set_per_key_running(conn, "default", bad, schema=schema)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            flow.set_key_running(conn, "default", "k", bad, schema=schema)  # type: ignore[arg-type]
    for key in ("", "x" * 201):
        with pytest.raises(ConfigError, match="flow key"):
            flow.set_key_running(conn, "default", key, 1, schema=schema)
    assert flow.flow_status(conn, schema=schema) == [] and flow.flow_changes(conn, schema=schema) == []
