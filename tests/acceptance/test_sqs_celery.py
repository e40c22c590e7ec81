"""Celery 5 on `tenure sqs` (issue 36): real Celery workers with Kombu's SQS transport, SigV4
credentials and ``acks_late``; two worker processes for the whole file.

The workers reach `tenure sqs` through one endpoint, a TCP relay standing in for the Kubernetes
Service, and the servers behind it are replaced as a rolling update replaces pods: the new one is
up, the old one gets SIGTERM, the endpoint moves to the new one within the shutdown delay. In
order: 1,000 tasks with a rolling restart part-way (every task executed exactly once), a second
restart while every consumer's long poll is in flight (every poll loop goes on, none dies), and
a worker SIGKILLed in the middle of a task, which the other worker runs again once the queue's
visibility timeout (the lease) has passed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sqs_server import client, start_sqs
from support.processes import wait_for

pytest.importorskip("celery", reason="Celery is not installed (it comes with the dev extra: celery[sqs])")

pytestmark = pytest.mark.acceptance

KEY, SECRET = "AKIDCELERY", "celery/s3cret+key"
"""A secret with characters AWS secrets have, which the broker URL must quote."""
TASKS = 1000
SLOW_VISIBILITY = 5
"""The VisibilityTimeout of the queue ``slow``: how long a killed worker's task stays invisible."""
WORKERS = ("w1", "w2")
QUEUES = ("celery", "slow")
SHUTDOWN_DELAY = 1.0
ENDPOINT_MOVES_AFTER = 0.3
"""Seconds from SIGTERM to the endpoint's move to the new server (the Service dropping the pod)."""
BAD_LOG_LINES = ("Traceback", "CRITICAL", "Couldn't ack", "Error in timer", "Unrecoverable error",
                 "Connection to broker lost")
"""What Celery logs when an ack fails (Couldn't ack: a DeleteMessage cut or refused, the task runs
again after the visibility timeout) or a consumer dies (Kombu 5.7 takes a cut or refused
ReceiveMessage for ``[]`` and fails on it: "Error in timer" ends that queue's poll loop,
"Unrecoverable error" the worker)."""


class Endpoint:
    """A TCP relay on 127.0.0.1 to one server at a time: :meth:`move` sends new connections to
    another server, open ones stay where they are (as a Service's endpoints change)."""

    def __init__(self, port: int) -> None:
        self.port_behind = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def move(self, port: int) -> None:
        self.port_behind = port

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.open:
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port_behind), timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            for sock in (conn, upstream):  # no Nagle: a request's head and body are separate writes
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.open |= {conn, upstream}
            threading.Thread(target=self._pump, args=(conn, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        """Bytes one way; the client's EOF is passed on, the server's closing ends the pair."""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            if not from_server:
                dst.shutdown(socket.SHUT_WR)
                return
        except OSError:
            pass
        with self.lock:
            for sock in (src, dst):
                sock.close()
                self.open.discard(sock)


def _records(path: Path) -> list[tuple[str, str, str, float]]:
    """(task id, worker hostname, event, time) per line the tasks appended."""
    if not path.exists():
        return []
    rows = []
    text = path.read_text()
    # A line still being appended (read mid-write) is left for the next look.
    for line in text[:text.rfind("\n") + 1].splitlines():
        task_id, host, event, at = line.split()
        rows.append((task_id, host, event, float(at)))
    return rows


def _done(path: Path, ids: set[str]) -> int:
    return sum(1 for task_id, _, event, _ in _records(path) if event == "done" and task_id in ids)


def _long_polls_waiting(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("tenure_sqs_long_polls_waiting ")]
    return int(float(line.split()[1]))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=15)


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture
def workers() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    yield procs
    for proc in procs.values():
        _stop(proc)


def _start_worker(env: dict[str, str], log: Path, name: str) -> subprocess.Popen[bytes]:
    """``celery worker`` with 4 threads on both queues, otherwise as Celery starts by default."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "-n", f"{name}@tenure-test",
             "-P", "threads", "-c", "4", "-Q", ",".join(QUEUES), "-l", "info"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _rolling_restart(old: subprocess.Popen[bytes], old_log: Path, new_port: int, endpoint: Endpoint) -> None:
    """SIGTERM to ``old``; the endpoint moves to the new server during the shutdown delay; the
    old one drains (its long polls answered) and exits 0 without a traceback."""
    old.send_signal(signal.SIGTERM)
    time.sleep(ENDPOINT_MOVES_AFTER)
    endpoint.move(new_port)
    assert old.wait(timeout=SHUTDOWN_DELAY + 5) == 0, old_log.read_text()
    assert "Traceback" not in old_log.read_text(), old_log.read_text()


def test_celery_on_tenure_sqs_through_restarts_and_a_killed_worker(
        cli_env: dict[str, str], tmp_path: Path, servers: list[subprocess.Popen[bytes]],
        workers: dict[str, subprocess.Popen[bytes]]) -> None:
    import celery_tasks

    creds = tmp_path / "sqs-credentials"
    creds.write_text(f"{KEY}:{SECRET}:*\n")
    args = ["--credentials", str(creds), "--shutdown-delay", f"{SHUTDOWN_DELAY:g}s"]
    urls = []
    for n in (1, 2):
        proc, url = start_sqs(cli_env, tmp_path / f"sqs-{n}.log", *args)
        servers.append(proc)
        urls.append(url)
    endpoint = Endpoint(int(urls[0].rsplit(":", 1)[1]))
    try:
        sqs = client(endpoint.url, KEY, SECRET, region=celery_tasks.REGION)
        slow_url = sqs.create_queue(QueueName=celery_tasks.SLOW_QUEUE,
                                    Attributes={"VisibilityTimeout": str(SLOW_VISIBILITY)})["QueueUrl"]
        broker = f"sqs://{KEY}:{quote(SECRET, safe='')}@{endpoint.url.split('//', 1)[1]}"
        record_file = tmp_path / "executions.txt"

        # (a) 1,000 tasks queued (Kombu creates the queue `celery` with its visibility timeout),
        # then the workers start on them.
        celery_tasks.app.conf.broker_url = broker
        ids = {celery_tasks.record.delay(n).id for n in range(TASKS)}
        celery_url = sqs.get_queue_url(QueueName="celery")["QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=celery_url, AttributeNames=["VisibilityTimeout"])["Attributes"]
        assert attrs["VisibilityTimeout"] == str(celery_tasks.VISIBILITY_TIMEOUT)
        env = {**cli_env, "TENURE_CELERY_BROKER": broker, "TENURE_CELERY_RECORD": str(record_file)}
        logs = {name: tmp_path / f"{name}.log" for name in WORKERS}
        for name in WORKERS:
            workers[name] = _start_worker(env, logs[name], name)
        for name in WORKERS:
            wait_for(lambda: f"{name}@tenure-test ready." in logs[name].read_text() or workers[name].poll() is not None,
                     60, f"celery worker {name} ready")
            assert workers[name].poll() is None, logs[name].read_text()

        # (c) in the flow: a rolling restart with a quarter of the tasks done; tasks received
        # from the old server are deleted through the new one.
        wait_for(lambda: _done(record_file, ids) >= TASKS // 4, 60, "a quarter of the tasks done")
        _rolling_restart(servers[0], tmp_path / "sqs-1.log", int(urls[1].rsplit(":", 1)[1]), endpoint)
        done_then = _done(record_file, ids)
        assert done_then < TASKS, "the workers finished before the old server was gone"
        wait_for(lambda: _done(record_file, ids) > done_then, 5, "a task done through the new server")
        wait_for(lambda: _done(record_file, ids) >= TASKS, 60, "every task done")
        done = Counter(task_id for task_id, _, event, _ in _records(record_file) if event == "done")
        assert set(done) == ids
        assert {task_id: n for task_id, n in done.items() if n != 1} == {}
        assert {host for task_id, host, _, _ in _records(record_file)} == {f"{n}@tenure-test" for n in WORKERS}

        # (c) idle: every consumer's long poll (two workers, two queues) is in flight at SIGTERM;
        # all are answered, and every poll loop goes on through the next server.
        proc, url = start_sqs(cli_env, tmp_path / "sqs-3.log", *args)
        servers.append(proc)
        urls.append(url)
        wait_for(lambda: _long_polls_waiting(urls[1]) == len(WORKERS) * len(QUEUES), 15, "every long poll waiting")
        _rolling_restart(servers[1], tmp_path / "sqs-2.log", int(urls[2].rsplit(":", 1)[1]), endpoint)
        wait_for(lambda: _long_polls_waiting(urls[2]) == len(WORKERS) * len(QUEUES), 5,
                 "every long poll waiting on the new server")

        # (b) the worker running a task is SIGKILLed; the other runs it once the visibility timeout
        # ends, or one later: the killed worker's own long poll on the queue may still be waiting
        # in the server, receive the message when it is visible again and answer nobody.
        slow_id = celery_tasks.slow.apply_async(queue=celery_tasks.SLOW_QUEUE).id
        started = wait_for(lambda: [r for r in _records(record_file) if r[0] == slow_id], 10, "the slow task started")
        victim_host, first_start = started[0][1], started[0][3]
        victim = victim_host.split("@")[0]
        survivor = next(name for name in WORKERS if name != victim)
        os.killpg(workers[victim].pid, signal.SIGKILL)
        workers[victim].wait(timeout=15)
        rerun = wait_for(lambda: [r for r in _records(record_file) if r[0] == slow_id and r[2] == "done"],
                         2 * SLOW_VISIBILITY + 10, "the slow task run again by the other worker")
        assert [(r[1], r[2]) for r in _records(record_file) if r[0] == slow_id] == [
            (victim_host, "start"), (f"{survivor}@tenure-test", "start"), (f"{survivor}@tenure-test", "done")]
        assert rerun[0][3] - first_start >= SLOW_VISIBILITY - 0.5

        # Every message deleted (acked): nothing waiting, nothing in flight; no consumer died.
        def empty(queue_url: str) -> bool:
            got: dict[str, Any] = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
            return got["ApproximateNumberOfMessages"] == "0" and got["ApproximateNumberOfMessagesNotVisible"] == "0"

        wait_for(lambda: empty(celery_url) and empty(slow_url), 10, "both queues empty")
        assert workers[survivor].poll() is None
        for name in WORKERS:
            text = logs[name].read_text(errors="replace")
            assert not [bad for bad in BAD_LOG_LINES if bad in text], text
    finally:
        celery_tasks.app.close()  # the producer's connections
        endpoint.close()
