"""The fair claim against a real PostgreSQL (issue 38, items 3 and 5): round-robin over flow keys
by weight with priorities on top, jobs without a key as one key, a cursor that carries over
between claims, and rate-limit buckets consumed in the claim by the database clock, across
queues and concurrent claimers. A queue without keys or rate limits keeps the one-statement claim.

Rate limits and jobs' limits are set with plain SQL here, so this file tests the claim alone."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from tenure.core.db import Connection, connect
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.integration


def _keys(jobs: list) -> list[str | None]:  # type: ignore[type-arg]
    return [j.flow_key for j in jobs]


def _rate(conn: Connection, schema: str, name: str, per_second: float, burst: int, per_key: bool = False) -> None:
    conn.execute(f'INSERT INTO "{schema}".rate_limits (name, per_second, burst, per_key) VALUES (%s, %s, %s, %s)',
                 (name, per_second, burst, per_key))


def _name_limit(conn: Connection, schema: str, limit: str, units: int = 1, queue: str = "default") -> None:
    conn.execute(f'UPDATE "{schema}".jobs SET rate_limit = %s, rate_units = %s WHERE queue_name = %s',
                 (limit, units, queue))


def _weight(conn: Connection, schema: str, key: str, weight: float, queue: str = "default") -> None:
    conn.execute(f'INSERT INTO "{schema}".flow_keys (queue_name, flow_key, weight) VALUES (%s, %s, %s)',
                 (queue, key, weight))


def test_keys_take_turns_whatever_the_order_of_arrival(repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t", flow_key="hot") for _ in range(50)]
                      + [JobSpec("t", flow_key=k) for k in ("a", "b", "c") for _ in range(5)])
    assert Counter(_keys(repo.claim("w", ["default"], 8, 30))) == {"hot": 2, "a": 2, "b": 2, "c": 2}
    # One job a claim: the cursor carries over, so each claim serves the next key in the ring.
    assert [_keys(repo.claim("w", ["default"], 1, 30))[0] for _ in range(6)] == ["a", "b", "c", "hot", "a", "b"]


def test_jobs_without_a_key_are_one_key_and_fifo_holds_within_a_key(repo: Repository) -> None:
    ids = [repo.enqueue("t", flow_key="hot").id for _ in range(10)]
    repo.enqueue_many([JobSpec("t") for _ in range(10)])
    got = repo.claim("w", ["default"], 6, 30)
    assert Counter(_keys(got)) == {None: 3, "hot": 3}
    assert [j.id for j in got if j.flow_key == "hot"] == ids[:3]


def test_a_weight_is_a_share_of_each_round(repo: Repository, conn: Connection, schema: str) -> None:
    repo.enqueue_many([JobSpec("t", flow_key=k) for k in ("a", "b", "heavy", "light") for _ in range(40)])
    _weight(conn, schema, "heavy", 3)
    _weight(conn, schema, "light", 0.5)
    taken: Counter[str | None] = Counter()
    for _ in range(12):
        taken.update(_keys(repo.claim("w", ["default"], 6, 30)))
    # 72 jobs in rounds of a 1, b 1, heavy 3, light 1/2 (give or take the round a claim ends in).
    assert sum(taken.values()) == 72 and abs(taken["a"] - taken["b"]) <= 1, taken
    assert abs(taken["heavy"] - 3 * taken["a"]) <= 3 and abs(2 * taken["light"] - taken["a"]) <= 2, taken


def test_priority_comes_before_fairness_and_aged_jobs_before_priority(repo: Repository, conn: Connection,
                                                                      schema: str) -> None:
    repo.enqueue_many([JobSpec("t", flow_key="a") for _ in range(5)] + [JobSpec("t", flow_key="b") for _ in range(5)])
    urgent = repo.enqueue("t", flow_key="b", priority=10).id
    assert [j.id for j in repo.claim("w", ["default"], 1, 30)] == [urgent]
    old = repo.enqueue("t", flow_key="c", priority=-5).id
    conn.execute(f"UPDATE \"{schema}\".jobs SET available_at = now() - interval '1 hour' WHERE id = %s", (old,))
    assert [j.id for j in repo.claim("w", ["default"], 1, 30, aging=600)] == [old]


def test_a_queue_without_keys_or_limits_keeps_the_one_statement_claim(repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(5)])
    assert len(repo.claim("w", ["default"], 3, 30)) == 3
    assert not repo._claim_gated  # noqa: SLF001 - the hot statement claimed, no gate was needed
    repo.enqueue("t", flow_key="k")
    assert len(repo.claim("w", ["default"], 3, 30)) == 3  # the marker sent it gated: two unkeyed + the key
    assert repo._claim_gated  # noqa: SLF001


def test_a_rate_limit_is_a_bucket_the_claim_spends(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "api", per_second=0.5, burst=3)
    repo.enqueue_many([JobSpec("t", flow_key=k) for k in ("a", "b") for _ in range(5)])
    _name_limit(conn, schema, "api")
    assert len(repo.claim("w", ["default"], 10, 30)) == 3  # the burst
    assert repo.rate_wait is not None and 0 < repo.rate_wait <= 2.01  # one token at 0.5/s
    assert repo.claim("w", ["default"], 10, 30) == []
    bucket = conn.execute(f'SELECT tokens FROM "{schema}".rate_buckets WHERE limit_name = %s', ("api",)).fetchone()
    assert bucket is not None and bucket["tokens"] < 1  # type: ignore[call-overload]
    # A job that needs more units than are left waits; one that needs none of the limit goes.
    repo.enqueue("t", flow_key="free")
    assert _keys(repo.claim("w", ["default"], 10, 30)) == ["free"]


def test_units_and_per_key_buckets(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "big", per_second=0.01, burst=5)
    _rate(conn, schema, "each", per_second=0.01, burst=2, per_key=True)
    repo.enqueue_many([JobSpec("t", queue="units") for _ in range(4)])
    _name_limit(conn, schema, "big", units=2, queue="units")
    assert len(repo.claim("w", ["units"], 10, 30)) == 2  # 2 + 2 of 5 tokens; the third needs 2, 1 left
    repo.enqueue_many([JobSpec("t", flow_key=k) for k in ("a", "b", "c") for _ in range(4)])
    _name_limit(conn, schema, "each")
    assert Counter(_keys(repo.claim("w", ["default"], 20, 30))) == {"a": 2, "b": 2, "c": 2}


def test_a_paused_bucket_holds_every_job_that_spends_it(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "api", per_second=100, burst=100)
    conn.execute(f"INSERT INTO \"{schema}\".rate_buckets (limit_name, tokens, paused_until) "
                 "VALUES ('api', 100, now() + interval '1 minute')")
    repo.enqueue_many([JobSpec("t") for _ in range(3)])
    _name_limit(conn, schema, "api")
    assert repo.claim("w", ["default"], 10, 30) == []
    assert repo.rate_wait is not None and 59 < repo.rate_wait <= 60.1


def test_a_shared_bucket_is_never_overspent_by_racing_claimers_of_two_queues(dsn: str, conn: Connection,
                                                                              schema: str, repo: Repository) -> None:
    _rate(conn, schema, "shared", per_second=0.001, burst=25)
    repo.enqueue_many([JobSpec("t", queue=q, flow_key=f"k{i % 7}") for q in ("q1", "q2") for i in range(60)])
    conn.execute(f"UPDATE \"{schema}\".jobs SET rate_limit = 'shared'")
    got: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        with connect(dsn) as c:
            r = Repository(c, schema)
            for _ in range(15):
                jobs = r.claim(f"w{n}", ["q1", "q2"] if n % 2 else ["q2", "q1"], 3, 30)
                with lock:
                    got.extend(j.id for j in jobs)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(set(got)) == 25


def test_a_weight_alone_sends_the_queue_gated_and_its_unkeyed_jobs_are_still_claimed(
        repo: Repository, conn: Connection, schema: str) -> None:
    _weight(conn, schema, "vip", 2, queue="w")  # no control row for queue w, no keyed job yet
    repo.enqueue_many([JobSpec("t", queue="w") for _ in range(3)])
    assert len(repo.claim("w1", ["w"], 10, 30)) == 3
    assert len(repo.claim("w1", ["w"], 10, 30)) == 0


def test_a_job_needing_more_than_a_lowered_burst_takes_a_full_bucket(repo: Repository, conn: Connection,
                                                                     schema: str) -> None:
    _rate(conn, schema, "api", per_second=0.001, burst=4)
    repo.enqueue_many([JobSpec("t") for _ in range(2)])
    _name_limit(conn, schema, "api", units=4)
    conn.execute(f"UPDATE \"{schema}\".rate_limits SET burst = 2 WHERE name = 'api'")
    assert len(repo.claim("w", ["default"], 10, 30)) == 1  # not stuck for good: it spends the whole bucket
    assert repo.claim("w", ["default"], 10, 30) == []


def test_scarce_tokens_still_go_round_the_keys(repo: Repository, conn: Connection, schema: str) -> None:
    """One token a claim: a key its bucket held back keeps its turn, so the first key in the ring
    does not take every token (an Oban per-account rate limit starved every other account)."""
    _rate(conn, schema, "api", per_second=0.001, burst=1)
    repo.enqueue_many([JobSpec("t", flow_key="a") for _ in range(9)] + [JobSpec("t", flow_key=k) for k in "bc"
                                                                         for _ in range(3)])
    _name_limit(conn, schema, "api")
    order = []
    for _ in range(6):
        order += _keys(repo.claim("w", ["default"], 10, 30))
        conn.execute(f"UPDATE \"{schema}\".rate_buckets SET tokens = 1, refilled_at = now()")
    assert order == ["a", "b", "c", "a", "b", "c"]
    # The same in the aged lane, where the oldest key would otherwise come first every time.
    conn.execute(f"UPDATE \"{schema}\".jobs SET available_at = now() - interval '1 hour' + id * interval '1 ms'")
    order = []
    for _ in range(3):
        order += _keys(repo.claim("w", ["default"], 10, 30, aging=60))
        conn.execute(f"UPDATE \"{schema}\".rate_buckets SET tokens = 1, refilled_at = now()")
    assert order == ["a", "b", "c"]
