"""The claim loop's self-pipe wake-up never strands a waiter when set() races with clear()."""

from __future__ import annotations

import threading
import time

from tenure.worker.notify import Wakeup


def test_set_racing_with_clear_never_strands_the_waiter() -> None:
    wakeup = Wakeup()
    stop = threading.Event()
    misses = []

    def setter() -> None:
        while not stop.is_set():
            wakeup.set()
            time.sleep(0)

    threads = [threading.Thread(target=setter) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            wakeup.clear()
            started = time.monotonic()
            wakeup.wait(0.3)
            if time.monotonic() - started > 0.25:
                misses.append(1)
    finally:
        stop.set()
        for t in threads:
            t.join()
        wakeup.close()
    assert not misses


def test_wait_times_out_without_a_set() -> None:
    wakeup = Wakeup()
    try:
        started = time.monotonic()
        wakeup.wait(0.05)
        assert time.monotonic() - started >= 0.04
    finally:
        wakeup.close()


def test_lease_signal_wakes_waiters_set_before_or_during_the_wait() -> None:
    from tenure.worker.context import LeaseSignal

    early = LeaseSignal()
    early.set()
    assert early.is_set() and early.wait(0) is True
    late = LeaseSignal()
    assert late.wait(0.01) is False and not late.is_set()
    threading.Timer(0.05, late.set).start()
    assert late.wait(5) is True
