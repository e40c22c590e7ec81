"""The fair claim's decision (issue 38), on its reference model tests/support/flow_model.py,
rule by rule as docs/flow.md ("How the claim decides") states them: the ring from the cursor with
the jobs without a key first, FIFO within a key, weights and the deficit a visit carries, a key
alone, priority levels, the aged lane, running limits, rate buckets and their units, the cursor,
the global limit and the probe budget.
tests/integration/test_flow_claim_model.py holds the SQL (flow_claim) to the same model.

Each rule that the first versions of flow_claim broke has a test here with the state that showed
it (a weight above the claim's room, a key starved on a shared bucket, a probe budget spent on the
same keys claim after claim)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from support.flow_model import Bucket, Claim, Job, QueueState, RateLimit, after, claim, claims

J = Job


def _keys(state: QueueState, done: Claim) -> list[str | None]:
    key = {j.id: j.key for j in state.jobs}
    return [key[i] for i in done.ids]


def _jobs(*keys: str | None, priority: int = 0, start: int = 0) -> tuple[Job, ...]:
    return tuple(J(start + n, k, priority) for n, k in enumerate(keys))


def _with_tokens(state: QueueState, wants: list[int], tokens: list[float]) -> list[list[str | None]]:
    """Claims in turn, the shared bucket of limit ``r`` holding ``tokens[n]`` (round the list)
    before claim n (the refill between claims), each claim's jobs done before the next."""
    out = []
    for n, want in enumerate(wants):
        state = replace(state, buckets={("r", ""): Bucket(tokens[n % len(tokens)])})
        done = claim(state, want)
        out.append(_keys(state, done))
        state = replace(after(state, done), running={}, running_unkeyed=0)
    return out


def test_keys_take_turns_from_the_cursor_and_the_jobs_without_a_key_come_first() -> None:
    state = QueueState(jobs=_jobs(*"aaabbbccc", None, None))
    done, _ = claims(state, [4, 4, 2, 1])
    assert [_keys(state, d) for d in done] == [[None, "a", "b", "c"], [None, "a", "b", "c"], ["a", "b"], ["c"]]
    assert [d.cursor for d in done] == ["c", "c", "b", "c"]
    # From a saved cursor: the key after it first, round the ring.
    assert _keys(state, claim(QueueState(jobs=state.jobs, cursor="b"), 4)) == ["c", None, "a", "b"]
    assert _keys(state, claim(QueueState(jobs=state.jobs, cursor="bb"), 1)) == ["c"]  # a key gone since


def test_within_a_key_first_in_first_out_by_available_at_then_id() -> None:
    state = QueueState(jobs=(J(1, "a", age=10), J(2, "a", age=30), J(3, "a", age=30), J(4, None, age=5),
                             J(5, None, age=50)))
    assert claim(state, 3).ids == (5, 2, 4)  # unkeyed oldest, a's oldest (lower id of a tie), unkeyed
    assert [d.ids for d in claims(state, [2, 2, 1])[0]] == [(5, 2), (4, 3), (1,)]


def test_a_visit_takes_the_weight_in_jobs_and_a_half_weight_every_second_round() -> None:
    state = QueueState(jobs=_jobs(*"a" * 30, *"h" * 30, *"l" * 30), weights={"h": 3.0, "l": 0.5})
    first = claim(state, 9)
    # Round 1: a, h h h, l banks half a job; round 2: a, h h h, l takes one.
    assert "".join(str(k) for k in _keys(state, first)) == "ahhhahhhl"
    assert first.deficits == {"h": 0.0, "l": 0.0}
    taken = Counter(k for d in claims(state, [9] * 4)[0] for k in _keys(state, d))
    assert taken == {"a": 8, "h": 24, "l": 4}  # 1 : 3 : 1/2


def test_a_visit_the_room_cut_short_is_finished_by_the_next_claim() -> None:
    state = QueueState(jobs=_jobs(*"a" * 6, *"h" * 9), weights={"h": 3.0})
    done, _ = claims(state, [2, 2, 2])
    # '' (empty), a, then h's visit of 3 cut after 1 by the room: 2 carried, the cursor before h;
    # the next claim finishes it (2 jobs), the one after starts a round again.
    assert [_keys(state, d) for d in done] == [["a", "h"], ["h", "h"], ["a", "h"]]
    assert [(d.cursor, d.deficits) for d in done] == [("a", {"h": 2.0}), ("h", {"h": 0.0}), ("a", {"h": 2.0})]
    # A stored deficit of 1 or more is the rest of a visit: the share is the deficit, not
    # weight + deficit; the second visit (3) is cut after 2, so 1 is carried.
    carried = claim(QueueState(jobs=state.jobs, weights=state.weights, deficits={"h": 2.0}, cursor="a"), 5)
    assert (_keys(state, carried), carried.cursor, carried.deficits) == (["h", "h", "a", "h", "h"], "a", {"h": 1.0})


def test_a_bucket_cuts_a_visit_short_and_the_rest_waits_for_the_next_claim() -> None:
    state = QueueState(jobs=tuple(J(n, "h", rate_limit="r") for n in range(6)), weights={"h": 3.0},
                       rate_limits={"r": RateLimit(burst=5)}, buckets={("r", ""): Bucket(1.0)})
    done = claim(state, 5)
    assert (done.ids, done.held, done.cursor, done.deficits) == ((0,), True, "", {"h": 2.0})
    again = claim(replace(after(state, done), buckets={("r", ""): Bucket(5.0)}), 5)
    # The 2 left of the visit; h was alone in that round, so its next visit takes the rest.
    assert (again.ids, again.cursor, again.deficits) == ((1, 2, 3, 4, 5), "h", {"h": 0.0})
    # A held visit keeps its share whole: it does not grow claim after claim.
    assert claim(replace(state, buckets={("r", ""): Bucket(0.0)}), 5).deficits == {"h": 3.0}


def test_a_fraction_carries_over_and_a_drained_key_starts_again_from_zero() -> None:
    state = QueueState(jobs=_jobs(*"a" * 10, *"h" * 10), weights={"h": 1.5})
    done = claim(state, 10)
    assert "".join(str(k) for k in _keys(state, done)) == "ahahhahahh"  # h: 1, 2, 1, 2
    assert done.deficits == {"h": 0.0}
    drained = claim(QueueState(jobs=_jobs("h", "x", "x"), weights={"h": 3.0}, deficits={"h": 2.0}), 3)
    assert drained.ids == (0, 1, 2) and drained.deficits == {"h": 0.0}


def test_one_key_alone_takes_the_rest_of_the_room_at_once() -> None:
    alone = QueueState(jobs=_jobs(*"h" * 10), weights={"h": 3.0})
    done = claim(alone, 5)
    # Round 1: h takes 3; it was alone, so its next visit takes the rest (2), and its deficit
    # goes back to 0 (not cut short: the cursor passes it).
    assert (len(done.ids), done.cursor, done.deficits, done.probes) == (5, "h", {"h": 0.0}, 3)
    few = QueueState(jobs=(J(0, "a"), *(J(n, "b") for n in range(1, 51))))
    many = claim(few, 20)
    assert len(many.ids) == 20 and many.probes <= 8  # a batch at a time, not a probe per job
    # Not alone when another key banked a share in the round: h's second visit is cut by the room.
    banked = QueueState(jobs=_jobs(*"h" * 10, *"x" * 10), weights={"h": 3.0, "x": 0.5})
    done = claim(banked, 5)
    assert (_keys(banked, done), done.cursor, done.deficits) == (["h"] * 5, "", {"h": 1.0, "x": 0.5})


def test_a_higher_priority_goes_first_and_a_lower_level_only_when_the_higher_ones_are_done() -> None:
    state = QueueState(jobs=(*_jobs("a", "a", priority=1), *_jobs("b", "b", None, start=10),
                             *_jobs("c", priority=-1, start=20)))
    done = claim(state, 6)
    assert done.ids == (0, 1, 10, 12, 11, 20)  # level 0 from the cursor ('', visited last): b, '', b
    # A key blocked at the top level does not hold the lower levels back.
    # The cursor moves past a, stepped over at its running limit, so level 0 starts after a: b.
    limited = QueueState(jobs=state.jobs, per_key_running=1, running={"a": 1})
    assert claim(limited, 6).ids == (10, 12, 20)


def test_the_aged_lane_takes_one_job_per_key_above_every_level() -> None:
    old = (J(1, "a", -1, age=900), J(2, "a", -1, age=800), J(3, "b", -1, age=700), J(4, None, -1, age=600))
    state = QueueState(jobs=(*old, *_jobs("c", "c", priority=1, start=10)), aging=500)
    done = claim(state, 5)
    assert done.ids[:3] == (4, 1, 3)  # in ring order from the cursor: '', a, b; a's oldest only
    assert done.ids[3:] == (10, 11)  # then the levels: priority 1 before a's second aged job
    assert claim(QueueState(jobs=state.jobs, aging=500, cursor="a"), 3).ids == (3, 4, 1)  # b, '', a


def test_a_key_at_its_running_limit_is_skipped_in_every_level() -> None:
    state = QueueState(jobs=(*_jobs("a", "a", priority=1), *_jobs("a", "b", "b", start=10)),
                       per_key_running=2, running={"a": 1, "b": 1})
    assert _keys(state, claim(state, 10)) == ["a", "b"]
    # A key's own limit wins over the queue's, either way.
    assert _keys(state, claim(replace(state, key_running={"a": 3, "b": 1}), 10)) == ["a", "a"]
    # The claim's own picks count towards the limit, the aged lane's too.
    aged = QueueState(jobs=(J(1, "a", age=900), J(2, "a", age=800), J(3, "a")), per_key_running=2, aging=500)
    assert claim(aged, 5).ids == (1, 2)


def test_a_short_bucket_holds_its_key_back_and_the_jobs_behind_in_that_key() -> None:
    limits = {"api": RateLimit(burst=3)}
    state = QueueState(jobs=(J(1, "a", rate_limit="api", units=3), J(2, "a", rate_limit="api"), J(3, "b"),
                             J(4, "c", rate_limit="api")), rate_limits=limits, buckets={("api", ""): Bucket(2.0)})
    done = claim(state, 10)
    assert done.ids == (3, 4) and done.held  # a waits for 3 tokens; its second job waits behind it
    assert done.buckets == {("api", ""): Bucket(1.0)}
    new = claim(replace(state, buckets={}), 10)  # the first claim that needs a bucket makes it full
    assert new.ids == (1, 3) and new.buckets == {("api", ""): Bucket(0.0)} and new.held


def test_units_are_spent_from_the_bucket_and_per_key_limits_have_a_bucket_per_key() -> None:
    big = QueueState(jobs=tuple(J(n, None, rate_limit="big", units=2) for n in range(4)),
                     rate_limits={"big": RateLimit(burst=5)})
    done = claim(big, 10)
    assert done.ids == (0, 1) and done.held and done.buckets == {("big", ""): Bucket(1.0)}
    each = QueueState(jobs=tuple(J(n, k, rate_limit="each") for n, k in enumerate(["a", "b", None] * 3)),
                      rate_limits={"each": RateLimit(burst=2, per_key=True)})
    got = claim(each, 20)
    assert Counter(_keys(each, got)) == {"a": 2, "b": 2, None: 2}
    assert got.buckets == {("each", k): Bucket(0.0) for k in ("a", "b", "")}


def test_a_paused_bucket_holds_back_every_job_that_spends_it_and_an_unknown_limit_none() -> None:
    state = QueueState(jobs=(J(1, "a", rate_limit="api"), J(2, "b", rate_limit="gone"), J(3, None)),
                       rate_limits={"api": RateLimit(burst=100)}, buckets={("api", ""): Bucket(100.0, paused=True)})
    done = claim(state, 10)
    assert done.ids == (3, 2) and done.held and done.buckets == state.buckets
    # A bucket holding more than a lowered burst gives the burst.
    over = QueueState(jobs=(J(1, None, rate_limit="api", units=2),), rate_limits={"api": RateLimit(burst=3)},
                      buckets={("api", ""): Bucket(10.0)})
    assert claim(over, 1).buckets == {("api", ""): Bucket(1.0)}
    # A job needing more than a lowered burst takes a full bucket.
    more = QueueState(jobs=(J(1, None, rate_limit="api", units=5),), rate_limits={"api": RateLimit(burst=3)},
                      buckets={("api", ""): Bucket(3.0)})
    assert claim(more, 1).ids == (1,) and claim(replace(more, buckets={("api", ""): Bucket(2.0)}), 1).ids == ()


def test_the_global_limit_cuts_the_room_and_a_paused_queue_gives_nothing() -> None:
    state = QueueState(jobs=_jobs(*"abcdef"), max_running=5, running={"x": 2}, running_unkeyed=1)
    assert len(claim(state, 10).ids) == 2
    assert claim(QueueState(jobs=state.jobs, max_running=3, running_unkeyed=3), 10).ids == ()
    paused = claim(QueueState(jobs=state.jobs, paused=True, cursor="b"), 10)
    assert (paused.ids, paused.cursor) == ((), "b")


def test_scheduled_jobs_are_not_claimed_and_their_keys_are_stepped_over() -> None:
    state = QueueState(jobs=(J(1, "a", age=-60), J(2, "b"), J(3, None, age=-60), J(4, "a")))
    assert claim(state, 10).ids == (4, 2)
    assert claim(QueueState(jobs=state.jobs[:3]), 10).ids == (2,)


def test_a_claim_spends_at_most_8_probes_per_job_wanted_plus_64() -> None:
    future = tuple(J(n, f"f{n:03}", age=-60) for n in range(200))
    for want in (1, 5):
        done = claim(QueueState(jobs=(*future, J(999, "zz"))), want)
        assert done.ids == () and done.probes == 8 * want + 64
    rng = random.Random(7)
    for _ in range(300):
        state = QueueState(jobs=tuple(J(n, rng.choice(["a", "b", "c", None]), rng.choice([-1, 0, 1]),
                                        rng.choice([-60, 10, 20])) for n in range(rng.randint(0, 20))),
                           weights={"a": rng.choice([0.5, 1.5, 3.0])}, per_key_running=rng.choice([None, 1, 2]))
        want = rng.randint(1, 6)
        done = claim(state, want)
        assert done.probes <= 8 * want + 64 and len(done.ids) <= want
        assert len(set(done.ids)) == len(done.ids)
        assert all(j.age >= 0 for j in state.jobs if j.id in done.ids)
        assert len(after(state, done).jobs) == len(state.jobs) - len(done.ids)
        cap = state.per_key_running or want
        assert all(n <= cap for k, n in Counter(_keys(state, done)).items() if k is not None)


def test_a_quarter_weight_takes_one_job_every_fourth_round_and_lower_levels_go_on() -> None:
    """docs/flow.md, Weights: "--weight 0.25 # 1 job every 4th turn". The deficit of a weight
    below 1 banks whole (0.25, 0.5, 0.75, 1): once it reaches one job the key takes it, and the
    level ends when no key can take more, so priority 0 comes next."""
    state = QueueState(jobs=(J(1, "x", 1), J(2, "z"), J(3, "z")), weights={"x": 0.25})
    done = claim(state, 5)
    assert (done.ids, done.deficits) == ((1, 2, 3), {"x": 0.0})
    many = QueueState(jobs=_jobs(*"a" * 20, *"x" * 20), weights={"x": 0.25})
    assert [k for d in claims(many, [1] * 10)[0] for k in _keys(many, d)] == [*"aaaax", *"aaaax"]
    assert Counter(k for d in claims(many, [5] * 4)[0] for k in _keys(many, d)) == {"a": 16, "x": 4}


def test_a_lower_level_is_reached_once_no_key_of_the_higher_ones_can_take_more() -> None:
    """docs/flow.md, step 4. Two keys of weight 0.5 whose deficits differ by a half: banking is
    progress only while the key has a job to take, so once both are drained priority 0 comes."""
    state = QueueState(jobs=(J(1, "x", 1), J(2, "y", 1), J(3, "z")), weights={"x": 0.5, "y": 0.5},
                       deficits={"y": 0.5})
    assert claim(state, 5).ids == (2, 1, 3)


def test_a_weight_of_3_takes_three_jobs_a_round_when_each_claim_takes_one() -> None:
    """docs/flow.md, step 5: "A visit that the claim's room cut short (a weight of 3 in a claim
    of one) leaves the cursor before its key, and the next claim finishes it". (A first version
    counted a visit that took the claim's whole room as over, so a weight above the room of the
    claims that reached it counted as the room: 1:1 with claims of one.)"""
    state = QueueState(jobs=_jobs(*"a" * 20, *"h" * 20), weights={"h": 3.0})
    taken = Counter(k for d in claims(state, [1] * 16)[0] for k in _keys(state, d))
    assert taken == {"a": 4, "h": 12}


def test_the_next_claim_carries_on_where_the_probe_budget_ran_out() -> None:
    """docs/flow.md, steps 7 and 9: the cursor moves past keys stepped over (all scheduled ahead,
    or at their running limit), so a run of 72 of them before a ready key costs one claim."""
    state = QueueState(jobs=(*(J(n, f"f{n:02}", age=-3600) for n in range(72)), J(100, "zz")))
    done, _ = claims(state, [1, 1])
    assert (done[0].ids, done[0].probes, done[0].cursor) == ((), 72, "f71")
    assert done[1].ids == (100,)
    limited = QueueState(jobs=(*_jobs(*(f"f{n:02}" for n in range(72))), J(100, "zz")), per_key_running=1,
                         running={f"f{n:02}": 1 for n in range(72)})
    assert [d.ids for d in claims(limited, [1, 1])[0]] == [(), (100,)]


def test_the_cursor_moves_past_keys_stepped_over_unless_a_bucket_held_a_key_before() -> None:
    """docs/flow.md, step 7: a key at its running limit, or with nothing ready, is passed; after
    a key its bucket held back, nothing moves the cursor (keys stepped over, visits that take a
    job): the held key keeps its turn."""
    stepped = QueueState(jobs=(J(1, "a"), J(2, "b", age=-60)), per_key_running=1, running={"a": 1})
    assert (claim(stepped, 3).ids, claim(stepped, 3).cursor) == ((), "b")
    limits = {"r": RateLimit(burst=1)}
    held = QueueState(jobs=(J(1, "a", rate_limit="r"), J(2, "b", age=-60), J(3, "c"), J(4, "c", age=-60)),
                      rate_limits=limits, buckets={("r", ""): Bucket(0.0)}, per_key_running=1, running={"c": 1})
    done = claim(held, 3)
    assert (done.ids, done.held, done.cursor) == ((), True, "")  # '' (before a), a held, b and c passed
    assert claim(replace(held, buckets={("r", ""): Bucket(1.0)}, cursor=done.cursor), 3).ids == (1,)
    taker = replace(held, running={})
    assert (claim(taker, 3).ids, claim(taker, 3).cursor) == ((3,), "")  # c took a job; a keeps its turn


def test_scarce_tokens_go_round_the_keys_that_share_a_bucket() -> None:
    """docs/flow.md, step 7: with one token a claim, a key its bucket held back keeps its turn,
    so the tokens go round the keys, not to the first key in the ring every time."""
    state = QueueState(jobs=tuple(J(n, k, rate_limit="r") for n, k in enumerate("abc" * 4)),
                       rate_limits={"r": RateLimit(burst=1)})
    assert _with_tokens(state, [2] * 6, [1.0]) == [["a"], ["b"], ["c"], ["a"], ["b"], ["c"]]


def test_scarce_tokens_go_round_the_keys_when_a_key_without_the_limit_takes_between() -> None:
    """docs/flow.md, step 7: "when tokens are scarce (one a claim) they still go round the keys
    rather than to the first key in the ring every time". Keys a and b share a bucket that gets
    one token a claim; c has no limit. In a claim of two, a takes the token, b is held, and c
    takes a job; b keeps its turn, so the next claim's token is b's. (A first version moved the
    cursor past b when c took a job, and b never got a token.)"""
    state = QueueState(jobs=tuple(J(n, k, rate_limit=None if k == "c" else "r") for n, k in enumerate("abc" * 6)),
                       rate_limits={"r": RateLimit(burst=1)})
    assert _with_tokens(state, [2] * 4, [1.0]) == [["a", "c"], ["b", "c"], ["a", "c"], ["b", "c"]]


def test_a_held_key_does_not_make_every_claim_spend_its_budget_on_the_same_keys() -> None:
    """docs/flow.md, steps 7 and 9: "the cursor is saved, so the next claim carries on from
    there". After a key its bucket held back, keys stepped over do not move the cursor; but a
    claim that spends its whole budget leaves it where it stopped, so 72 keys at their running
    limit after a paused key cost a claim, not every claim, and the ready key zz is reached. (A
    first version ended such a claim with the cursor where it began, every time.)"""
    state = QueueState(jobs=(J(0, "a", rate_limit="r"), *(J(n, f"f{n:02}") for n in range(1, 73)), J(100, "zz")),
                       rate_limits={"r": RateLimit(burst=1)}, buckets={("r", ""): Bucket(0.0, paused=True)},
                       per_key_running=1, running={f"f{n:02}": 1 for n in range(1, 73)})
    done, _ = claims(state, [1, 1, 1])
    assert 100 in {i for d in done for i in d.ids}


def test_the_budget_follows_the_room() -> None:
    """docs/flow.md, step 9: "at most 8x its room + 64 keys", the room after max_running."""
    state = QueueState(jobs=(*(J(n, f"f{n:03}", age=-60) for n in range(200)), J(999, "zz")), max_running=1)
    assert claim(state, 10).probes == 8 * 1 + 64


def test_a_key_at_its_running_limit_banks_nothing() -> None:
    """docs/flow.md, step 6: a key at its running limit is skipped, whatever its weight: a
    weight-0.5 key at its limit banks nothing."""
    state = QueueState(jobs=(J(1, "x"), J(2, "y")), weights={"x": 0.5}, key_running={"x": 1}, running={"x": 1})
    done = claim(state, 3)
    assert (done.ids, done.deficits.get("x", 0.0)) == ((2,), 0.0)
