"""`tenure demo`: a crash recovered live, on an embedded database, with no setup.

Uses the database and schema every command resolves (``--database-url`` or
``TENURE_DATABASE_URL``, else the embedded PostgreSQL that `tenure` starts in its home;
``--schema`` or ``TENURE_SCHEMA``, else ``tenure``), migrates it, enqueues sample jobs on the
queue ``demo`` including one whose first attempt kills its worker mid-job, runs two worker
processes and a reaper, and prints the queue while the reaper recovers the crashed job and
another worker completes it. The jobs stay, so `tenure ui` shows them next. Each run's
idempotency keys are its own, so a second run enqueues its jobs again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tenure.core.db import connect, resolve_dsn, resolve_schema
from tenure.core.embedded import tenure_home
from tenure.core.repository import JobSpec, Repository

LEASE = 3.0
HEARTBEAT = 1.0
GRACE = 1.0
QUEUE = "demo"


def run_demo(args: argparse.Namespace) -> int:
    home = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    if not (args.database_url or os.environ.get("TENURE_DATABASE_URL")):
        print(f"using the embedded PostgreSQL in {tenure_home() / 'pgdata'} ...", flush=True)
    dsn = resolve_dsn(args.database_url)
    schema = resolve_schema(args.schema)
    run = home.name.removeprefix("tenure-demo-")
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with connect(dsn) as conn:
            repo = Repository(conn, schema)
            repo.migrate()
            crash = repo.enqueue("crash_once", {"marker": str(home / "crashed")}, queue=QUEUE).id
            repo.enqueue_many([JobSpec("send_invoice_email", {"invoice_id": i}, queue=QUEUE,
                                       idempotency_key=f"demo-{run}:invoice:{i}:email:v1") for i in range(args.jobs)])
            poison = repo.enqueue("always_fails", {"why": "poison"}, max_attempts=2, queue=QUEUE).id
            print(f"enqueued {args.jobs + 2} jobs; job {crash} kills its worker mid-job on the first attempt\n",
                  flush=True)
            worker_cmd = [sys.executable, "-m", "tenure.cli", "worker", "--app", "tenure.demo.tasks:app", "--queue", QUEUE,
                          "--concurrency", "4", "--lease", f"{LEASE}s", "--heartbeat", f"{HEARTBEAT}s",
                          "--grace", f"{GRACE}s", "--drain-timeout", "5s", "--backoff-base", "0.2",
                          "--backoff-max", "1"]
            procs.append(subprocess.Popen(worker_cmd, env=env, stderr=subprocess.DEVNULL))
            procs.append(subprocess.Popen([sys.executable, "-m", "tenure.cli", "reaper", "--interval", "0.5s",
                                           "--grace", f"{GRACE}s", "--heartbeat", f"{HEARTBEAT}s", "--backoff-base", "0.2",
                                           "--backoff-max", "1"],
                                          env=env, stderr=subprocess.DEVNULL))
            second_started = False
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                stats = repo.queue_stats(QUEUE)
                s = stats[0] if stats else None
                job = repo.get_job(crash)
                assert job is not None
                if s:
                    print(f"  ready={s.ready:<3} running={s.running:<3} expired={s.running_expired:<2} "
                          f"done={s.completed:<3} dlq={s.failed:<2} | crash job: {job['status']}"
                          f" attempt {job['attempt_count']}", flush=True)
                if procs[0].poll() is not None and not second_started:
                    print(f"\n  worker 1 died mid-job (exit {procs[0].returncode}); its lease will expire "
                          f"after {LEASE:g}s, the reaper waits {GRACE:g}s more\n", flush=True)
                    procs.append(subprocess.Popen(worker_cmd, env=env, stderr=subprocess.DEVNULL))
                    second_started = True
                if s and job["status"] == "completed" and s.ready == 0 and s.running == 0:
                    break
                time.sleep(0.5)
            print("\nhistory of the crashed job:")
            for e in repo.job_events(crash):
                token = str(e["lock_token"])[:8] if e["lock_token"] else "-"
                print(f"  {e['created_at'].strftime('%H:%M:%S.%f')[:-3]}  {e['event']:30} "
                      f"attempt={e['attempt'] or '-'} token={token} {e['reason'] or ''}")
            dead = [d for d in repo.dlq_list(queue=QUEUE) if d["id"] == poison]
            print(f"\ndead-letter queue: {len(dead)} job(s): "
                  + json.dumps([{"id": d["id"], "task": d["task"], "code": d["last_error_code"]} for d in dead]))
            final = repo.get_job(crash)
            ok = final is not None and final["status"] == "completed"
            print("\nrecovered: the crashed job completed on another worker" if ok
                  else "\nthe crashed job did not complete in time")
            print(f"\nsee it in the browser: tenure ui  (then open http://127.0.0.1:8080/jobs/{crash})")
            return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(home, ignore_errors=True)
