"""The workflow, batch and unique-job invariants of a chaos run (issue 39) catch what they claim
to, from rows shaped like ``chaos_workflow_steps``, ``chaos_workflow_attempts``, ``chaos_batches``,
``chaos_batch_callbacks`` and ``chaos_unique_samples`` (no database): each one can fail, and a
run that behaved holds them all. Also the seeded plan of what the run enqueues (``plan_extras``)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from tenure.chaos.invariants import Verdict
from tenure.chaos.invariants_workflow import (
    WORKFLOW_INVARIANTS,
    cancelled_by_fault,
    check_callbacks,
    check_unique,
    check_workflows,
)
from tenure.chaos.producer import (
    BATCH_MAX,
    BATCH_MIN,
    DEPS_MAX,
    STEPS_MAX,
    STEPS_MIN,
    UNIQUE_BURSTS,
    Extra,
    plan_extras,
)


def step(job_id: int, status: str = "completed", *, deps: tuple[int, ...] = (), completed: float | None = None,
         released: int | None = None, ignore_failed: bool = False, reason: str | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "workflow_id": 1, "name": f"s{job_id}", "status": status,
            "ignore_failed": ignore_failed, "ignore_cancelled": False, "cancel_reason": reason,
            "released_at": None, "deps": list(deps), "resumed": 0,
            "completed_at": (float(job_id) + 0.5 if status == "completed" else None) if completed is None else completed,
            "released": (1 if deps and status != "cancelled" else 0) if released is None else released}


def starts(*pairs: tuple[int, float]) -> list[dict[str, Any]]:
    return [{"job_id": j, "started_at": t} for j, t in pairs]


def workflow_verdict(steps: list[dict[str, Any]], attempts: list[dict[str, Any]],
                     by_fault: set[int] | None = None) -> Verdict:
    v = Verdict()
    check_workflows(v, steps, attempts, by_fault=by_fault or set())
    return v


# A diamond 1 -> (2, 3) -> 4, step 5 after a failed 3 (cancelled), step 6 ignoring that failure.
GOOD_STEPS = [step(1), step(2, deps=(1,)), step(3, "failed"), step(4, deps=(2,)),
              step(5, "cancelled", deps=(3,), reason="dependency_failed"), step(6, deps=(3, 4), ignore_failed=True)]
GOOD_STARTS = starts((1, 1.0), (2, 1.6), (2, 1.9), (3, 3.0), (4, 4.0), (6, 4.6))


def test_a_workflow_that_behaved_holds_every_check_with_its_figures() -> None:
    v = workflow_verdict(GOOD_STEPS, GOOD_STARTS)
    assert v.ok, v.violations
    assert all(name in v.violations for name in WORKFLOW_INVARIANTS[:3])
    wf = v.figures["workflows"]
    assert wf["steps"] == 6 and wf["released_events"] == 3 and wf["cancelled_by"] == {"dependency_failed": 1}
    assert wf["ran_after_ignored_failure"] == 1 and wf["redelivered_steps"] == 1
    assert wf["start_after_dep_seconds"]["min"] == 0.1


def test_deps_first_fails_on_a_start_before_a_dep_completed() -> None:
    # A redelivered attempt of step 2 started before step 1 completed (1.5).
    v = workflow_verdict(GOOD_STEPS, [*GOOD_STARTS, *starts((2, 1.2))])
    assert len(v.violations["workflow_deps_first"]) == 1, v.violations
    assert "before dep s1" in v.violations["workflow_deps_first"][0]


def test_deps_first_fails_on_a_start_after_an_unignored_failed_dep() -> None:
    steps = [*GOOD_STEPS[:4], step(5, "completed", deps=(3,)), GOOD_STEPS[5]]
    v = workflow_verdict(steps, [*GOOD_STARTS, *starts((5, 5.0))])
    assert any("ended failed" in p for p in v.violations["workflow_deps_first"]), v.violations


def test_released_once_fails_on_a_second_or_missing_release() -> None:
    twice = workflow_verdict([*GOOD_STEPS[:3], step(4, deps=(2,), released=2), *GOOD_STEPS[4:]], GOOD_STARTS)
    assert len(twice.violations["workflow_released_once"]) == 1
    never = workflow_verdict([*GOOD_STEPS[:3], step(4, deps=(2,), released=0), *GOOD_STEPS[4:]], GOOD_STARTS)
    assert len(never.violations["workflow_released_once"]) == 1


def test_released_once_fails_on_a_cancel_no_dep_explains() -> None:
    # Step 4 cancelled though its dep completed and the run never cancelled it...
    steps = [*GOOD_STEPS[:3], step(4, "cancelled", deps=(2,)), *GOOD_STEPS[4:5],
             step(6, "cancelled", deps=(3, 4), ignore_failed=True, reason="dependency_cancelled")]
    v = workflow_verdict(steps, GOOD_STARTS[:4])
    assert any("no dep ended" in p for p in v.violations["workflow_released_once"]), v.violations
    # ...unless the run's cancels fault cancelled it (then its dependent's cancel is explained too).
    fault = [{"kind": "cancel", "detail": {"job_id": 4, "outcome": "cancelled"}}]
    assert workflow_verdict(steps, GOOD_STARTS[:4], cancelled_by_fault(fault)).ok
    # A step cancelled by its deps after a release is a violation.
    released = workflow_verdict([*GOOD_STEPS[:4], step(5, "cancelled", deps=(3,), released=1), GOOD_STEPS[5]],
                                GOOD_STARTS)
    assert any("after 1 release" in p for p in released.violations["workflow_released_once"])


def test_workflows_finished_fails_on_a_step_left_waiting_or_running() -> None:
    v = workflow_verdict([*GOOD_STEPS[:5], step(6, "waiting", deps=(3, 4), ignore_failed=True, released=0),
                          step(7, "running")], GOOD_STARTS[:5])
    assert len(v.violations["workflows_finished"]) == 2, v.violations
    assert not v.violations["workflow_released_once"]


def batch(bid: int, fired: dict[str, int], *, total: int = 3, completed: int = 3, failed: int = 0,
          finished: bool = True) -> dict[str, Any]:
    return {"id": bid, "callbacks": dict.fromkeys(("completed", "exhausted", "finished"), "chaos.step"),
            "fired": fired, "finished": finished, "total": total, "completed": completed, "failed": failed,
            "cancelled": 0, "unfinished": total - completed - failed}


def callback(bid: int, kind: str, job_id: int, *, enqueued: int = 1, completions: int = 1,
             status: str = "completed") -> dict[str, Any]:
    return {"batch_id": bid, "kind": kind, "job_id": job_id, "enqueued": enqueued, "completions": completions,
            "status": status}


GOOD_BATCHES = [batch(1, {"completed": 10, "finished": 11}), batch(2, {"exhausted": 12, "finished": 13},
                                                                   completed=2, failed=1)]
GOOD_CALLBACKS = [callback(1, "completed", 10), callback(1, "finished", 11), callback(2, "exhausted", 12),
                  callback(2, "finished", 13)]


def callbacks_verdict(batches: list[dict[str, Any]], callbacks: list[dict[str, Any]]) -> Verdict:
    v = Verdict()
    check_callbacks(v, batches, callbacks)
    return v


def test_callbacks_that_fired_once_each_hold() -> None:
    v = callbacks_verdict(GOOD_BATCHES, GOOD_CALLBACKS)
    assert v.ok, v.violations
    assert v.figures["batches"]["fired"] == {"completed": 1, "exhausted": 1, "finished": 2}


def test_callbacks_once_fails_on_a_callback_enqueued_twice_or_completed_twice() -> None:
    twice = callbacks_verdict(GOOD_BATCHES, [*GOOD_CALLBACKS, callback(1, "finished", 14)])
    assert any("enqueued 2 time(s)" in p for p in twice.violations["callbacks_once"]), twice.violations
    rerun = callbacks_verdict(GOOD_BATCHES, [*GOOD_CALLBACKS[:3], callback(2, "finished", 13, completions=2)])
    assert any("2 completion(s)" in p for p in rerun.violations["callbacks_once"]), rerun.violations
    dead = callbacks_verdict(GOOD_BATCHES, [*GOOD_CALLBACKS[:3], callback(2, "finished", 13, status="failed",
                                                                          completions=0)])
    assert any("ended failed" in p for p in dead.violations["callbacks_once"])


def test_callbacks_once_fails_on_the_wrong_kinds_or_an_unfinished_batch() -> None:
    # completed fired for a batch with a dead letter; exhausted missing; finished missing on batch 1.
    wrong = [batch(1, {"completed": 10}), batch(2, {"completed": 12, "finished": 13}, completed=2, failed=1)]
    v = callbacks_verdict(wrong, [callback(1, "completed", 10), callback(2, "completed", 12),
                                  callback(2, "finished", 13)])
    problems = v.violations["callbacks_once"]
    assert any("batch 1: finished never fired" in p for p in problems), problems
    assert any("batch 2: completed fired" in p for p in problems) and any("exhausted never" in p for p in problems)
    unfinished = callbacks_verdict([batch(3, {}, completed=1, finished=False)], [])
    assert any("did not finish" in p for p in unfinished.violations["callbacks_once"])


def sample(at: float, held: int, holders: int, *, at_end: bool = False) -> dict[str, Any]:
    return {"sampled_at": at, "keys_held": held, "max_holders": holders, "unique_key": "abc", "at_end": at_end}


def test_unique_keys_held_once_holds_and_fails_in_a_sample_or_at_the_end() -> None:
    ok = Verdict()
    check_unique(ok, [sample(1.0, 2, 1), sample(1.1, 0, 0)], jobs={"completed": 4},
                 enqueues={"unique_enqueues": 10, "unique_created": 4})
    assert ok.ok and ok.figures["unique"]["peak_keys_held"] == 2 and ok.figures["unique"]["unique_created"] == 4
    during = Verdict()
    check_unique(during, [sample(1.0, 2, 1), sample(1.1, 2, 2), sample(1.2, 1, 2)], jobs={})
    assert len(during.violations["unique_keys_held_once"]) == 1 and "2 sample(s)" in \
        during.violations["unique_keys_held_once"][0]
    end = Verdict()
    check_unique(end, [sample(1.0, 1, 1), sample(9.0, 1, 2, at_end=True)], jobs={})
    assert any("at the end" in p for p in end.violations["unique_keys_held_once"])


def test_the_plan_is_seeded_and_within_its_shapes() -> None:
    def plan(seed: int) -> list[Extra]:
        return plan_extras(workflows=8, batches=4, unique_keys=5, span=20.0, work_ms=(50.0, 300.0),
                           rng=random.Random(seed))

    extras = plan(39)
    assert extras == plan(39) and extras != plan(40)
    assert [e.at for e in extras] == sorted(e.at for e in extras) and all(0 <= e.at <= 20 for e in extras)
    kinds = Counter(e.kind for e in extras)
    assert kinds == {"workflow": 8, "batch": 4, "unique": 5 * UNIQUE_BURSTS}
    for e in extras:
        if e.kind == "workflow":
            assert STEPS_MIN <= len(e.steps) <= STEPS_MAX
            assert all(len(s.deps) <= DEPS_MAX and all(d < j for d in s.deps) for j, s in enumerate(e.steps))
            assert all(not s.ignore_failed for s in e.steps if not s.deps)
        elif e.kind == "batch":
            assert BATCH_MIN <= len(e.steps) <= BATCH_MAX and sum(s.fail for s in e.steps) == e.index % 2
    assert {e.key for e in extras if e.kind == "unique"} == {f"u{k}" for k in range(5)}
    assert plan_extras(workflows=0, batches=0, unique_keys=0, span=1.0, work_ms=(1.0, 1.0),
                       rng=random.Random(1)) == []
