"""Small helpers for the kind scenarios: kubectl, psql in the postgres pod, API-server proxies.

Everything goes through the real cluster: ``kubectl --context`` subprocesses, ``psql`` executed in
the in-cluster PostgreSQL pod (so the database is asserted directly), and the API server's service
proxy for Prometheus, Alertmanager and the webhook receiver. No state is kept here besides the
figures dictionary that the scenarios fill and ``figures.json`` records.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

DSN = "postgresql://tenure:tenure@postgres:5432/tenure"


class KindError(AssertionError):
    """A command or a wait failed; the message carries what was run and what came back."""


@dataclass
class Cluster:
    """The cluster e2e/kind/run.sh prepared (names from its environment)."""

    context: str = field(default_factory=lambda: os.environ["TENURE_KIND_CONTEXT"])
    name: str = field(default_factory=lambda: os.environ["TENURE_KIND_CLUSTER"])
    namespace: str = field(default_factory=lambda: os.environ.get("TENURE_KIND_NAMESPACE", "tenure-demo"))
    operator_namespace: str = field(
        default_factory=lambda: os.environ.get("TENURE_KIND_OPERATOR_NAMESPACE", "tenure-system"))
    image: str = field(default_factory=lambda: os.environ.get("TENURE_KIND_IMAGE", "tenure:dev"))
    artifacts: Path = field(
        default_factory=lambda: Path(os.environ.get("TENURE_KIND_ARTIFACTS", "/tmp/tenure-kind-e2e")))
    figures: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ kubectl
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120, namespaced: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["kubectl", "--context", self.context]
        if namespaced:
            cmd += ["-n", self.namespace]
        cmd += list(args)
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise KindError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc

    def get(self, *args: str, namespaced: bool = True) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", namespaced=namespaced).stdout)

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def patch_jobqueue(self, name: str, spec: dict[str, Any]) -> None:
        self.kubectl("patch", "jobqueue", name, "--type=merge", "-p", json.dumps({"spec": spec}))

    def raw(self, path: str, timeout: float = 30) -> Any:
        proc = self.kubectl("get", "--raw", path, namespaced=False, timeout=timeout)
        return json.loads(proc.stdout)

    def service_get(self, service: str, port: int, path: str, **query: str) -> Any:
        """GET http://service:port/path through the API server's service proxy (JSON)."""
        qs = ("?" + urllib.parse.urlencode(query)) if query else ""
        return self.raw(f"/api/v1/namespaces/{self.namespace}/services/{service}:{port}/proxy{path}{qs}")

    @contextmanager
    def port_forward(self, service: str, port: int, namespace: str | None = None,
                     timeout: float = 60) -> Iterator[int]:
        """``kubectl port-forward svc/SERVICE :PORT`` for the block; yields the local port (127.0.0.1).

        kubectl resolves the Service's selector and targetPort to one of its Ready pods, so a
        Service that selects nothing (or the wrong port) fails here. Its output goes to a log in
        the artifacts (it prints a line per connection, which a pipe would have to drain).
        """
        self.artifacts.mkdir(parents=True, exist_ok=True)
        log = self.artifacts / f"port-forward-{service}.log"
        cmd = ["kubectl", "--context", self.context, "-n", namespace or self.namespace, "port-forward",
               "--address", "127.0.0.1", f"svc/{service}", f":{port}"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
                if match:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise KindError(f"{' '.join(cmd)} did not forward: {log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.2)
            yield int(match.group(1))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    # ------------------------------------------------------------------ database
    def sql(self, query: str) -> list[list[str]]:
        """Run ``query`` with psql in the postgres pod; rows of unaligned, tab-separated fields."""
        proc = self.kubectl("exec", "deploy/postgres", "--", "psql", "-X", "-v", "ON_ERROR_STOP=1",
                            "-U", "tenure", "-d", "tenure", "-At", "-F", "\t", "-c", query)
        return [line.split("\t") for line in proc.stdout.splitlines() if line != ""]

    def scalar(self, query: str) -> str:
        rows = self.sql(query)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise KindError(f"expected one value from {query!r}, got {rows!r}")
        return rows[0][0]

    def count(self, query: str) -> int:
        return int(self.scalar(query))

    def db_now(self) -> float:
        return float(self.scalar("SELECT extract(epoch FROM now())"))

    # ------------------------------------------------------------------ pods
    def tenure_pod(self, name: str, argv: list[str], timeout: float = 300) -> str:
        """Run ``argv`` in a throwaway pod of the tenure image (DSN in its env); return its log."""
        self.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
        self.kubectl("run", name, f"--image={self.image}", "--image-pull-policy=Never",
                     "--restart=Never", f"--env=TENURE_DATABASE_URL={DSN}",
                     "--env=TENURE_HOME=/tmp/tenure", "--command", "--", *argv)
        deadline = time.monotonic() + timeout
        while True:
            phase = self.get("pod", name)["status"].get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                raise KindError(f"pod {name} still {phase} after {timeout}s")
            time.sleep(2)
        logs = self.kubectl("logs", name, check=False).stdout
        if phase != "Succeeded":
            raise KindError(f"pod {name} failed: {logs[-3000:]}")
        self.kubectl("delete", "pod", name, "--wait=false", check=False)
        return logs

    def enqueue(self, name: str, queue: str, batch: str, count: int, task: str = "send_invoice_email",
                first_id: int = 0, extra: dict[str, Any] | None = None) -> None:
        """Enqueue ``count`` jobs from a pod with ``tenure enqueue --from-file``; payloads carry
        ``batch`` so the scenarios can select their own jobs in SQL."""
        gen = (
            "import json,sys\n"
            f"for i in range({first_id}, {first_id + count}):\n"
            f"    print(json.dumps({{'task': {task!r}, 'queue': {queue!r},"
            f" 'payload': {{'invoice_id': i, 'batch': {batch!r}, **{extra or {}!r}}}}}))\n"
        )
        script = 'python -c "$0" > /tmp/jobs.jsonl && tenure enqueue --from-file /tmp/jobs.jsonl | tail -n 2'
        self.tenure_pod(name, ["sh", "-c", script, gen])

    def worker_pods(self, instance: str) -> list[dict[str, Any]]:
        sel = f"app.kubernetes.io/instance={instance},app.kubernetes.io/component=worker"
        items: list[dict[str, Any]] = self.get("pods", "-l", sel)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def docker(self, *args: str, timeout: float = 120) -> str:
        proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise KindError(f"docker {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    # ------------------------------------------------------------------ figures
    def record(self, key: str, value: Any) -> None:
        self.figures[key] = value
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / "figures.json"
        path.write_text(json.dumps(self.figures, indent=2, sort_keys=True) + "\n")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 2.0) -> T:
    """Poll ``probe`` until it returns a truthy value; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (KindError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise KindError(f"timed out after {timeout:.0f}s waiting for {what}"
                            + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


def sql_list(values: Iterable[object]) -> str:
    """A SQL literal list of integers or quoted strings (values come from the database)."""
    out = []
    for v in values:
        if isinstance(v, int):
            out.append(str(v))
        else:
            out.append("'" + str(v).replace("'", "''") + "'")
    return "(" + ",".join(out or ["NULL"]) + ")"
