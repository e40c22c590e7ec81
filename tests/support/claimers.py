"""Claimers racing for one queue in threads while a sampler reads a figure from the database:
the harness of the tests that a running limit holds under concurrent claims."""

from __future__ import annotations

import threading

from tenure.core.db import connect
from tenure.core.repository import Repository


def race_claimers(dsn: str, schema: str, *, claimers: int, batch: int, total: int, sample_sql: str) -> list[int]:
    """Run ``claimers`` threads, each claiming up to ``batch`` jobs of the queue ``default`` and
    completing them at once, until ``total`` jobs are completed; meanwhile one thread runs
    ``sample_sql`` (one row, one integer column ``n``) as often as it can. Returns the samples;
    raises the first error of any claimer."""
    samples: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            with connect(dsn) as c:
                r = Repository(c, schema)
                while not stop.is_set():
                    got = r.claim(f"w{n}", ["default"], batch, 30)
                    if got:
                        r.complete_many(f"w{n}", [(j.id, j.lock_token) for j in got])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def sampler() -> None:
        with connect(dsn) as c:
            while not stop.is_set():
                row = c.execute(sample_sql).fetchone()
                samples.append(int(row["n"]) if row and row["n"] is not None else 0)  # type: ignore[call-overload]

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    with connect(dsn) as c:
        r = Repository(c, schema)
        while sum(s.completed for s in r.queue_stats()) < total and not errors:
            stop.wait(0.05)
    stop.set()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return samples
