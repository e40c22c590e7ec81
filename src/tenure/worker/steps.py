"""What a workflow step's handler adds to its context (issue 39, docs/workflows.md): its output,
its deps' outputs, and steps it adds to its own workflow. Every write is a compare-and-set on
the attempt's token, like a checkpoint: a stale attempt (reaped, frozen past its lease) writes
nothing and gets :class:`~tenure.core.errors.LeaseLost`.

Limits: ``dep_outputs`` and ``workflow`` read the database on each access (keep them in a local);
a job that is no step has no workflow (``workflow`` is None, ``output`` raises ValueError).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from tenure.core.errors import JobSpecError
from tenure.core.repository import ClaimedJob, JobSpec, WorkflowStore
from tenure.core.repository.plans import Step


class _Attempt(Protocol):
    """The parts of :class:`~tenure.worker.context.JobContext` a step needs."""

    @property
    def job(self) -> ClaimedJob: ...
    @property
    def _repo(self) -> Callable[..., AbstractContextManager[WorkflowStore]]: ...

    def check_lease(self) -> None: ...
    def _refuse_stale(self, operation: str) -> NoReturn: ...


@dataclass(frozen=True)
class StepWorkflow:
    """The workflow of a running step, as its handler sees it: ``add`` more steps to it."""

    id: int
    name: str
    _ctx: _Attempt

    def add(self, task: str, payload: Any = None, *, name: str | None = None, deps: Iterable[Step] = (),
            queue: str | None = None, ignore_failed: bool = False, ignore_cancelled: bool = False) -> Step:
        """Add a step waiting for ``deps`` (this step, ``ctx.step``, or other steps of this
        workflow) in its own transaction, fenced by this attempt's token; returns its handle.
        ``name`` defaults to ``task`` and must be new in the workflow; ``queue`` to this step's.
        JobSpecError for bad input (nothing written); LeaseLost when this attempt is stale."""
        ctx = self._ctx
        ctx.check_lease()
        step_name = name if name is not None else task
        dep_ids = []
        for dep in deps:
            if not isinstance(dep, Step) or dep.job_id is None or dep.workflow != self.id:
                raise JobSpecError(f"step {step_name!r}: a dep must be a step of workflow {self.id} "
                                   f"(ctx.step, or a handle returned by ctx.workflow.add), got {dep!r}"[:300])
            dep_ids.append(dep.job_id)
        spec = JobSpec(task, payload, queue if queue is not None else ctx.job.queue)
        with ctx._repo() as repo:
            row = repo.workflow_step_add(ctx.job.id, ctx.job.lock_token, spec, name=step_name, deps=dep_ids,
                                         ignore_failed=ignore_failed, ignore_cancelled=ignore_cancelled)
        if row is None:
            ctx._refuse_stale("workflow_add")
        return Step(step_name, self.id, job_id=int(row["id"]))


class StepContext:
    """Mixed into :class:`~tenure.worker.context.JobContext`: a workflow step's own calls."""

    def output(self: _Attempt, value: Any) -> None:
        """Store this step's JSON output (replacing one stored before), for the steps that depend
        on it (``ctx.dep_outputs``) and ``tenure workflows show``. PayloadError for a value jsonb
        cannot hold or over ``TENURE_MAX_OUTPUT_BYTES`` (64 KiB); LeaseLost when this attempt is
        stale; ValueError when the job is no workflow step."""
        self.check_lease()
        with self._repo() as repo:
            if repo.workflow_step_output_set(self.job.id, self.job.lock_token, value):
                return
            if repo.workflow_step_get(self.job.id) is None:
                raise ValueError(f"job {self.job.id} is no workflow step: it has no output")
        self._refuse_stale("workflow_output")

    @property
    def dep_outputs(self: _Attempt) -> dict[str, Any]:
        """The outputs of this step's deps, by step name (None for a dep that stored none; an
        empty dict for a step without deps or a job that is no step)."""
        with self._repo() as repo:
            return repo.workflow_dep_outputs(self.job.id)

    @property
    def workflow(self: _Attempt) -> StepWorkflow | None:
        """This step's workflow (``ctx.workflow.add(...)`` adds to it); None for a job that is no step."""
        with self._repo() as repo:
            row = repo.workflow_step_get(self.job.id)
        return None if row is None else StepWorkflow(int(row["workflow_id"]), str(row["workflow_name"]), self)

    @property
    def step(self: _Attempt) -> Step:
        """This step's handle, for ``deps=[ctx.step]``; ValueError for a job that is no step."""
        with self._repo() as repo:
            row = repo.workflow_step_get(self.job.id)
        if row is None:
            raise ValueError(f"job {self.job.id} is no workflow step")
        return Step(str(row["name"]), int(row["workflow_id"]), job_id=self.job.id)



