"""The fair claim against its reference model (issue 38): seeded random small queues are written
to PostgreSQL, claimed several times in a row through ``Repository.claim`` (flow_claim), and each
claim must take the jobs that tests/support/flow_model.py takes, in the same order, and leave the
same cursor, deficits and buckets.

Time is kept out: ready jobs became available 10 to 40 s ago, scheduled ones are an hour away,
aged ones (when the case ages at all) 6000 s or more ago against an aging bound of 5000 s, and
rate limits refill at a millionth of a token a second. Rate limits, weights, deficits, cursors and
per-key limits are written with plain SQL, so this file tests the claim alone. One queue and one
rate limit per case, in the test's fresh schema."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from support import flow_model as fm
from tenure.core.db import Connection
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.integration

CASES = 120
GHOST = "zz"
"""A weighted key without jobs in every case: it sends the queue through flow_claim even when
only unkeyed jobs are left (a queue without flow settings is claimed by another statement)."""


def _random_state(rng: random.Random, case: int) -> fm.QueueState:
    """A small queue: 1-6 keys and unkeyed jobs, 0-30 jobs (ids 0..n-1, replaced once written)."""
    keys = [f"k{i}" for i in range(rng.randint(1, 6))]
    aging = rng.choice([1e9, 5000.0])
    limits: dict[str, fm.RateLimit] = {}
    name = f"r{case}"
    if rng.random() < 0.5:
        limits[name] = fm.RateLimit(burst=rng.randint(1, 6), per_key=rng.random() < 0.5)
    jobs = []
    for n in range(rng.randint(0, 30)):
        r = rng.random()
        age = -3600.0 if r < 0.1 else 6000.0 + 1000 * rng.randint(0, 2) if r < 0.3 and aging < 1e6 else (
            float(rng.choice([10, 20, 30, 40])))
        rate, units = None, 1
        if limits and rng.random() < 0.6:
            rate, units = name, rng.randint(1, min(3, limits[name].burst))
        elif rng.random() < 0.05:
            rate = f"gone{case}"  # a limit deleted since: it limits nothing
        jobs.append(fm.Job(n, rng.choice([*keys, None]), rng.choice([-1, 0, 1]), age, rate, units))
    weights = {k: rng.choice([0.5, 2.0, 3.0]) for k in keys if rng.random() < 0.5}
    buckets = {}
    if limits and rng.random() < 0.4:
        bucket_key = rng.choice(["", *keys]) if limits[name].per_key else ""
        buckets[(name, bucket_key)] = fm.Bucket(float(rng.randint(0, limits[name].burst + 2)), rng.random() < 0.3)
    return fm.QueueState(
        jobs=tuple(jobs), aging=aging, rate_limits=limits, buckets=buckets,
        key_running={k: rng.randint(1, 3) for k in keys if rng.random() < 0.3},
        running={k: rng.randint(1, 2) for k in keys if rng.random() < 0.3}, running_unkeyed=rng.randint(0, 1),
        weights={**weights, GHOST: 2.0},
        deficits={k: d for k, w in weights.items() if rng.random() < 0.4 and (d := rng.choice([0.0, 0.5, 1.0])) <= w},
        per_key_running=rng.choice([None, None, 1, 2, 3]), max_running=rng.choice([None, None, None, 5, 10]),
        cursor=rng.choice([None, "", *keys, "k25", "k9"]))


def _write(conn: Connection, schema: str, queue: str, state: fm.QueueState) -> fm.QueueState:
    """Write ``state`` as queue ``queue``; the state again, with the jobs' real ids."""
    Repository(conn, schema).enqueue_many(
        [JobSpec("t", {"n": j.id}, queue=queue, flow_key=j.key, priority=j.priority) for j in state.jobs])
    rows = conn.execute(f"SELECT id, (payload->>'n')::int AS n FROM \"{schema}\".jobs WHERE queue_name = %s",
                        (queue,)).fetchall()
    real = {int(str(r["n"])): int(str(r["id"])) for r in rows}
    jobs = tuple(replace(j, id=real[j.id]) for j in state.jobs)
    conn.execute(f'UPDATE "{schema}".jobs j SET available_at = now() - make_interval(secs => u.age), '
                 "rate_limit = u.rate, rate_units = u.units "
                 "FROM unnest(%s::bigint[], %s::float8[], %s::text[], %s::int[]) AS u(id, age, rate, units) "
                 "WHERE j.id = u.id",
                 ([j.id for j in jobs], [float(j.age) for j in jobs], [j.rate_limit for j in jobs],
                  [j.units for j in jobs]))
    running = [k for k, n in sorted(state.running.items()) for _ in range(n)] + [None] * state.running_unkeyed
    conn.execute(f'INSERT INTO "{schema}".jobs (queue_name, task, flow_key, status, attempt_count, locked_by, '
                 "lock_token, lease_expires_at) SELECT %s, 't', k, 'running', 1, 'elsewhere', gen_random_uuid(), "
                 "now() + interval '1 hour' FROM unnest(%s::text[]) AS k", (queue, running))
    conn.execute(f'INSERT INTO "{schema}".queues (name, per_key_running, max_running, flow_cursor) '
                 "VALUES (%s, %s, %s, %s)", (queue, state.per_key_running, state.max_running, state.cursor))
    for key in sorted(set(state.key_running) | set(state.weights)):
        conn.execute(f'INSERT INTO "{schema}".flow_keys (queue_name, flow_key, running, weight, deficit) '
                     "VALUES (%s, %s, %s, %s, %s)", (queue, key, state.key_running.get(key),
                                                     state.weights.get(key, 1.0), state.deficits.get(key, 0.0)))
    for name, limit in state.rate_limits.items():
        conn.execute(f'INSERT INTO "{schema}".rate_limits (name, per_second, burst, per_key) VALUES (%s, 1e-6, %s, %s)',
                     (name, limit.burst, limit.per_key))
    for (name, key), bucket in state.buckets.items():
        conn.execute(f'INSERT INTO "{schema}".rate_buckets (limit_name, flow_key, tokens, paused_until) VALUES '
                     "(%s, %s, %s, CASE WHEN %s THEN now() + interval '1 hour' END)", (name, key, bucket.tokens,
                                                                                        bucket.paused))
    return replace(state, jobs=jobs)


def _read(conn: Connection, schema: str, queue: str, limits: list[str]) -> dict[str, Any]:
    """The cursor, deficits and buckets the claims left in the database."""
    row = conn.execute(f'SELECT flow_cursor FROM "{schema}".queues WHERE name = %s', (queue,)).fetchone()
    keys = conn.execute(f'SELECT flow_key, deficit FROM "{schema}".flow_keys WHERE queue_name = %s',
                        (queue,)).fetchall()
    buckets = conn.execute(f'SELECT limit_name, flow_key, tokens, coalesce(paused_until > now(), false) AS paused '
                           f'FROM "{schema}".rate_buckets WHERE limit_name = ANY(%s)', (limits,)).fetchall()
    return {"cursor": row["flow_cursor"] if row else None,
            "deficits": {r["flow_key"]: r["deficit"] for r in keys},
            "buckets": {(r["limit_name"], r["flow_key"]): (r["tokens"], r["paused"]) for r in buckets}}


def _check(db: dict[str, Any], done: fm.Claim, why: str) -> None:
    assert db["cursor"] == done.cursor, why
    for key, deficit in db["deficits"].items():
        assert deficit == pytest.approx(done.deficits.get(key, 0.0)), f"deficit of {key}: {why}"
    assert set(db["buckets"]) == set(done.buckets), why
    for bid, (tokens, paused) in db["buckets"].items():
        assert tokens == pytest.approx(done.buckets[bid].tokens, abs=1e-3), f"tokens of bucket {bid}: {why}"
        assert paused == done.buckets[bid].paused, f"bucket {bid}: {why}"


def _complete(state: fm.QueueState, ids: set[int], key_of: dict[int, str | None]) -> fm.QueueState:
    running = dict(state.running)
    unkeyed = state.running_unkeyed
    for jid in ids:
        key = key_of[jid]
        if key is None:
            unkeyed -= 1
        else:
            running[key] -= 1
    return replace(state, running=running, running_unkeyed=unkeyed)


def _claim_in_step(conn: Connection, schema: str, queue: str, state: fm.QueueState, wants: list[int],
                   rng: random.Random, label: str) -> None:
    """Claim ``wants`` in turn through the repository and the model; between claims, complete a
    random few of the running jobs in both."""
    repo = Repository(conn, schema)
    key_of = {j.id: j.key for j in state.jobs}
    held: dict[int, Any] = {}
    for step, want in enumerate(wants):
        why = f"{label}, claim {step + 1} of {wants}, want {want}, before it: {state!r}"
        done = fm.claim(state, want)
        got = repo.claim("w", [queue], want, 30, aging=state.aging)
        assert [j.id for j in got] == list(done.ids), why
        assert (repo.rate_wait is not None) == done.held, why
        _check(_read(conn, schema, queue, sorted(state.rate_limits)), done, why)
        state = fm.after(state, done)
        held.update((j.id, j.lock_token) for j in got)
        finished = {jid for jid in sorted(held) if rng.random() < 0.5}
        if finished:
            repo.complete_many("w", [(jid, held.pop(jid)) for jid in sorted(finished)])
            state = _complete(state, finished, key_of)


def test_random_queues_are_claimed_as_the_model_claims(conn: Connection, schema: str) -> None:
    for case in range(CASES):
        rng = random.Random(case)
        queue = f"q{case}"
        state = _write(conn, schema, queue, _random_state(rng, case))
        wants = [rng.randint(1, 7) for _ in range(rng.randint(2, 5))]
        _claim_in_step(conn, schema, queue, state, wants, rng, f"case {case} (random.Random({case}))")


def _known_cases() -> dict[str, tuple[fm.QueueState, list[int]]]:
    """Hand-written states, the odd corners of the SQL among them (see the docstrings of
    tests/unit/test_flow_schedule.py's xfail tests)."""
    J = fm.Job
    return {
        "weights 3 and 0.5 over two rounds": (fm.QueueState(
            jobs=tuple(J(n, k) for n, k in enumerate(["a"] * 6 + ["h"] * 9 + ["l"] * 4)),
            weights={"h": 3.0, "l": 0.5}), [5, 5, 5]),
        "a key of weight 0.25 takes nothing, and holds back every lower level": (fm.QueueState(
            jobs=(J(0, "x", 1), J(1, "z", 0), J(2, "z", 0)), weights={"x": 0.25}), [5, 5]),
        "two 0.5 keys out of step spend the budget on one level": (fm.QueueState(
            jobs=(J(0, "x", 1), J(1, "y", 1), J(2, "z", 0)), weights={"x": 0.5, "y": 0.5},
            deficits={"y": 0.5}), [5]),
        "a 0.5 key at its running limit banks its weight": (fm.QueueState(
            jobs=(J(0, "x"), J(1, "x"), J(2, "y")), weights={"x": 0.5}, key_running={"x": 1},
            running={"x": 1}), [3]),
        "a weight of 3 is one job a round when each claim takes one": (fm.QueueState(
            jobs=tuple(J(n, k) for n, k in enumerate(["a"] * 6 + ["h"] * 6)), weights={"h": 3.0}), [1] * 8),
        "72 keys scheduled ahead hold back a ready key claim after claim": (fm.QueueState(
            jobs=(*(J(n, f"f{n:02}", 0, -3600) for n in range(72)), J(100, "zz"), J(101, "zz", -1))), [1, 1]),
        "72 keys at their running limit hold back the key after them": (fm.QueueState(
            jobs=(*(J(n, f"f{n:02}") for n in range(72)), J(100, "zz")), per_key_running=1,
            running={f"f{n:02}": 1 for n in range(72)}), [1, 1]),
        "the aged lane, one per key, then the levels": (fm.QueueState(
            jobs=(J(0, "a", -1, 9000), J(1, "a", -1, 8000), J(2, "b", 1, 7000), J(3, None, 0, 7000),
                  J(4, "b", 1, 10), J(5, None, 0, 10), J(6, "c", 0, -3600)), aging=5000, weights={GHOST: 2.0}),
            [3, 3]),
    }


@pytest.mark.parametrize("name", list(_known_cases()))
def test_known_states_are_claimed_as_the_model_claims(conn: Connection, schema: str, name: str) -> None:
    state, wants = _known_cases()[name]
    _claim_in_step(conn, schema, "known", _write(conn, schema, "known", state), wants, random.Random(0), name)
