"""The stop of `tenure sqs` and `tenure ui` without a server (issue 36): the stop state, the
long polls' and the event streams' drain, and the shutdown delay's bounds."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tenure.core.errors import ConfigError
from tenure.core.shutdown import SHUTDOWN_DELAY_MAX, Shutdown
from tenure.sqs.service import SqsConfig, Wakeups
from tenure.ui.config import UiConfig
from tenure.ui.service import END, SUBSCRIBER_BACKLOG, ChangeFeed


def test_stop_then_drain_runs_each_hook_once_even_after_one_fails() -> None:
    shutdown = Shutdown()
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise RuntimeError("boom")

    shutdown.on_drain(broken)
    shutdown.on_drain(lambda: ran.append("second"))
    assert not shutdown.stopping and not shutdown.draining
    shutdown.stop()
    assert shutdown.stopping and not shutdown.draining and ran == []
    shutdown.drain()
    shutdown.drain()
    assert shutdown.draining and ran == ["broken", "second"]
    fresh = Shutdown()
    fresh.drain()  # a drain without a stop first stops too
    assert fresh.stopping and fresh.draining


def test_a_drain_wakes_every_long_poll_and_answers_later_ones_at_once() -> None:
    wakeups = Wakeups(SqsConfig(dsn="x", schema="s"))

    async def poll(queue: str) -> None:
        with wakeups.subscribe(queue, wakeups.notified) as subscription:
            await subscription.wait(20)

    async def scenario() -> float:
        polls = [asyncio.create_task(poll(q)) for q in ("a", "a", "b")]
        await asyncio.sleep(0.05)
        assert wakeups.waiters() == 3
        started = time.monotonic()
        wakeups.drain()
        await asyncio.wait_for(asyncio.gather(*polls), 1)
        await asyncio.wait_for(poll("c"), 1)
        assert wakeups.waiters() == 0
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 0.5


def test_a_drain_ends_every_event_stream_even_a_full_one() -> None:
    feed = ChangeFeed(UiConfig(dsn="x", schema="s"))

    async def scenario() -> None:
        feed.loop = asyncio.get_running_loop()
        idle, full = feed.subscribe(), feed.subscribe()
        for i in range(SUBSCRIBER_BACKLOG):
            full.put_nowait(json.dumps({"n": i}))
        feed.drain()
        assert idle.get_nowait() is END and idle.empty()
        assert full.get_nowait() is END and full.empty()
        feed._offer(idle, json.dumps({"type": "change"}))  # a change published after the drain
        assert idle.empty()
        late = feed.subscribe()
        assert late.get_nowait() is END

    asyncio.run(scenario())


@pytest.mark.parametrize("delay", [-1.0, SHUTDOWN_DELAY_MAX + 1])
def test_the_shutdown_delay_is_bounded(delay: float) -> None:
    with pytest.raises(ConfigError, match="--shutdown-delay"):
        SqsConfig(dsn="x", schema="s", shutdown_delay=delay).validate()
    with pytest.raises(ConfigError, match="--shutdown-delay"):
        UiConfig(dsn="x", schema="s", shutdown_delay=delay).validate()
    SqsConfig(dsn="x", schema="s", shutdown_delay=SHUTDOWN_DELAY_MAX).validate()
    UiConfig(dsn="x", schema="s", shutdown_delay=0).validate()
