"""The faults of an HA chaos run: failovers of a Patroni cluster, injected one after the other.

Kinds: ``switchover`` (``patronictl switchover --force``, planned), ``kill`` (SIGKILL of the
primary's postmaster) and ``isolate`` (the primary's network link goes down; healed once a new
primary took a write). Each waits for ``calm`` seconds of healthy cluster first. Per failover,
:class:`FailoverRecord` holds when writes stopped and when a new primary first accepted one through
the multi-host DSN (a probe writes every :data:`PROBE_INTERVAL` seconds).

Limits: ``isolate`` needs network namespaces; one failover at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.chaos.journal import Journal
from tenure.chaos.patroni import ClusterError, PatroniCluster
from tenure.chaos.store import ChaosStore
from tenure.core.db import connect
from tenure.core.errors import first_line

FAULT_KINDS = ("switchover", "kill", "isolate")
FAILOVER_TIMEOUT = 330.0
REJOIN_TIMEOUT = 240.0
PROBE_INTERVAL = 0.1


@dataclass
class FailoverRecord:
    kind: str
    old_primary: str
    new_primary: str | None = None
    started: float = 0.0
    """Epoch seconds of the injection (this machine's clock, which the cluster and the ledger share)."""
    unavailable_from: float = 0.0
    """The injection, or the last write the old primary accepted after it, whichever is later."""
    first_write: float | None = None
    """The first write a new primary accepted through the multi-host DSN."""
    healthy_again: float | None = None
    stall: float | None = None
    """The longest gap between two completions acknowledged to workers that overlaps the outage."""
    error: str | None = None

    @property
    def failover_seconds(self) -> float | None:
        """Writes unavailable: from the old primary's last write (or the fault) to the new primary's first."""
        return None if self.first_write is None else round(self.first_write - self.unavailable_from, 3)

    @property
    def stall_seconds(self) -> float | None:
        """Workers stalled: the longest gap between acknowledged completions across the outage."""
        return None if self.stall is None else round(self.stall, 3)


class Failovers:
    """Injects ``kinds`` in order on a thread of its own (:meth:`start`); :attr:`done` is set at the end.

    ``enqueued`` reports the producer's count for the progress lines; ``done`` may be shared with
    whoever waits for the end (the producer). An error ends the injection
    and is kept in :attr:`error` for the main loop.
    """

    def __init__(self, cluster: PatroniCluster, kinds: list[str], *, dsn: str, schema: str, calm: float,
                 journal: Journal, enqueued: Callable[[], int], done: threading.Event | None = None) -> None:
        self.cluster = cluster
        self.kinds = kinds
        self.dsn = dsn
        self.schema = schema
        self.calm = calm
        self.journal = journal
        self.enqueued = enqueued
        self.records: list[FailoverRecord] = []
        self.done = done if done is not None else threading.Event()
        """Set once the last failover is over (or the injection failed)."""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-faults", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            for i, kind in enumerate(self.kinds):
                time.sleep(self.calm)
                self.cluster.wait_healthy(REJOIN_TIMEOUT)
                self.journal.say(f"chaos-ha: failover {i + 1}/{len(self.kinds)}: {kind} "
                                 f"(primary {self.cluster.leader()}, {self.enqueued()} enqueued)")
                rec = self.one(kind)
                self.records.append(rec)
                self.journal.say(f"chaos-ha:   {rec.old_primary} -> {rec.new_primary}: first write after "
                                 f"{rec.failover_seconds}s" + (f" ({rec.error})" if rec.error else ""))
            time.sleep(self.calm)
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.error = exc
        finally:
            self.done.set()

    def one(self, kind: str) -> FailoverRecord:
        """Inject one failover, measure it, heal and wait for the cluster to be healthy again."""
        cluster = self.cluster
        old = cluster.leader()
        if old is None:
            raise ClusterError("no leader before the failover")
        old_host = cluster.member_host(old)
        rec = FailoverRecord(kind, old)
        switch: threading.Thread | None = None
        switch_error: list[BaseException] = []
        rec.started = time.time()
        if kind == "switchover":
            def run_switchover() -> None:
                try:
                    cluster.switchover()
                except BaseException as exc:  # noqa: BLE001 - reported with the record
                    switch_error.append(exc)
            switch = threading.Thread(target=run_switchover, name="chaos-switchover", daemon=True)
            switch.start()
        elif kind == "kill":
            cluster.kill_postmaster(old)
        elif kind == "isolate":
            cluster.isolate(old)
        deadline = time.monotonic() + FAILOVER_TIMEOUT
        self._probe_until_new_primary(rec, old_host, deadline)
        if switch is not None:
            switch.join(timeout=FAILOVER_TIMEOUT)
        try:
            rec.new_primary = cluster.wait_leader(other_than=old, timeout=max(1.0, deadline - time.monotonic()))
        except ClusterError as exc:
            rec.error = first_line(exc)
        if switch_error:
            rec.error = first_line(switch_error[0])
        if kind == "isolate":
            cluster.heal(old)
        try:
            cluster.wait_healthy(REJOIN_TIMEOUT)
            rec.healthy_again = time.time()
        except ClusterError as exc:
            rec.error = (rec.error or "") + f" rejoin: {first_line(exc)}"
        return rec

    def _probe_until_new_primary(self, rec: FailoverRecord, old_host: str, deadline: float) -> None:
        """Write through the multi-host DSN until a server other than ``old_host`` accepts a write:
        sets ``rec.first_write``, and ``rec.unavailable_from`` to the fault or the last write the old
        primary accepted, whichever is later (``patronictl`` takes seconds before it demotes)."""
        conn: psycopg.Connection[Any] | None = None
        rec.unavailable_from = rec.started
        try:
            while time.monotonic() < deadline:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = connect(self.dsn, application_name="tenure-chaos-probe")
                    sent = time.time()
                    row = ChaosStore(conn, self.schema).ha_probe()
                    if str(row["host"]) != old_host:
                        rec.first_write = time.time()
                        return
                    rec.unavailable_from = max(rec.unavailable_from, sent)
                except psycopg.Error:
                    if conn is not None:
                        conn.close()
                    conn = None
                time.sleep(PROBE_INTERVAL)
        finally:
            if conn is not None:
                conn.close()
