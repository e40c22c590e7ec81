"""The reconnecting service loop every background connection runs on (issue 37, item 1):
jittered backoff, and the LISTEN thread of the worker, `tenure ui` and `tenure sqs` stopping at
once even while it cannot reach the database."""

from __future__ import annotations

import logging
import random
import re
import time

import pytest

from tenure.core.service import RECONNECT_FIRST_DEFAULT, RECONNECT_MAX_DEFAULT, ListenLoop, jittered
from tenure.sqs.service import SqsConfig, SqsService
from tenure.ui.config import UiConfig
from tenure.ui.service import UiService

UNREACHABLE = "postgresql://tenure@127.0.0.1:1/tenure?connect_timeout=1"


def test_a_jittered_wait_stays_in_the_upper_part_of_its_window() -> None:
    rng = random.Random(7)
    waits = [jittered(4.0, 0.5, rng) for _ in range(1000)]
    assert all(2.0 <= w <= 4.0 for w in waits)
    assert max(waits) - min(waits) > 1.5  # spread, not one value
    assert jittered(4.0, 0.0) == 4.0


def test_the_listen_loop_backs_off_while_the_database_is_down_and_stops_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("tenure.test.listen")
    loop = ListenLoop(dsn=UNREACHABLE, schema="tenure", application_name="tenure-test-listen", log=log)
    with caplog.at_level(logging.WARNING, logger="tenure.test.listen"):
        loop.start()
        time.sleep(1.5)
        started = time.monotonic()
        loop.stop_and_join(5)
        assert time.monotonic() - started < 1.5
        loop.stop_and_join(5)  # idempotent
    waits = [float(m) for m in re.findall(r"retrying in ([0-9.]+)s", caplog.text)]
    assert waits, caplog.text
    assert all(w <= RECONNECT_MAX_DEFAULT for w in waits)
    assert waits[0] <= RECONNECT_FIRST_DEFAULT


def test_both_servers_share_the_pooled_base() -> None:
    ui = UiService(UiConfig(dsn=UNREACHABLE, schema="tenure"))
    sqs = SqsService(SqsConfig(dsn=UNREACHABLE, schema="tenure"))
    for service, listener in ((ui, ui.feed.listen), (sqs, sqs.wakeups.listen)):
        assert service.listener is listener
        assert service.health() == (200, "ok\n")
        service.shutdown.stop()
        assert service.health() == (503, "stopping\n")
        service.close()  # never opened, listener never started: closes at once
