"""After a reconnect, re-check the outcomes this worker last saw acknowledged (issue 22, item 8).

With asynchronous replication a failover can promote a replica that lacks the last
transactions the old primary acknowledged (docs/idempotency.md, "Across a database failover").
A worker then believes a job completed, or an effect's success recorded, that the new primary
never heard of. This module remembers the last ``remember`` acknowledged outcomes of the current
connection epoch (an epoch ends at any reconnect the worker counts in
``tenure_db_reconnects_total``) and, once connected again, re-reads them:

- a completion the database does not hold, whose job still runs under this attempt's token, is
  written again (the same compare-and-set; the handler did finish): ``rewritten``;
- a completion that is missing and can no longer be written (the job was reaped or claimed
  again) is logged and counted ``in_doubt``: the job runs again;
- an effect whose acknowledged success is missing is made *in doubt* in the execution store, so
  the next attempt reconciles with the provider instead of running the body as new (a lost row
  would otherwise be claimed as fresh): ``in_doubt``.

Each is counted in ``tenure_worker_outcomes_in_doubt_total{kind, resolution}``. Limits: only the
last ``remember`` outcomes are re-checked, and only after this process reconnects; an
acknowledgement older than that, or one lost while the process is dead, is not seen. The
window this leaves is the replication lag at the failover, which synchronous replication closes.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter

from tenure.core.errors import ConfigError
from tenure.core.repository import ExecutionStore, LeaseStore

log = logging.getLogger("tenure.worker")


class RecheckStore(LeaseStore, ExecutionStore, Protocol):
    """What the re-check uses: the completions' recheck and rewrite (lease area), the effects'
    recheck and in-doubt mark (executions area)."""

REMEMBER_DEFAULT = 1024
"""Acknowledged outcomes (completions and effect successes, each) remembered per connection
epoch: well above what a worker acknowledges within the lag of an asynchronous replica (tens of
milliseconds), at a few dozen bytes each."""

KINDS = ("completion", "effect")
"""The ``kind`` label of ``tenure_worker_outcomes_in_doubt_total``."""
RESOLUTIONS = ("rewritten", "in_doubt")
"""The ``resolution`` label: written again under the same token, or left in doubt."""


@dataclass(frozen=True)
class RecheckConfig:
    """How many acknowledged outcomes are re-checked after a reconnect."""

    remember: int = REMEMBER_DEFAULT

    def validate(self) -> None:
        if self.remember < 0:
            raise ConfigError("remembered outcomes must be >= 0")


@dataclass(frozen=True)
class AckedCompletion:
    job_id: int
    token: uuid.UUID


@dataclass(frozen=True)
class AckedEffect:
    key: str
    job_id: int
    token: uuid.UUID


@dataclass(frozen=True)
class RecheckResult:
    """What one re-check found; each list holds the outcomes missing on the database."""

    checked: int
    rewritten: tuple[AckedCompletion, ...] = ()
    completions_in_doubt: tuple[AckedCompletion, ...] = ()
    effects_in_doubt: tuple[AckedEffect, ...] = ()


class OutcomeRecheck:
    """The one owner of the remembered acknowledgements, behind one lock.

    ``completed`` and ``effect_succeeded`` are called once the database acknowledged;
    ``epoch_ended`` by whoever reconnects; ``run_once`` on a fresh connection (the acker's)
    re-reads what the last epoch acknowledged. ``counter`` is the metric's labelled parent
    (``labels(kind, resolution)``) or None.
    """

    def __init__(self, config: RecheckConfig = RecheckConfig(), *, worker_id: str,
                 counter: Counter | None = None) -> None:
        config.validate()
        self.config, self.worker_id = config, worker_id
        self._counter = counter
        self._lock = threading.Lock()
        self._completions: deque[AckedCompletion] = deque(maxlen=config.remember)
        self._effects: deque[AckedEffect] = deque(maxlen=config.remember)
        self._checking: tuple[list[AckedCompletion], list[AckedEffect]] = ([], [])
        self._pending = False

    # -- fed by the acker and the effects ------------------------------------------------
    def completed(self, acked: list[tuple[int, uuid.UUID]]) -> None:
        if self.config.remember:
            with self._lock:
                self._completions.extend(AckedCompletion(job_id, token) for job_id, token in acked)

    def effect_succeeded(self, key: str, job_id: int, token: uuid.UUID) -> None:
        if self.config.remember:
            with self._lock:
                self._effects.append(AckedEffect(key, job_id, token))

    def epoch_ended(self) -> None:
        """A connection was re-opened: what was acknowledged before may be gone (a failover)."""
        with self._lock:
            if self._completions or self._effects:
                self._pending = True

    @property
    def pending(self) -> bool:
        return self._pending

    def forget(self) -> None:
        """Drop what is pending (the re-check failed for a reason a retry would not fix)."""
        with self._lock:
            self._checking, self._pending = ([], []), False

    # -- the re-check ----------------------------------------------------------------------
    def run_once(self, repo: RecheckStore) -> RecheckResult:
        """Re-read the last epoch's acknowledged outcomes on ``repo`` (a fresh connection) and
        settle the missing ones. A database error leaves them pending for the next try."""
        with self._lock:
            if not self._pending:
                return RecheckResult(0)
            old_c, old_e = self._checking
            completions = old_c + list(self._completions)
            effects = old_e + list(self._effects)
            self._completions.clear()
            self._effects.clear()
            self._checking, self._pending = (completions, effects), False
        try:
            result = self._check(repo, completions, effects)
        except BaseException:
            with self._lock:
                self._pending = True
            raise
        with self._lock:
            self._checking = ([], [])
        return result

    def _check(self, repo: RecheckStore, completions: list[AckedCompletion],
               effects: list[AckedEffect]) -> RecheckResult:
        rows = repo.completion_recheck([(c.job_id, c.token) for c in completions]) if completions else []
        missing = [r for r in rows if not r["held"]]
        writable = [AckedCompletion(int(r["id"]), r["token"]) for r in missing if r["token_current"]]
        accepted = repo.complete_many(self.worker_id, [(c.job_id, c.token) for c in writable]) if writable else {}
        rewritten = tuple(c for c in writable if accepted.get(c.job_id))
        lost = tuple(c for c in (AckedCompletion(int(r["id"]), r["token"]) for r in missing) if c not in rewritten)
        effects_lost: list[AckedEffect] = []
        if effects:
            by_pair = {(e.key, e.token): e for e in effects}
            for r in repo.execution_recheck([(e.key, e.token) for e in effects]):
                if r["status"] == "succeeded":
                    continue
                eff = by_pair[(r["key"], r["token"])]
                repo.execution_mark_in_doubt(eff.key, eff.job_id, eff.token)
                effects_lost.append(eff)
        for c in rewritten:
            log.warning("acknowledged completion of job %s was missing after a reconnect (failover?); "
                        "written again under its token", c.job_id, extra={"job_id": c.job_id, "lock_token": c.token})
        for c in lost:
            log.error("acknowledged completion of job %s is missing after a reconnect (failover?) and its lease "
                      "moved on: the job runs again (or already did)", c.job_id, extra={"job_id": c.job_id, "lock_token": c.token})
        for e in effects_lost:
            log.error("acknowledged success of effect %r is missing after a reconnect (failover?); the key is "
                      "now in doubt", e.key, extra={"job_id": e.job_id, "lock_token": e.token})
        self._count("completion", "rewritten", len(rewritten))
        self._count("completion", "in_doubt", len(lost))
        self._count("effect", "in_doubt", len(effects_lost))
        return RecheckResult(len(completions) + len(effects), rewritten, lost, tuple(effects_lost))

    def _count(self, kind: str, resolution: str, n: int) -> None:
        if n and self._counter is not None:
            self._counter.labels(kind, resolution).inc(n)
