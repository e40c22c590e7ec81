"""`tenure demo`: a crash recovered live, on an embedded database, with no setup.

Starts (or reuses) an embedded PostgreSQL in a temporary home, enqueues sample jobs including
one whose first attempt kills its worker mid-job, runs two worker processes and a reaper, and
prints the queue while the reaper recovers the crashed job and another worker completes it.
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

from tenure.core.db import connect
from tenure.core.embedded import ensure_server
from tenure.core.repository import JobSpec, Repository

LEASE = 3.0
HEARTBEAT = 1.0
GRACE = 1.0


def run_demo(args: argparse.Namespace) -> int:
    home = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    dsn = args.database_url or os.environ.get("TENURE_DATABASE_URL")
    server = None
    if not dsn:
        print(f"starting an embedded PostgreSQL in {home} ...", flush=True)
        server = ensure_server(home / "pgdata")
        dsn = server.dsn
    schema = "tenure_demo"
    env = {**os.environ, "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            repo = Repository(conn, schema)
            repo.migrate()
            crash = repo.enqueue("crash_once", {"marker": str(home / "crashed")}).id
            repo.enqueue_many([JobSpec("send_invoice_email", {"invoice_id": i}, idempotency_key=f"invoice:{i}:email:v1")
                               for i in range(args.jobs)])
            repo.enqueue("always_fails", {"why": "poison"}, max_attempts=2)
            print(f"enqueued {args.jobs + 2} jobs; job {crash} kills its worker mid-job on the first attempt\n",
                  flush=True)
            worker_cmd = [sys.executable, "-m", "tenure.cli", "worker", "--app", "tenure.demo.tasks:app",
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
                stats = repo.queue_stats("default")
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
            dead = repo.dlq_list(queue="default")
            print(f"\ndead-letter queue: {len(dead)} job(s): "
                  + json.dumps([{"id": d["id"], "task": d["task"], "code": d["last_error_code"]} for d in dead]))
            final = repo.get_job(crash)
            ok = final is not None and final["status"] == "completed"
            print("\nrecovered: the crashed job completed on another worker" if ok
                  else "\nthe crashed job did not complete in time")
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
        if server is not None:
            server.stop("fast")
        if not getattr(args, "keep", False):
            shutil.rmtree(home, ignore_errors=True)
