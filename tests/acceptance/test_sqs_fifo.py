"""A FIFO message group is never delivered out of order or in parallel: 3 consumer processes on one
group, one of them killed (SIGKILL) while it holds a message."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqs_server import client, start_sqs
from support.processes import wait_for

pytestmark = pytest.mark.acceptance
CONSUMER = Path(__file__).parent / "sqs_fifo_consumer.py"
MESSAGES = 12
VISIBILITY = 2


def test_fifo_group_in_order_never_in_parallel_with_a_consumer_killed(cli_env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    server, endpoint = start_sqs(cli_env, tmp_path / "sqs.log", "--no-auth")
    consumers: list[subprocess.Popen[bytes]] = []
    try:
        sqs = client(endpoint)
        url = sqs.create_queue(QueueName="group.fifo", Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": str(VISIBILITY)})["QueueUrl"]
        for i in range(MESSAGES):
            sqs.send_message(QueueUrl=url, MessageBody=f"{i:03d}", MessageGroupId="G")
        log = tmp_path / "consumed.log"
        log.touch()
        victim = subprocess.Popen([sys.executable, str(CONSUMER), endpoint, url, str(log), "hold"], env=cli_env)
        consumers.append(victim)
        wait_for(lambda: "hold" in log.read_text(), 30, "the victim to hold a message")
        for _ in range(2):  # polling while the victim holds the group's first message
            consumers.append(subprocess.Popen([sys.executable, str(CONSUMER), endpoint, url, str(log)], env=cli_env))
        time.sleep(0.5)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        consumers.append(subprocess.Popen([sys.executable, str(CONSUMER), endpoint, url, str(log)], env=cli_env))
        wait_for(lambda: log.read_text().count("done ") >= MESSAGES, 60, "every message consumed")
        time.sleep(1.5)  # any duplicate delivery would show up now
    finally:
        for c in consumers:
            c.kill()
            c.wait()
        server.terminate()
        server.wait(timeout=10)
    events = [line.split() for line in log.read_text().splitlines()]
    held_body, held_at = next((b, float(t)) for kind, b, t in events if kind == "hold")
    done = [b for kind, b, _ in events if kind == "done"]
    assert done == [f"{i:03d}" for i in range(MESSAGES)], "out of order, lost or duplicated"
    assert held_body == "000"
    # In parallel never: each start follows the previous message's done.
    timeline = [(kind, b, float(t)) for kind, b, t in events if kind != "hold"]
    in_flight = None
    for kind, body, _ in timeline:
        if kind == "start":
            assert in_flight is None, f"{body} started while {in_flight} was in flight"
            in_flight = body
        else:
            assert in_flight == body
            in_flight = None
    # The killed consumer's message stayed invisible, and blocked its group, for its visibility timeout.
    first_start = min(float(t) for kind, _, t in events if kind == "start")
    assert first_start >= held_at + VISIBILITY - 0.3
