"""`tenure workflows list|show|cancel|enqueue` (issue 39, docs/workflows.md): workflows (DAGs of
jobs whose steps wait for their deps) from the command line.

``enqueue --from-file`` writes a JSON document (:func:`tenure.core.repository.plans.plan_from_document`)
checked whole first: bad JSON, a dep on an unknown step, a cycle or, with ``--app``, a task the
app does not register (or a payload its validator refuses) exits 2 with one line and writes
nothing. ``cancel`` cancels the unfinished steps through :func:`tenure.control.cancel`, the path
of `tenure jobs cancel` (audited with who asked); what waits for them is cancelled with them."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

from tenure import control
from tenure.cli.common import command, open_repo, positive_int, print_json, subcommands, table
from tenure.core.errors import ConfigError
from tenure.core.repository import WorkflowStore
from tenure.core.repository.plans import Plan, plan_from_document

ORDER = 72
LIST_LIMIT_DEFAULT = 50
OUTPUT_SHOWN = 40
"""Characters of a step's output JSON that the `show` table prints (``--json``: all of it)."""
UNFINISHED = ("waiting", "pending", "running")


def register(sub: Any) -> None:
    wf = subcommands(command(sub, "workflows", "workflows: DAGs of jobs whose steps wait for their deps"),
                     "workflows_command")
    ls = command(wf, "list", "workflows, newest first, with their steps counted by status")
    ls.add_argument("--limit", type=positive_int, default=LIST_LIMIT_DEFAULT, metavar="N",
                    help=f"workflows shown (at least 1; default {LIST_LIMIT_DEFAULT})")
    ls.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    ls.set_defaults(func=cmd_list)

    show = command(wf, "show", "one workflow and each of its steps: status, deps, output, cancel reason")
    show.add_argument("id", type=positive_int, metavar="ID")
    show.add_argument("--json", action="store_true", help="print JSON (outputs in full) instead of a table")
    show.set_defaults(func=cmd_show)

    cancel = command(wf, "cancel", "cancel a workflow's unfinished steps (waiting, pending and running)")
    cancel.add_argument("id", type=positive_int, metavar="ID")
    cancel.add_argument("--by", default=None, help="who asked, for the audit trail (default cli:USER@HOST)")
    cancel.set_defaults(func=cmd_cancel)

    enq = command(wf, "enqueue", "enqueue a workflow from a JSON document, checked whole before any write")
    enq.add_argument("--from-file", required=True, metavar="FILE",
                     help='a JSON document: {"name": ..., "steps": [{"task": ..., "name": ..., "payload": ..., '
                          '"deps": [step names], "queue": ..., "ignore_failed": ..., "ignore_cancelled": ...}]}')
    enq.add_argument("--app", default=None, metavar="MODULE:APP",
                     help="a tenure.App that must register every step's task; its validators check the "
                          "payloads, and a step naming no queue or max_attempts gets the task's")
    enq.add_argument("--json", action="store_true", help='print {"id": ..., "steps": {name: job id}}')
    enq.set_defaults(func=cmd_enqueue)


def _counts(by_status: dict[str, int]) -> str:
    order = {s: i for i, s in enumerate(control.JOB_STATUSES)}
    return " ".join(f"{s}={n}" for s, n in sorted(by_status.items(), key=lambda kv: order.get(kv[0], 99))) or "-"


def _when(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else "-"


def cmd_list(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: WorkflowStore = repository
    with conn:
        rows = repo.workflow_list(limit=args.limit)
    if args.json:
        print_json(rows)
        return 0
    table(("id", "name", "steps", "status", "finished"),
          [(r["id"], r["name"], r["steps"], _counts(r["by_status"]), "yes" if r["finished"] else "no") for r in rows])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: WorkflowStore = repository
    with conn:
        shown = repo.workflow_show(args.id)
    if shown is None:
        raise ConfigError(f"no workflow {args.id}")
    names = {s["id"]: s["name"] for s in shown["steps"]}
    for step in shown["steps"]:
        step["dep_names"] = [names.get(d, str(d)) for d in step["deps"]]
    shown["finished"] = not any(s["status"] in UNFINISHED for s in shown["steps"])
    if args.json:
        print_json(shown)
        return 0
    print(f"workflow {shown['id']}  {shown['name']}  created {_when(shown['created_at'])}"
          f"{'  cancelled ' + _when(shown['cancelled_at']) if shown['cancelled_at'] else ''}"
          f"  {'finished' if shown['finished'] else 'unfinished'}")
    table(("id", "name", "status", "task", "deps", "output", "cancel_reason"),
          [(s["id"], s["name"], s["status"], s["task"], ",".join(s["dep_names"]) or "-", _output(s["output"]),
            s["cancel_reason"] or "-") for s in shown["steps"]])
    return 0


def _output(value: Any) -> str:
    if value is None:
        return "-"
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= OUTPUT_SHOWN else text[:OUTPUT_SHOWN - 3] + "..."


def cmd_cancel(args: argparse.Namespace) -> int:
    conn, repository = open_repo(args)
    repo: WorkflowStore = repository
    with conn:
        targets = repo.workflow_cancel_targets(args.id)
        if targets is None:
            raise ConfigError(f"no workflow {args.id}: nothing was cancelled")
        report = control.CancelReport()
        if targets:
            report = control.cancel(conn, targets, schema=args.schema,
                                    requested_by=args.by or control.default_requester("cli"))
    # A step skipped as already cancelled was cancelled by this call's cascade (it waited for another).
    ended = sum(1 for status in report.skipped.values() if status != "cancelled")
    revoked = f" ({len(report.revoked)} running: token revoked; its worker is told at its next heartbeat)" \
        if report.revoked else ""
    print(f"workflow {args.id}: cancelled {len(targets) - ended} step(s){revoked}")
    return 0


def read_document(path: str) -> Any:
    """The JSON document at ``path``; ConfigError (exit 2) for a file that cannot be read or is not JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None


def apply_app(plan: Plan, doc_steps: list[dict[str, Any]], app_ref: str) -> Plan:
    """``plan`` with each step's task checked against the app at ``app_ref`` (ConfigError for one
    it does not register or a payload its validator refuses), the task's queue and max attempts
    where the document names none, and the task's payload version."""
    from tenure.worker.app import load_app

    app = load_app(app_ref)
    steps = []
    for step, raw in zip(plan.steps, doc_steps):
        task = app.get(step.spec.task)
        if task is None:
            raise ConfigError(f"step {step.name!r}: unknown task {step.spec.task!r} in {app_ref}: "
                              f"nothing was enqueued"[:300])
        why = task.check_payload(step.spec.payload)
        if why is not None:
            raise ConfigError(f"step {step.name!r}: payload fails validation ({why}): nothing was enqueued"[:300])
        spec = dataclasses.replace(step.spec, queue=raw.get("queue", task.queue),
                                   max_attempts=raw.get("max_attempts", task.retry.max_attempts))
        steps.append(dataclasses.replace(step, spec=spec, payload_version=task.payload_version))
    return Plan(plan.name, steps)


def cmd_enqueue(args: argparse.Namespace) -> int:
    doc = read_document(args.from_file)
    plan = plan_from_document(doc)  # JobSpecError (exit 2) for a bad document
    if args.app:
        plan = apply_app(plan, doc["steps"], args.app)
    plan.check()  # a cycle, a bad payload: exit 2 before connecting
    conn, repository = open_repo(args)
    repo: WorkflowStore = repository
    with conn:
        workflow_id, job_ids = repo.workflow_enqueue(plan)
    if args.json:
        print_json({"id": workflow_id, "steps": {s.name: j for s, j in zip(plan.steps, job_ids)}})
    else:
        print(workflow_id)
    return 0
