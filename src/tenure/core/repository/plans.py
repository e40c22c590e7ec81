"""What a workflow or a batch is made of before it is enqueued (issue 39, docs/workflows.md):
its steps, their names and deps, checked whole (unique names, deps inside the workflow, no
cycle) before anything is written, and the size limit of a step's output. Pure logic, no SQL:
the repository's ``workflow_enqueue`` writes a checked plan in one statement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenure.core.errors import JobSpecError, PayloadError
from tenure.core.repository.specs import (
    PRIORITY_DEFAULT,
    JobSpec,
    check_text,
    encode_payload,
    env_bytes,
)

WORKFLOW_STEPS_MAX = 100_000
"""Steps one enqueue may hold at most (a step may add more while it runs)."""
WORKFLOW_DEPS_MAX = 100_000
"""Deps of one step at most."""
NAME_MAX_BYTES = 200
"""The longest workflow or step name, in UTF-8 bytes (the schema's CHECK says the same)."""
OUTPUT_MAX_BYTES_DEFAULT = 64 * 1024
"""A step's output limit, in bytes of JSON: ``TENURE_MAX_OUTPUT_BYTES`` or 64 KiB."""
BATCH_CALLBACKS = ("completed", "exhausted", "finished")
"""When a batch's callbacks run: ``completed`` once all its jobs completed; ``exhausted`` at its
first dead letter; ``finished`` once none is waiting, pending or running."""


def max_output_bytes() -> int:
    """The output size limit: ``TENURE_MAX_OUTPUT_BYTES`` or 64 KiB."""
    return env_bytes("TENURE_MAX_OUTPUT_BYTES", OUTPUT_MAX_BYTES_DEFAULT)


def encode_output(value: Any) -> str:
    """The JSON text stored for a step's output; PayloadError for what jsonb cannot hold or what
    exceeds :func:`max_output_bytes`."""
    try:
        text = "null" if value is None else encode_payload(value)
    except PayloadError as exc:
        raise PayloadError(str(exc).replace("payload", "output", 1)) from None
    size, limit = len(text.encode()), max_output_bytes()
    if size > limit:
        raise PayloadError(f"output is {size} bytes, above the {limit}-byte limit (TENURE_MAX_OUTPUT_BYTES)")
    return text


@dataclass(frozen=True)
class Step:
    """A step's handle, for ``deps``: its position in the workflow being built (``index``), or
    for a step already enqueued, its job id (``job_id``). ``workflow`` ties it to its workflow."""

    name: str
    workflow: object
    index: int | None = None
    job_id: int | None = None


@dataclass(frozen=True)
class PlannedStep:
    """One step of a plan: the job (``spec``), its name, its deps (positions in the plan) and
    whether it runs anyway after a failed or cancelled dep."""

    spec: JobSpec
    name: str
    deps: tuple[int, ...]
    ignore_failed: bool = False
    ignore_cancelled: bool = False
    payload_version: int = 1


def check_name(what: str, name: Any) -> str:
    """A workflow's or a step's name: 1 to 200 bytes, no NUL, no surrounding whitespace."""
    if not isinstance(name, str):
        raise JobSpecError(f"{what} must be a string, got {name!r}"[:300])
    check_text(what, name)
    if len(name.encode()) > NAME_MAX_BYTES:
        raise JobSpecError(f"{what} is {len(name.encode())} bytes, at most {NAME_MAX_BYTES}")
    return name


def check_acyclic(names: Sequence[str], deps: Sequence[Iterable[int]]) -> None:
    """JobSpecError naming a step on a cycle of ``deps`` (positions), if there is one."""
    state = [0] * len(names)  # 0 new, 1 on the path, 2 done
    for start in range(len(names)):
        if state[start]:
            continue
        stack: list[tuple[int, list[int]]] = [(start, list(deps[start]))]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                state[node] = 2
                stack.pop()
                continue
            nxt = todo.pop()
            if state[nxt] == 1:
                cycle = [names[n] for n, _ in stack[[n for n, _ in stack].index(nxt):]] + [names[nxt]]
                raise JobSpecError(f"workflow has a cycle: {' -> '.join(reversed(cycle))}"[:300])
            if state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, list(deps[nxt])))


@dataclass
class Plan:
    """Steps in the order they were added; :meth:`check` validates the whole before a write."""

    name: str
    steps: list[PlannedStep] = field(default_factory=list)

    def check(self) -> list[str]:
        """The payload text of each step; JobSpecError for an empty plan, a bad or repeated name,
        a dep outside the plan, a cycle, or any step :meth:`JobSpec.validated` refuses."""
        check_name("workflow name", self.name)
        if not self.steps:
            raise JobSpecError("workflow has no steps")
        if len(self.steps) > WORKFLOW_STEPS_MAX:
            raise JobSpecError(f"workflow has {len(self.steps)} steps, at most {WORKFLOW_STEPS_MAX} per enqueue")
        seen: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            check_name("step name", step.name)
            if step.name in seen:
                raise JobSpecError(f"step name {step.name!r} is used twice in workflow {self.name!r}"[:300])
            seen[step.name] = i
            for d in step.deps:
                if not 0 <= d < len(self.steps) or d == i:
                    raise JobSpecError(f"step {step.name!r} depends on a step outside workflow {self.name!r}"[:300])
        check_acyclic([s.name for s in self.steps], [s.deps for s in self.steps])
        return [s.spec.validated()[0] for s in self.steps]


def plan_from_document(doc: Any) -> Plan:
    """A plan from a JSON document (``tenure workflows enqueue``): ``{"name": ..., "steps": [{"task":
    ..., "name": ..., "payload": ..., "deps": [names], "queue": ..., "ignore_failed": ...,
    "ignore_cancelled": ...}]}``; deps by name, in any order. JobSpecError for anything else."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise JobSpecError('a workflow document is an object with "name" and a "steps" list')
    unknown = set(doc) - {"name", "steps"}
    if unknown:
        raise JobSpecError(f"unknown workflow field(s): {', '.join(sorted(unknown))}"[:300])
    raw_steps: list[Any] = doc["steps"]
    names: list[str] = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict) or not isinstance(raw.get("task"), str):
            raise JobSpecError(f"step {i + 1} must be an object with a \"task\"")
        extra = set(raw) - {"task", "name", "payload", "deps", "queue", "ignore_failed", "ignore_cancelled",
                            "max_attempts", "priority"}
        if extra:
            raise JobSpecError(f"step {i + 1}: unknown field(s) {', '.join(sorted(extra))}"[:300])
        names.append(check_name("step name", raw.get("name", raw["task"])))
    index = {n: i for i, n in enumerate(names)}
    plan = Plan(check_name("workflow name", doc.get("name")))
    for i, raw in enumerate(raw_steps):
        deps_raw = raw.get("deps", [])
        if not isinstance(deps_raw, list) or not all(isinstance(d, str) for d in deps_raw):
            raise JobSpecError(f"step {names[i]!r}: deps must be a list of step names"[:300])
        missing = [d for d in deps_raw if d not in index]
        if missing:
            raise JobSpecError(f"step {names[i]!r} depends on {missing[0]!r}, which is no step of this workflow"[:300])
        for flag in ("ignore_failed", "ignore_cancelled"):
            if not isinstance(raw.get(flag, False), bool):
                raise JobSpecError(f"step {names[i]!r}: {flag} must be true or false"[:300])
        spec = JobSpec(raw["task"], raw.get("payload"), raw.get("queue", "default"), raw.get("max_attempts", 5),
                       0.0, None, raw.get("priority", PRIORITY_DEFAULT))
        plan.steps.append(PlannedStep(spec, names[i], tuple(index[d] for d in deps_raw),
                                      raw.get("ignore_failed", False), raw.get("ignore_cancelled", False)))
    return plan


def check_callbacks(callbacks: Any) -> dict[str, str]:
    """A batch's callbacks: a mapping of some of :data:`BATCH_CALLBACKS` to task names."""
    if not isinstance(callbacks, dict):
        raise JobSpecError(f"batch callbacks must be a mapping of {', '.join(BATCH_CALLBACKS)} to task names")
    for kind, task in callbacks.items():
        if kind not in BATCH_CALLBACKS:
            raise JobSpecError(f"unknown batch callback {kind!r} (callbacks: {', '.join(BATCH_CALLBACKS)})"[:300])
        if not isinstance(task, str):
            raise JobSpecError(f"batch callback {kind!r} must name a task, got {task!r}"[:300])
        check_text("task", task)
    return dict(callbacks)


def output_json(value: Any) -> Any:
    """An output as stored and read back (JSON round trip), for a handler's own use."""
    return json.loads(encode_output(value))
