"""The workflow, batch and unique-job invariants of a chaos run (issue 39 under faults).

- ``workflow_deps_first``: no attempt of a step starts before the completion of each of its deps
  (an attempt starts at its claim's ``now()``: ``detail.started_at`` of the record that ended it,
  or the job's ``started_at`` for its last or running one); a dep that was dead-lettered or
  cancelled excuses nothing unless the step ignores that outcome (``ignore_failed`` /
  ``ignore_cancelled``), and then only for that dep.
- ``workflow_released_once``: a step with deps has exactly one ``released`` event, unless it
  was cancelled: then none, and one of its deps ended failed or cancelled in a way it does not
  ignore (or the run's ``cancels`` fault cancelled it, released or not).
- ``workflows_finished``: at the end every step of every workflow is terminal.
- ``callbacks_once``: every batch finished; each callback in ``batches.fired`` was enqueued once
  (one ``batch_callback_enqueued`` event, and no other for its kind) and completed exactly once;
  ``finished`` fired for every batch, ``completed`` iff all its jobs completed, ``exhausted`` iff
  one was dead-lettered.
- ``unique_keys_held_once``: in every sample the harness took, and at the end, no unique key
  was held by two pending or running jobs.

Pure functions over rows read by :class:`tenure.chaos.store.ChaosStore` (``chaos_workflow_*``,
``chaos_batch*``, ``chaos_unique_*``); times are epoch seconds by the database clock. The local
and the HA run both call :func:`check_extras`, which reads those rows and runs the three checks,
and show :func:`summary_lines`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tenure.chaos import WF_QUEUE
from tenure.chaos.invariants import Row, Verdict, quantile

if TYPE_CHECKING:
    from tenure.chaos.store import ChaosStore

WORKFLOW_INVARIANTS = ("workflow_deps_first", "workflow_released_once", "workflows_finished", "callbacks_once",
                       "unique_keys_held_once")
TERMINAL = frozenset({"completed", "failed", "cancelled"})
CALLBACK_KINDS = ("completed", "exhausted", "finished")
EPSILON = 0.002
"""Seconds of float rounding tolerated on database times converted to epochs."""


def _reported(verdict: Verdict, *names: str) -> dict[str, list[str]]:
    for name in names:
        verdict.violations.setdefault(name, [])
    return verdict.violations


def cancelled_by_fault(faults: Iterable[Row]) -> set[int]:
    """Jobs the run's ``cancels`` fault cancelled (pending) or revoked (running)."""
    return {int(f["detail"]["job_id"]) for f in faults
            if f["kind"] == "cancel" and f["detail"] and f["detail"].get("job_id") is not None
            and str(f["detail"].get("outcome")) in ("cancelled", "revoked")}


def _ignores(step: Row, dep: Row) -> bool:
    """Whether ``step`` runs despite how ``dep`` ended (only a failed or cancelled dep can be ignored)."""
    return ((dep["status"] == "failed" and bool(step["ignore_failed"]))
            or (dep["status"] == "cancelled" and bool(step["ignore_cancelled"])))


def _deps_first(v: dict[str, list[str]], step: Row, by_id: dict[int, Row], starts: list[float],
                gaps: list[float]) -> None:
    jid = int(step["job_id"])
    for dep_id in step["deps"] or []:
        dep = by_id.get(int(dep_id))
        if dep is None:
            v["workflow_deps_first"].append(f"step {jid} depends on job {dep_id}, which is no step of the run")
            continue
        if dep["status"] == "completed" and dep["completed_at"] is not None:
            done = float(dep["completed_at"])
            early = [t for t in starts if t < done - EPSILON]
            if early:
                v["workflow_deps_first"].append(
                    f"workflow {step['workflow_id']} step {step['name']} (job {jid}): {len(early)} attempt(s) started "
                    f"{done - min(early):.3f}s before dep {dep['name']} (job {dep_id}) completed")
            gaps.extend(t - done for t in starts if t >= done - EPSILON)
        elif _ignores(step, dep):
            continue
        elif starts:
            v["workflow_deps_first"].append(
                f"workflow {step['workflow_id']} step {step['name']} (job {jid}) started {len(starts)} time(s) though "
                f"dep {dep['name']} (job {dep_id}) ended {dep['status']}")


def _released_once(v: dict[str, list[str]], step: Row, by_id: dict[int, Row],
                   by_fault: Collection[int]) -> str | None:
    """Checks one step with deps; returns why it was cancelled (for the figures), if it was."""
    jid, released = int(step["job_id"]), int(step["released"])
    where = f"workflow {step['workflow_id']} step {step['name']} (job {jid})"
    if step["status"] == "cancelled":
        if jid in by_fault:
            if released > 1:
                v["workflow_released_once"].append(f"{where}: released {released} times, then cancelled by the run")
            return "cancel_fault"
        deps = [by_id[int(d)] for d in step["deps"] or [] if int(d) in by_id]
        blocking = [d for d in deps if d["status"] in ("failed", "cancelled") and not _ignores(step, d)]
        if released:
            v["workflow_released_once"].append(f"{where}: cancelled by its deps after {released} release(s)")
        if not blocking:
            v["workflow_released_once"].append(
                f"{where}: cancelled, but no dep ended failed or cancelled unignored and the run did not cancel it")
        return str(step["cancel_reason"] or "no_reason")
    expected = 0 if step["status"] == "waiting" else 1
    if released != expected:
        v["workflow_released_once"].append(f"{where} ({step['status']}): {released} released event(s), expected "
                                           f"{expected}")
    return None


def check_workflows(verdict: Verdict, steps: Sequence[Row], attempts: Sequence[Row], *,
                    by_fault: Collection[int] = ()) -> None:
    """``workflow_deps_first``, ``workflow_released_once`` and ``workflows_finished`` over every
    step (``chaos_workflow_steps``) and every attempt start of the steps (``chaos_workflow_attempts``).
    ``by_fault``: jobs the run's ``cancels`` fault cancelled (:func:`cancelled_by_fault`)."""
    v = _reported(verdict, "workflow_deps_first", "workflow_released_once", "workflows_finished")
    by_id = {int(s["job_id"]): s for s in steps}
    starts: dict[int, list[float]] = defaultdict(list)
    for a in attempts:
        if a["started_at"] is not None:
            starts[int(a["job_id"])].append(float(a["started_at"]))
    gaps: list[float] = []
    cancels: Counter[str] = Counter()
    for step in steps:
        jid = int(step["job_id"])
        if step["status"] not in TERMINAL:
            v["workflows_finished"].append(f"workflow {step['workflow_id']} step {step['name']} (job {jid}) ended "
                                           f"{step['status']}")
        _deps_first(v, step, by_id, starts.get(jid, []), gaps)
        if step["deps"]:
            reason = _released_once(v, step, by_id, by_fault)
            if reason is not None:
                cancels[reason] += 1
    status = Counter(str(s["status"]) for s in steps)
    verdict.figures["workflows"] = {
        "workflows": len({s["workflow_id"] for s in steps}), "steps": len(steps),
        "steps_with_deps": sum(1 for s in steps if s["deps"]), "by_status": dict(sorted(status.items())),
        "released_events": sum(int(s["released"]) for s in steps), "resumed_events": sum(int(s["resumed"]) for s in steps),
        "cancelled_by": dict(sorted(cancels.items())),
        "ran_after_ignored_failure": sum(1 for s in steps if s["status"] == "completed" and any(
            by_id.get(int(d), {}).get("status") == "failed" for d in s["deps"] or [])),
        "attempt_starts": sum(len(x) for x in starts.values()),
        "redelivered_steps": sum(1 for x in starts.values() if len(x) > 1),
        "start_after_dep_seconds": {"n": len(gaps), "min": _round(min(gaps, default=None)),
                                    "p50": _round(quantile(gaps, 0.5))},
    }


def _callback_problems(batch: Row, rows: list[Row]) -> list[str]:
    """What is wrong with one batch's callbacks (``rows``: its ``chaos_batch_callbacks``)."""
    bid = batch["id"]
    fired: dict[str, Any] = dict(batch["fired"] or {})
    registered = set(batch["callbacks"] or {})
    problems: list[str] = []
    if not batch["finished"] or int(batch["unfinished"]):
        problems.append(f"batch {bid} did not finish ({batch['unfinished']} job(s) unfinished)")
    by_kind: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_kind[str(r["kind"])].append(r)
    for kind in sorted(set(by_kind) - set(fired)):
        problems.append(f"batch {bid}: a {kind} callback was enqueued but is not in fired")
    for kind, job_id in sorted(fired.items()):
        enqueued = by_kind.get(kind, [])
        if len(enqueued) != 1 or int(enqueued[0]["job_id"]) != int(job_id) or int(enqueued[0]["enqueued"]) != 1:
            problems.append(f"batch {bid}: {kind} callback (job {job_id}) enqueued {len(enqueued)} time(s) "
                            f"(jobs {[int(r['job_id']) for r in enqueued]})")
        for r in enqueued:
            if int(r["completions"]) != 1 or r["status"] != "completed":
                problems.append(f"batch {bid}: {kind} callback job {r['job_id']} ended {r['status']} with "
                                f"{r['completions']} completion(s)")
    total, completed, failed = int(batch["total"]), int(batch["completed"]), int(batch["failed"])
    expected = {"finished": True, "completed": total > 0 and completed == total, "exhausted": failed > 0}
    for kind in CALLBACK_KINDS:
        if kind in registered and (kind in fired) != expected[kind]:
            problems.append(f"batch {bid}: {kind} {'fired' if kind in fired else 'never fired'} with {completed} of "
                            f"{total} job(s) completed, {failed} dead-lettered")
    return problems


def check_callbacks(verdict: Verdict, batches: Sequence[Row], callbacks: Sequence[Row]) -> None:
    """``callbacks_once`` over every batch (``chaos_batches``) and every callback enqueued for one
    (``chaos_batch_callbacks``)."""
    v = _reported(verdict, "callbacks_once")
    by_batch: dict[int, list[Row]] = defaultdict(list)
    for r in callbacks:
        by_batch[int(r["batch_id"])].append(r)
    known = {int(b["id"]) for b in batches}
    for bid in sorted(set(by_batch) - known):
        v["callbacks_once"].append(f"callbacks enqueued for batch {bid}, which is no batch of the run")
    for b in batches:
        v["callbacks_once"].extend(_callback_problems(b, by_batch.get(int(b["id"]), [])))
    fired = Counter(kind for b in batches for kind in (b["fired"] or {}))
    verdict.figures["batches"] = {
        "batches": len(batches), "jobs": sum(int(b["total"]) for b in batches),
        "jobs_completed": sum(int(b["completed"]) for b in batches),
        "jobs_dead_lettered": sum(int(b["failed"]) for b in batches),
        "fired": dict(sorted(fired.items())), "callbacks_enqueued": len(callbacks),
        "callbacks_completed": sum(1 for r in callbacks if r["status"] == "completed"),
    }


def check_unique(verdict: Verdict, samples: Sequence[Row], *, jobs: dict[str, int],
                 enqueues: dict[str, int] | None = None) -> None:
    """``unique_keys_held_once`` over the harness's samples (``chaos_unique_samples``: per sample,
    the keys pending or running jobs hold and the most holders of one; then one ``at_end`` row
    per key held twice at the end). ``jobs``: the unique jobs by state; ``enqueues``: the
    producer's counts (figures)."""
    v = _reported(verdict, "unique_keys_held_once")
    during = [s for s in samples if not s["at_end"]]
    above = [s for s in during if int(s["max_holders"]) > 1]
    if above:
        peak = max(above, key=lambda s: int(s["max_holders"]))
        v["unique_keys_held_once"].append(
            f"unique key {str(peak['unique_key'])[:16]} was held by {peak['max_holders']} pending or running jobs, in "
            f"{len(above)} sample(s) from {float(above[0]['sampled_at']):.1f} to {float(above[-1]['sampled_at']):.1f}")
    for s in samples:
        if s["at_end"]:
            v["unique_keys_held_once"].append(f"unique key {str(s['unique_key'])[:16]} is held by {s['max_holders']} "
                                              f"pending or running jobs at the end")
    verdict.figures["unique"] = {
        "samples": len(during), "samples_holding_a_key": sum(1 for s in during if int(s["keys_held"])),
        "peak_keys_held": max((int(s["keys_held"]) for s in during), default=None),
        "samples_above": len(above), "jobs": dict(sorted(jobs.items())), **(enqueues or {}),
    }


def check_extras(verdict: Verdict, store: ChaosStore, *, faults: Iterable[Row], enqueued: Mapping[str, int]) -> None:
    """Every invariant above over what the run wrote on ``WF_QUEUE`` (read from ``store`` at the
    end); ``faults``: the run's fault records, ``enqueued``: :attr:`ExtrasProducer.counts`."""
    check_workflows(verdict, store.workflow_steps(WF_QUEUE), store.workflow_attempts(WF_QUEUE),
                    by_fault=cancelled_by_fault(faults))
    check_callbacks(verdict, store.batches(WF_QUEUE), store.batch_callbacks(WF_QUEUE))
    check_unique(verdict, store.unique_samples(), jobs=store.unique_jobs(WF_QUEUE),
                 enqueues={k: v for k, v in enqueued.items() if k.startswith("unique_")})
    verdict.figures["extras_enqueued"] = dict(sorted(enqueued.items()))


def summary_lines(figures: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report lines (label, value) of the figures :func:`check_extras` left."""
    wf, b, u = (dict(figures.get(k) or {}) for k in ("workflows", "batches", "unique"))
    return [
        ("workflows: steps by status / released / cancelled by",
         f"{wf.get('workflows', 0)} workflows, {wf.get('steps', 0)} steps {wf.get('by_status') or {}} / "
         f"{wf.get('released_events', 0)} / {wf.get('cancelled_by') or {}}"),
        ("batches: jobs / DLQ / callbacks fired",
         f"{b.get('batches', 0)} batches, {b.get('jobs', 0)} jobs / {b.get('jobs_dead_lettered', 0)} / "
         f"{b.get('fired') or {}} ({b.get('callbacks_completed', 0)} completed)"),
        ("unique: enqueues / created / samples (peak keys held)",
         f"{u.get('unique_enqueues', 0)} / {u.get('unique_created', 0)} / {u.get('samples', 0)} "
         f"({u.get('peak_keys_held')}); jobs {u.get('jobs') or {}}"),
    ]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
