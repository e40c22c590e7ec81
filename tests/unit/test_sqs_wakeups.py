"""A long poll's wake-ups without a server: a notification that arrives while the poll claims
(between two waits), or before its first claim ended, is kept, not lost until the next re-check."""

from __future__ import annotations

import asyncio

from tenure.sqs.service import SqsConfig, Wakeups


def test_a_notification_between_two_waits_wakes_the_next_wait_at_once() -> None:
    wakeups = Wakeups(SqsConfig(dsn="x", schema="s"))

    async def scenario() -> None:
        with wakeups.subscribe("a", wakeups.notified) as subscription:
            assert wakeups.waiters() == 1
            await asyncio.wait_for(subscription.wait(0.05), 1)  # times out: nothing notified
            wakeups._wake("b")  # another queue: not this poll's
            wakeups._wake("a")  # while the poll would be claiming, not waiting
            await asyncio.wait_for(subscription.wait(30), 1)
            woken_again = asyncio.create_task(subscription.wait(30))
            await asyncio.sleep(0.05)
            assert not woken_again.done()  # the wake was used up by one wait
            wakeups._wake("a")
            await asyncio.wait_for(woken_again, 1)
        assert wakeups.waiters() == 0

    asyncio.run(scenario())


def test_a_notification_during_the_first_claim_wakes_the_first_wait() -> None:
    wakeups = Wakeups(SqsConfig(dsn="x", schema="s"))

    async def scenario() -> None:
        since = wakeups.notified  # read before the first claim
        wakeups._wake("a")  # the send lands while the first claim runs
        with wakeups.subscribe("a", since) as subscription:
            await asyncio.wait_for(subscription.wait(30), 1)
        with wakeups.subscribe("a", wakeups.notified) as later:
            waiting = asyncio.create_task(later.wait(30))
            await asyncio.sleep(0.05)
            assert not waiting.done()  # an older notification does not wake a later poll
            wakeups.drain()
            await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())
