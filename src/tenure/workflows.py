"""Workflows and batches for producers (issue 39, docs/workflows.md).

``wf = tenure.Workflow("order-42")``, ``a = wf.add("charge", payload)``, ``wf.add("ship", deps=[a])``,
then ``wf.enqueue(conn)``: the workflow and every step in one statement (inside the caller's
transaction if one is open), returning the workflow's id. A step with deps waits (status
``waiting``) until the write that completes its last dep releases it. ``tenure.Batch`` groups jobs
whose callbacks run once: when all completed, at the first dead letter, when all have ended.

Limits: steps and batch jobs carry no flow key, rate limit, unique key or delay; a workflow's
steps are checked whole (names, deps, cycles, payloads; tasks against ``app`` when given) before
anything is written, so a bad one writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tenure.core.errors import JobSpecError
from tenure.core.repository import JobSpec, Repository
from tenure.core.repository.plans import Plan, PlannedStep, Step, check_callbacks, check_name

if TYPE_CHECKING:
    import psycopg

    from tenure.worker.app import App

_DEFAULT_ATTEMPTS = 5


def _job(app: App | None, task: str, payload: Any, queue: str | None) -> tuple[JobSpec, int]:
    """The job of a step or batch entry and its payload version: the task's queue, attempts and
    version when ``app`` knows it (ConfigError for a task it does not), else the defaults."""
    if app is None:
        return JobSpec(task, payload, queue if queue is not None else "default", _DEFAULT_ATTEMPTS), 1
    registered, target, _ = app.enqueue_options(task, payload, queue=queue)
    return JobSpec(task, payload, target, registered.retry.max_attempts), registered.payload_version


class Workflow:
    """A DAG of steps, built with :meth:`add` and written with :meth:`enqueue`."""

    def __init__(self, name: str, *, app: App | None = None) -> None:
        self.name = check_name("workflow name", name)
        self.app = app
        self.id: int | None = None
        """The workflow's id once enqueued."""
        self.step_ids: list[int] = []
        """Each step's job id once enqueued, in the order added."""
        self._plan = Plan(name)
        self._names: set[str] = set()

    def add(self, task: str, payload: Any = None, *, name: str | None = None, deps: Iterable[Step] = (),
            queue: str | None = None, ignore_failed: bool = False, ignore_cancelled: bool = False) -> Step:
        """Add a step running ``task`` with ``payload`` once every step in ``deps`` completed;
        returns its handle for later steps' ``deps``. ``name`` (default: ``task``) must be new in
        the workflow. With ``ignore_failed`` / ``ignore_cancelled`` the step still runs after a
        dep was dead-lettered / cancelled; otherwise it is cancelled with reason
        ``dependency_failed`` / ``dependency_cancelled``. JobSpecError (or ConfigError for a task
        ``app`` does not know) for bad input, before anything is written."""
        if self.id is not None:
            raise JobSpecError(f"workflow {self.name!r} is already enqueued (id {self.id}): add steps from a "
                               f"running step with ctx.workflow.add")
        step_name = check_name("step name", name if name is not None else task)
        if step_name in self._names:
            raise JobSpecError(f"step name {step_name!r} is used twice in workflow {self.name!r}: pass name="[:300])
        positions = []
        for dep in deps:
            if not isinstance(dep, Step) or dep.workflow is not self or dep.index is None:
                raise JobSpecError(f"step {step_name!r}: a dep must be a step of this workflow (a handle "
                                   f"returned by its add), got {dep!r}"[:300])
            positions.append(dep.index)
        for flag, value in (("ignore_failed", ignore_failed), ("ignore_cancelled", ignore_cancelled)):
            if not isinstance(value, bool):
                raise JobSpecError(f"{flag} must be True or False, got {value!r}")
        spec, version = _job(self.app, task, payload, queue)
        spec.validate()
        self._plan.steps.append(PlannedStep(spec, step_name, tuple(positions), ignore_failed, ignore_cancelled,
                                            version))
        self._names.add(step_name)
        return Step(step_name, self, index=len(self._plan.steps) - 1)

    def enqueue(self, conn: psycopg.Connection[Any], *, schema: str = "tenure") -> int:
        """Write the workflow and all its steps in one statement on ``conn`` (inside its open
        transaction, if any); returns the workflow's id."""
        if self.id is not None:
            raise JobSpecError(f"workflow {self.name!r} is already enqueued (id {self.id})")
        self.id, self.step_ids = Repository(conn, schema).workflow_enqueue(self._plan)
        return self.id


class Batch:
    """Jobs that run on their own, with callbacks once they have ended (:meth:`enqueue`).

    ``callbacks`` maps ``completed`` (every job completed), ``exhausted`` (at the batch's first
    dead letter) and ``finished`` (none left waiting, pending or running) to a task; each is
    enqueued once, on ``callback_queue``, with the batch's summary as payload (``batch_id``,
    ``event``, ``total``, ``completed``, ``failed``, ``cancelled``, ``unfinished``)."""

    def __init__(self, callbacks: Mapping[str, str] | None = None, *, callback_queue: str = "default",
                 app: App | None = None) -> None:
        self.callbacks = check_callbacks(dict(callbacks or {}))
        if app is not None:
            for task in self.callbacks.values():
                app.enqueue_options(task)
        self.callback_queue = check_name("callback queue", callback_queue)
        self.app = app
        self.id: int | None = None
        self._jobs: list[JobSpec] = []
        self._versions: list[int] = []

    def add(self, task: str, payload: Any = None, *, queue: str | None = None) -> None:
        """Add a job; JobSpecError (ConfigError for a task ``app`` does not know) before any write."""
        spec, version = _job(self.app, task, payload, queue)
        spec.validate()
        self._jobs.append(spec)
        self._versions.append(version)

    def enqueue(self, conn: psycopg.Connection[Any], *, schema: str = "tenure") -> int:
        """Write the batch and its jobs in one statement; returns the batch's id."""
        if self.id is not None:
            raise JobSpecError(f"batch is already enqueued (id {self.id})")
        self.id = Repository(conn, schema).batch_enqueue(self._jobs, self.callbacks,
                                                         callback_queue=self.callback_queue,
                                                         payload_versions=self._versions)
        return self.id
