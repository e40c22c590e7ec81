"""Support for the live Prometheus/Alertmanager tests: the task app the worker subprocesses
serve (``--app livestack:app``), and small controllers for real Prometheus, Alertmanager and
a webhook receiver, all on loopback with ports chosen at run time.

Kept free of pytest so that worker subprocesses can import it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tenure import App, JobContext, PermanentError, RetryableError

# -- tasks ------------------------------------------------------------------------------------

app = App("live", default_queue="live")


@app.task("noop")
def noop(ctx: JobContext) -> None:
    return None


@app.task("work")
def work(ctx: JobContext) -> None:
    """Sleeps ``seconds`` (default 0.1) so the runtime histogram has a spread."""
    time.sleep(float(ctx.payload.get("seconds", 0.1)))


@app.task("slow")
def slow(ctx: JobContext) -> None:
    """Runs ``seconds`` of wall time (also while the process is stopped), ignoring its lease,
    then optionally waits ``wait_for_lost`` seconds for the heartbeat's verdict."""
    started = time.monotonic()
    while time.monotonic() - started < float(ctx.payload["seconds"]):
        time.sleep(0.05)
    if ctx.payload.get("wait_for_lost"):
        ctx.lease_lost.wait(float(ctx.payload["wait_for_lost"]))


@app.task("flaky", base_delay=0.05, max_delay=0.2, max_attempts=3)
def flaky(ctx: JobContext) -> None:
    """Times out on its first attempt, succeeds on the retry."""
    if ctx.attempt == 1:
        raise RetryableError("upstream timed out", code="timeout")


@app.task("doomed")
def doomed(ctx: JobContext) -> None:
    raise PermanentError("payload can never be processed", code="invalid_input")


@app.task("effect")
def effect(ctx: JobContext) -> None:
    """A guarded side effect; two jobs with the same ``key`` perform it once (dedup hit)."""
    with ctx.effect(f"live-effect:{ctx.payload['key']}") as eff:
        if not eff.already_succeeded:
            eff.succeeded(f"ref-{ctx.job_id}")


# -- processes --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


class _Daemon:
    """A server subprocess with its log file; ``stop()`` terminates it, then kills if needed."""

    proc: subprocess.Popen[bytes]
    log: Any

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


class Prometheus(_Daemon):
    """A real Prometheus server started with a generated config (scrape and evaluation 1s)."""

    def __init__(self, binary: str, workdir: Path, *, targets: dict[str, Sequence[int]],
                 rules: str | None = None, alertmanager_port: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}
                for job, ports in targets.items()],
        }
        if rules is not None:
            (workdir / "rules.yaml").write_text(rules, encoding="utf-8")
            config["rule_files"] = [str(workdir / "rules.yaml")]
        if alertmanager_port is not None:
            config["alerting"] = {"alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self._check_alive() and http_get(f"{self.url}/-/ready")[0] == 200, 60,
                 "Prometheus to be ready")

    def _check_alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: {self.log_text()}")
        return True

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        code, body = http_get(url, timeout=10)
        data: dict[str, Any] = json.loads(body) if body else {"status": "error", "error": f"HTTP {code}"}
        return data

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def targets_up(self) -> dict[str, str]:
        data = self.api("targets")
        return {t["scrapeUrl"]: t["health"] for t in data.get("data", {}).get("activeTargets", [])}



class Alertmanager(_Daemon):
    """A real Alertmanager routing every alert to one webhook, with send_resolved."""

    def __init__(self, binary: str, workdir: Path, webhook_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "route": {"receiver": "test-webhook", "group_by": ["alertname", "queue"],
                      "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1m"},
            "receivers": [{"name": "test-webhook",
                           "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
        }
        (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log = open(workdir / "alertmanager.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"alertmanager exited with {self.proc.returncode}: {self.log_text()}")
            return http_get(f"{self.url}/-/ready")[0] == 200

        wait_for(ready, 60, "Alertmanager to be ready")

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]



class WebhookReceiver:
    """Records every Alertmanager webhook notification (JSON bodies) posted to it."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._cond:
                    receiver.messages.append(json.loads(body))
                    receiver._cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def notifications(self, alertname: str, status: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [m for m in self.messages if m.get("groupLabels", {}).get("alertname") == alertname
                    and (status is None or m.get("status") == status)]

    def wait(self, alertname: str, status: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for m in self.messages if m.get("groupLabels", {}).get("alertname") == alertname
                         and m.get("status") == status]
                if found:
                    return found[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {status} notification for {alertname} within {timeout}s; "
                                         f"got {[(m.get('groupLabels'), m.get('status')) for m in self.messages]}")
                self._cond.wait(remaining)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
