"""Issue 39 with real processes: a fan-out/fan-in workflow runs to the end, each step once and
never before its deps, while workers are killed and frozen.

``start`` -> 12 ``mid-N`` steps (each sleeps 0.5 s, stores ``{"n": N}``) -> ``join`` (sums its
deps' outputs and adds ``final`` after itself), enqueued with :class:`tenure.Workflow`. Three
`tenure worker` processes (2 slots each, so the mid steps take two rounds) and `tenure reaper
--interval 1` run it; the first two workers seen running mid steps at once are SIGSTOPped and
SIGKILLed, the frozen one SIGCONTed once the reaper has taken its steps. Every step completes
once; each step with deps is released once; no attempt of a step starts (``detail.started_at``
of the audit row that ended it, by the database clock) before its deps completed; ``join`` saw
all 12 outputs; ``final`` ran after it; and no reaped attempt's token completed anything (the
frozen worker's late finish changed nothing).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest
from psycopg import sql

import tenure
from support.processes import wait_for, wait_registered
from tenure.core.db import Connection
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

MIDS = 12
STEPS = MIDS + 3  # start, the mids, join, and final (added by join)
WORKER = ["worker", "--app", "workflow_tasks:app", "--concurrency", "2", "--lease", "3s", "--heartbeat", "0.5s",
          "--poll-interval", "1"]
REAPER = ["reaper", "--interval", "1", "--grace", "1", "--backoff-base", "0", "--backoff-max", "0"]
REAPED = "reaped_due_to_expired_lease"


def _rows(conn: Connection, query: str, schema: str, *params: Any) -> list[Any]:
    return conn.execute(sql.SQL(query).format(schema=sql.Identifier(schema)), params).fetchall()


def _completed(conn: Connection, schema: str, workflow_id: int) -> int:
    return int(_rows(conn, "SELECT count(*) AS n FROM {schema}.all_jobs WHERE workflow_id = %s "
                           "AND status = 'completed'", schema, workflow_id)[0]["n"])


def _running_mids(conn: Connection, schema: str, worker_id: str) -> int:
    return int(_rows(conn, "SELECT count(*) AS n FROM {schema}.jobs WHERE status = 'running' AND task = 'mid' "
                           "AND locked_by = %s", schema, worker_id)[0]["n"])


def _enqueue(conn: Connection, schema: str) -> int:
    wf = tenure.Workflow("fan-out-fan-in")
    start = wf.add("start")
    mids = [wf.add("mid", {"n": n, "seconds": 0.5}, name=f"mid-{n}", deps=[start]) for n in range(MIDS)]
    wf.add("join", deps=mids)
    return wf.enqueue(conn, schema=schema)


def _records(runs_dir: Path) -> list[list[str]]:
    return [line.split() for f in sorted(runs_dir.iterdir()) for line in f.read_text().splitlines()]


@dataclass
class _Run:
    """What the database kept of the workflow: its jobs (by id), step names, edges and audit rows."""

    jobs: dict[int, Any]
    names: dict[int, str]
    deps: dict[int, set[int]]
    events: list[Any]


def _read(conn: Connection, schema: str, workflow_id: int) -> _Run:
    jobs = {int(r["id"]): r for r in _rows(conn, "SELECT id, status, completed_at FROM {schema}.all_jobs "
                                                 "WHERE workflow_id = %s", schema, workflow_id)}
    names = {int(r["job_id"]): str(r["name"]) for r in _rows(
        conn, "SELECT job_id, name FROM {schema}.workflow_steps WHERE workflow_id = %s", schema, workflow_id)}
    deps: dict[int, set[int]] = {}
    for r in _rows(conn, "SELECT job_id, dep_id FROM {schema}.workflow_deps WHERE job_id = ANY(%s)",
                   schema, list(jobs)):
        deps.setdefault(int(r["job_id"]), set()).add(int(r["dep_id"]))
    events = _rows(conn, "SELECT job_id, event, lock_token, detail, "
                         "(detail->>'started_at')::timestamptz AS started_at "
                         "FROM {schema}.job_events WHERE job_id = ANY(%s) ORDER BY id", schema, list(jobs))
    return _Run(jobs, names, deps, events)


def _check_order(run: _Run) -> dict[int, Any]:
    """(1) Every step completed exactly once and each step with deps was released exactly once;
    (2) no attempt of a step started before all its deps had completed. Returns each step's first
    start."""
    jobs, names, deps = run.jobs, run.names, run.deps
    by_name = {name: job_id for job_id, name in names.items()}
    assert len(jobs) == STEPS and set(by_name) == {"start", "join", "final", *(f"mid-{n}" for n in range(MIDS))}

    def count(job_id: int, event: str) -> int:
        return sum(1 for e in run.events if int(e["job_id"]) == job_id and e["event"] == event)
    assert {names[j]: count(j, "completed") for j in jobs} == {names[j]: 1 for j in jobs}
    assert {names[j]: count(j, "released") for j in deps} == {names[j]: 1 for j in deps}
    assert set(deps) == set(jobs) - {by_name["start"]}
    assert deps[by_name["final"]] == {by_name["join"]}
    first_start: dict[int, Any] = {}
    for e in run.events:
        if e["started_at"] is not None:
            first_start[int(e["job_id"])] = min(e["started_at"], first_start.get(int(e["job_id"]), e["started_at"]))
    assert set(first_start) == set(jobs)
    early = {names[j]: names[d] for j, ds in deps.items() for d in ds if first_start[j] < jobs[d]["completed_at"]}
    assert early == {}, early
    return first_start


def test_a_workflow_runs_each_step_once_after_its_deps_across_killed_and_frozen_workers(
        schema: str, repo: Repository, conn: Connection, cli_env: dict[str, str],
        spawn: Callable[..., Popen[bytes]], tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    env = {**cli_env, "WORKFLOW_RUNS": str(runs_dir)}
    spawn(*REAPER, env_override=env)
    workers = [spawn(*WORKER, env_override=env) for _ in range(3)]
    ids = wait_registered(repo, workers)
    started = time.monotonic()
    workflow_id = _enqueue(conn, schema)
    # The first two workers seen running mid steps at the same moment are frozen and killed.
    busy: list[Popen[bytes]] = wait_for(
        lambda: (lambda b: b if len(b) >= 2 else None)([w for w in workers if _running_mids(conn, schema, ids[w.pid])]),
        30, "two workers to run mid steps at once")
    frozen, killed = busy[0], busy[1]
    steady = next(w for w in workers if w not in (killed, frozen))
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        killed.kill()
        killed.wait(10)
        wait_for(lambda: not _running_mids(conn, schema, ids[frozen.pid]), 40,
                 "the reaper to take the frozen worker's steps")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    wait_for(lambda: _completed(conn, schema, workflow_id) == STEPS, 60, f"all {STEPS} steps to complete")
    elapsed = time.monotonic() - started

    run = _read(conn, schema, workflow_id)
    jobs, names, events = run.jobs, run.names, run.events
    by_name = {name: job_id for job_id, name in names.items()}
    reaped = [e for e in events if e["event"] == REAPED]
    figures = {"steps": len(jobs), "events": dict(Counter(str(e["event"]) for e in events)),
               "elapsed_s": round(elapsed, 1)}
    print(figures)
    first_start = _check_order(run)

    # (3) The faults cost attempts: both the frozen and the killed worker's steps were reaped, and
    # no reaped attempt's token completed anything (the frozen worker's late finish was refused).
    owners = {str(e["detail"].get("owner")) for e in reaped}
    assert {ids[frozen.pid], ids[killed.pid]} <= owners, (figures, owners)
    reaped_tokens = {e["lock_token"] for e in reaped}
    assert not [e for e in events if e["event"] == "completed" and e["lock_token"] in reaped_tokens]
    # A frozen attempt that finished its handler after SIGCONT either had its output refused (no
    # record: the record follows ctx.output) or, stopped between the two, its completion refused.
    records = _records(runs_dir)
    refused = {str(e["lock_token"]) for e in events if e["event"] == "stale_completion_rejected"}
    late = {r[3] for r in records if r[0] == "mid"} & {str(t) for t in reaped_tokens}
    assert late <= refused, (late, refused)

    # (4) join saw all 12 outputs, and final ran after it.
    assert {int(r[1]) for r in records if r[0] == "mid"} == {by_name[f"mid-{n}"] for n in range(MIDS)}
    joins = [r for r in records if r[0] == "join"]
    assert joins and all(r[2:] == [str(sum(range(MIDS))), str(MIDS)] for r in joins), joins
    assert [r for r in records if r[0] == "final"] == [["final", str(by_name["final"])]]
    assert jobs[by_name["final"]]["completed_at"] > jobs[by_name["join"]]["completed_at"]
    assert first_start[by_name["final"]] >= jobs[by_name["join"]]["completed_at"]
    assert frozen.poll() is None and steady.poll() is None, "a surviving worker exited"
