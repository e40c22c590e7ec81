"""Claims (R1, and issue 38's flow control): the hot one-statement claim, the gated claim of queues
with a running limit, and the fair claim of queues with flow keys or rate limits (``flow_claim``,
docs/flow.md). A claim hands each job a fresh lock token and fence; what ends the attempt is the
lease area's (:mod:`tenure.core.repository.lease`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.lease import PRIORITY_AGING_DEFAULT, ClaimedJob, check_claim_columns, claimed_jobs


class _ControlRowsMissing(Exception):
    """Queues to be claimed by ``job_claim_flow`` have no control row yet."""

    def __init__(self, queues: list[str]) -> None:
        super().__init__(", ".join(queues))
        self.queues = queues


class ClaimQueries(RepositoryBase):
    """Claims: which ready jobs a worker (or an SQS receive) takes, within every limit."""

    rate_wait: float | None = None
    """After a claim in which a rate limit held a job back: seconds (by the database clock) until
    the earliest held-back job's bucket has its tokens again; None otherwise. A worker looks again
    then rather than a poll interval later."""

    def claim(self, worker_id: str, queues: Sequence[str], limit: int, lease: float,
              aging: float = PRIORITY_AGING_DEFAULT) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs: paused queues are skipped, a queue's global ``max_running``,
        its per-key limits and its jobs' rate limits (docs/flow.md) cap what is taken, jobs ready
        longer than ``aging`` seconds go first (oldest first), then priority order; on a queue
        whose jobs carry flow keys, round-robin over the keys by weight.

        Without a limit, a flow key or a rate limit on any of ``queues`` this is one autocommit
        statement (``job_claim``, one round trip). Otherwise, in one transaction (sent as one
        pipeline): the first statement locks the control rows of the limited queues, so the
        claim's snapshot (``job_claim_gated``) sees every committed claim of those queues (a
        count inside one statement would race); then each queue with keys or rate limits is
        claimed by ``job_claim_flow`` (one more round trip each), after the others. The ungated
        statement finds out by itself (it then claims nothing and says so); this repository
        remembers it and claims gated until the gate finds nothing to gate any more, so a worker
        on such a queue pays no extra round trip per claim. A queue claimed by ``job_claim_flow``
        for the first time gets its control row first, in a transaction of its own, and the claim
        starts over (once): inside the claim, another claim's uncommitted insert of that row could
        make it wait while holding a lock the other one wants.

        The hot path: rows arrive as tuples in :class:`ClaimedJob`'s field order (checked
        against the statement's columns on every call) and become jobs without a dict per row
        or the frozen ``__init__``."""
        params = {"queues": list(queues), "limit": limit, "lease": float(lease),
                  "worker_id": worker_id, "aging": float(aging)}
        own_tx = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        self.rate_wait = None
        rows: list[tuple[Any, ...]] = []
        if own_tx and not self._claim_gated:
            with self.conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(self._q["job_claim"], params)
                rows = cur.fetchall()
                check_claim_columns(cur.description)
            if not rows or rows[-1][0] is not None:
                return claimed_jobs(rows)
            self._claim_gated = True  # a requested queue has a limit or keys: nothing was claimed
        try:
            rows, gated = self._claim_gated_tx(params, own_tx, rows_made=False)
        except _ControlRowsMissing as missing:
            self._rows("queue_flow_rows_create", {"queues": missing.queues})
            rows, gated = self._claim_gated_tx(params, own_tx, rows_made=True)
        self._claim_gated = bool(gated)
        return claimed_jobs(rows)

    def _claim_gated_tx(self, params: dict[str, Any], own_tx: bool, *,
                        rows_made: bool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The gated claim's transaction: the gate, the gated statement, then each flow queue."""
        limit = int(params["limit"])
        with self.conn.cursor(row_factory=tuple_row) as gate, self.conn.cursor(row_factory=tuple_row) as cur:
            with contextlib.ExitStack() as stack:
                if own_tx:
                    stack.enter_context(self.conn.pipeline())
                    stack.enter_context(self.conn.transaction())
                gate.execute(self._q["queue_claim_gate"], params)
                cur.execute(self._q["job_claim_gated"], params)
                # In a pipeline the results (and the descriptions) arrive at its sync: one round trip.
                gated = gate.fetchall()
                rows = cur.fetchall()
                check_claim_columns(cur.description)
                flows = [name for name, flow, _ in gated if flow]
                missing = [name for name, flow, has_row in gated if flow and not has_row]
                if missing and own_tx and not rows_made:
                    raise _ControlRowsMissing(missing)  # rolls this transaction back: nothing is lost
                if missing:
                    cur.execute(self._q["queue_flow_rows_create"], {"queues": missing})
                if len(flows) > 1 and len(rows) < limit:
                    cur.execute(self._q["queue_flow_lock"], {"queues": flows})
                    cur.fetchall()
                for queue in flows:
                    if len(rows) >= limit:
                        break
                    cur.execute(self._q["job_claim_flow"], {**params, "queue": queue, "limit": limit - len(rows)})
                    more = cur.fetchall()
                    check_claim_columns(cur.description)
                    if more and more[-1][0] is None:  # a rate limit held a job back: when it may go
                        wait = float(more.pop()[14])
                        self.rate_wait = wait if self.rate_wait is None else min(self.rate_wait, wait)
                    rows += more
        return rows, gated
