"""Workflows and batches (issue 39, docs/workflows.md): enqueue a checked plan or a batch in one
statement, a running step's output and the steps it adds (both fenced by its token), and the
listings of `tenure workflows` and the job browser. Releases, cascades and callbacks are not
here: the schema's triggers run them in the transaction of the write that ends a job."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from tenure.core.errors import JobSpecError
from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.plans import Plan, check_callbacks, check_name, encode_output
from tenure.core.repository.specs import JobSpec, Row, encode_payload


class WorkflowQueries(RepositoryBase):
    """Workflows (DAGs of steps) and batches (jobs with callbacks)."""

    def workflow_enqueue(self, plan: Plan) -> tuple[int, list[int]]:
        """Insert ``plan`` (checked whole first: :meth:`Plan.check`) in one statement; returns the
        workflow's id and each step's job id, in the plan's order."""
        payloads = plan.check()
        steps = plan.steps
        edges = [(i + 1, d + 1) for i, s in enumerate(steps) for d in s.deps]
        row = self._one("workflow_enqueue", {
            "name": plan.name, "names": [s.name for s in steps], "tasks": [s.spec.task for s in steps],
            "payloads": payloads, "queues": [s.spec.queue for s in steps],
            "max_attempts": [s.spec.max_attempts for s in steps], "priorities": [s.spec.priority for s in steps],
            "payload_versions": [s.payload_version for s in steps],
            "ignore_failed": [s.ignore_failed for s in steps], "ignore_cancelled": [s.ignore_cancelled for s in steps],
            "waiting": [bool(s.deps) for s in steps],
            "dep_from": [f for f, _ in edges], "dep_to": [t for _, t in edges], "channel": self.channel})
        assert row is not None
        return int(row["id"]), [int(i) for i in row["step_ids"]]

    def workflow_step_add(self, adder: int, token: uuid.UUID, spec: JobSpec, *, name: str, deps: Sequence[int],
                          ignore_failed: bool = False, ignore_cancelled: bool = False,
                          payload_version: int = 1) -> Row | None:
        """Add a step to the workflow of running job ``adder`` while ``token`` holds it, waiting
        for ``deps`` (job ids of steps of that workflow); returns its ``id`` and ``status``
        (waiting, pending, or cancelled when a dep already failed), or None when the token no
        longer holds the adder (a stale attempt adds nothing). JobSpecError for a bad spec or
        name, a name the workflow already has, or a dep outside the workflow; nothing is written."""
        check_name("step name", name)
        payload = spec.validated()[0]
        with self.conn.transaction():
            lock = self._one("workflow_step_deps_lock", {"id": adder, "token": token, "deps": list(deps)})
            if lock is None:
                return None
            if lock["workflow_id"] is None:
                raise JobSpecError(f"job {adder} is not a workflow step: it cannot add steps")
            try:
                with self.conn.transaction():
                    row = self._one("workflow_step_add", {
                        "workflow_id": lock["workflow_id"], "deps": list(deps), "queue": spec.queue,
                        "task": spec.task, "payload": payload, "max_attempts": spec.max_attempts,
                        "priority": spec.priority, "payload_version": payload_version, "name": name,
                        "ignore_failed": ignore_failed, "ignore_cancelled": ignore_cancelled,
                        "channel": self.channel})
            except psycopg.errors.UniqueViolation:
                raise JobSpecError(f"workflow {lock['workflow_id']} already has a step named {name!r}"[:300]) from None
            if row is None:
                raise JobSpecError(f"a dep of step {name!r} is no step of workflow {lock['workflow_id']}"[:300])
            return row

    def workflow_step_output_set(self, job_id: int, token: uuid.UUID, value: Any) -> bool:
        """Store a running step's output while ``token`` holds it; False when it does not (stale)
        or the job is no step. PayloadError over the size limit, before anything is written."""
        text = encode_output(value)
        return self._one("workflow_step_output_set", {"id": job_id, "token": token, "output": text}) is not None

    def workflow_step_get(self, job_id: int) -> Row | None:
        """A job's ``workflow_id``, ``workflow_name`` and step ``name``; None when it is no step."""
        return self._one("workflow_step_get", {"id": job_id})

    def workflow_dep_outputs(self, job_id: int) -> dict[str, Any]:
        """The outputs of a step's deps by step name (None for a dep that stored none)."""
        return {str(r["name"]): r["output"] for r in self._rows("workflow_dep_outputs", {"id": job_id})}

    def workflow_list(self, *, limit: int = 50, before_id: int | None = None) -> list[Row]:
        """Workflows newest first, with ``steps``, ``by_status`` and ``finished``."""
        return self._rows("workflow_list", {"limit": limit, "before_id": before_id})

    def workflow_show(self, workflow_id: int, *, outputs: int | None = None) -> Row | None:
        """One workflow with its ``steps`` (status, deps, output...); None when there is none.
        With ``outputs``, only the first that many steps carry their output (a wide workflow's
        outputs are not all read)."""
        head = self._one("workflow_get", {"id": workflow_id})
        if head is None:
            return None
        return {**head, "steps": self._rows("workflow_steps_list", {"id": workflow_id, "outputs": outputs})}

    def workflow_cancel_targets(self, workflow_id: int) -> list[int] | None:
        """Mark a workflow cancelled; its unfinished steps' job ids (the caller cancels them as
        jobs, which cancels what waits for them), or None when there is no such workflow."""
        if self._one("workflow_get", {"id": workflow_id}) is None:
            return None
        return [int(r["id"]) for r in self._rows("workflow_cancel", {"id": workflow_id})]

    def batch_enqueue(self, jobs: Sequence[JobSpec], callbacks: dict[str, str], *, callback_queue: str = "default",
                      payload_versions: Sequence[int] | None = None) -> int:
        """Insert a batch and its jobs in one statement; returns the batch's id. Every job and
        callback is checked first (JobSpecError), an empty batch refused."""
        if not jobs:
            raise JobSpecError("batch has no jobs")
        check_callbacks(callbacks)
        payloads = [j.validated()[0] for j in jobs]
        row = self._one("batch_enqueue", {
            "callbacks": encode_payload(callbacks), "callback_queue": check_name("callback queue", callback_queue),
            "tasks": [j.task for j in jobs], "payloads": payloads, "queues": [j.queue for j in jobs],
            "max_attempts": [j.max_attempts for j in jobs], "priorities": [j.priority for j in jobs],
            "payload_versions": list(payload_versions) if payload_versions is not None else [1] * len(jobs),
            "channel": self.channel})
        assert row is not None
        return int(row["id"])

    def workflow_prune(self, older_than: float, batch: int) -> int:
        """Delete up to ``batch`` workflows older than ``older_than`` seconds whose steps retention
        has all deleted (with their names, edges and outputs); how many went."""
        row = self._one("workflow_prune", {"older_than": float(older_than), "batch": batch})
        return int(row["deleted"]) if row else 0

    def batch_prune(self, older_than: float, batch: int) -> int:
        """Delete up to ``batch`` batches older than ``older_than`` seconds whose jobs retention has
        all deleted; how many went."""
        row = self._one("batch_prune", {"older_than": float(older_than), "batch": batch})
        return int(row["deleted"]) if row else 0

    def batch_get(self, batch_id: int) -> Row | None:
        """One batch: ``callbacks``, ``fired`` (the callback jobs so far), ``by_status``."""
        return self._one("batch_get", {"id": batch_id})
