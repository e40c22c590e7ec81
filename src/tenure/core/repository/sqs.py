"""The queries of `tenure sqs` (issue 25): SQS queues, their messages (jobs), FIFO deduplication and
the fenced visibility change. Receiving (:meth:`SqsQueries.sqs_receive`, one round trip) claims
with ``job_claim``, a worker's claim (standard queues), or ``sqs_fifo_claim`` (the FIFO lane);
deleting goes through :meth:`LeaseQueries.complete_many`, so SQS traffic is audited like any
worker's."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, cast

from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.lease import PRIORITY_AGING_DEFAULT, ClaimedJob, check_claim_columns, claimed_jobs
from tenure.core.repository.specs import Row
from tenure.core.repository.stores import ClaimStore

SQS_TASK = "sqs.message"
"""The task of every job an SQS client sends (a tenure App handler registers this name)."""
SQS_DEDUP_WINDOW_SECONDS = 300.0
"""SQS's FIFO deduplication window: 5 minutes."""


class SqsQueries(RepositoryBase):
    """SQS queues and messages on one connection; every message write is a CAS on its token."""

    def _insert_or_read(self, name: str, params: dict[str, Any]) -> Row:
        """Run an ``INSERT … ON CONFLICT DO NOTHING`` that else reads the existing row. When a
        concurrent insert of the same key commits while this one waits on it, the statement's
        snapshot predates that row and it finds none: the next run's snapshot sees it."""
        for _ in range(3):
            row = self._one(name, params)
            if row is not None:
                return row
        raise RuntimeError(f"{name}: no row after 3 attempts (the row is being inserted and deleted concurrently)")

    def sqs_secret(self, candidate: bytes) -> bytes:
        """The shared HMAC key of the receipt handles (``candidate`` is stored if none is yet;
        replicas starting together agree on the first one committed)."""
        return bytes(self._insert_or_read("sqs_secret_ensure", {"key": candidate})["hmac_key"])

    def sqs_queue_create(self, name: str, fifo: bool, attributes: dict[str, str], tags: dict[str, str]) -> Row:
        """The queue, inserted (``created`` true) or as another caller made it (``created`` false)."""
        return self._insert_or_read("sqs_queue_create", {"name": name, "fifo": fifo, "attributes": Jsonb(attributes),
                                                         "tags": Jsonb(tags)})

    def sqs_queue_get(self, name: str) -> Row | None:
        return self._one("sqs_queue_get", {"name": name})

    def sqs_queue_list(self, prefix: str, after: str, limit: int) -> list[str]:
        return [r["name"] for r in self._rows("sqs_queue_list", {"prefix": prefix, "after": after, "limit": limit})]

    def sqs_queue_delete(self, name: str) -> bool:
        return self._one("sqs_queue_delete", {"name": name}) is not None

    def sqs_queue_purge(self, name: str, worker_id: str) -> int:
        row = self._one("sqs_queue_purge", {"name": name, "worker_id": worker_id})
        return int(row["purged"]) if row else 0

    def sqs_queue_set_attributes(self, name: str, attributes: dict[str, str], removed: Sequence[str] = ()) -> bool:
        """Merge ``attributes`` into the queue's and remove those named in ``removed``."""
        return self._one("sqs_queue_set_attributes", {"name": name, "attributes": Jsonb(attributes),
                                                      "removed": list(removed)}) is not None

    def sqs_retention_expire(self, worker_id: str, limit: int, default_seconds: float) -> dict[str, int]:
        """Delete up to ``limit`` messages past their queue's MessageRetentionPeriod (waiting or
        in flight), audited (``expired``, reason ``retention``); how many per queue."""
        return {r["queue_name"]: int(r["expired"]) for r in self._rows("sqs_message_retention_expire", {
            "worker_id": worker_id, "limit": limit, "default": float(default_seconds)})}

    def sqs_move_task_start(self, handle: str, source: str, source_arn: str, target: str,
                            destination_arn: str | None, rate: int | None, total: int, runner: str) -> bool:
        """Record a running move task; False if the source already has one running."""
        return self._one("sqs_move_task_start", {
            "handle": handle, "source": source, "source_arn": source_arn, "target": target,
            "destination_arn": destination_arn, "rate": rate, "total": total, "runner": runner}) is not None

    def sqs_move_task_step(self, handle: str, runner: str, source: str, target: str, limit: int) -> Row:
        """One batch of ``runner``'s running task: ``status`` (None: not its running task any
        more), ``moved`` (the task's total) and ``step`` (this batch's)."""
        row = self._one("sqs_move_task_step", {"handle": handle, "runner": runner, "source": source,
                                               "target": target, "limit": limit, "channel": self.channel})
        assert row is not None
        return row

    def sqs_move_task_fail(self, handle: str, runner: str, failure: str) -> bool:
        return self._one("sqs_move_task_fail", {"handle": handle, "runner": runner, "failure": failure}) is not None

    def sqs_move_task_cancel(self, handle: str) -> Row | None:
        """``moved``, ``status`` and ``cancelled`` (False: the task was not running); None: unknown."""
        return self._one("sqs_move_task_cancel", {"handle": handle})

    def sqs_move_task_list(self, source_arn: str, limit: int) -> list[Row]:
        return self._rows("sqs_move_task_list", {"source_arn": source_arn, "limit": limit})

    def sqs_move_task_adopt(self, runner: str, stale_seconds: float) -> list[Row]:
        """Running tasks whose heartbeat is older than ``stale_seconds``, now ``runner``'s."""
        return self._rows("sqs_move_task_adopt", {"runner": runner, "stale": float(stale_seconds)})

    def sqs_queue_lock(self, name: str) -> Row | None:
        """The queue's name, fifo and attributes, its row locked until the transaction ends."""
        return self._one("sqs_queue_lock", {"name": name})

    def sqs_queue_tag(self, name: str, tags: dict[str, str]) -> bool:
        return self._one("sqs_queue_tag", {"name": name, "tags": Jsonb(tags)}) is not None

    def sqs_queue_untag(self, name: str, keys: Sequence[str]) -> bool:
        return self._one("sqs_queue_untag", {"name": name, "keys": list(keys)}) is not None

    def sqs_queue_counts(self, name: str, worker_id: str) -> Row:
        row = self._one("sqs_queue_counts", {"name": name, "worker_id": worker_id})
        assert row is not None
        return row

    def sqs_dead_letter_sources(self, arn: str) -> list[str]:
        return [r["name"] for r in self._rows("sqs_queue_dead_letter_sources", {"arn": arn})]

    def sqs_send(self, queue: str, payloads: Sequence[str], delays: Sequence[float], max_attempts: int,
                 trace_contexts: Sequence[str | None] | None = None,
                 flow_keys: Sequence[str | None] | None = None) -> list[int]:
        """Insert messages (JSON payload texts) in order; their job ids, in the same order.
        ``trace_contexts`` (one W3C traceparent or None per message: its send span) go into
        ``jobs.trace_context``, so the attempts of each message are children of its send span;
        ``flow_keys`` (one flow key or None per message: a standard queue's MessageGroupId) into
        ``jobs.flow_key``."""
        contexts = list(trace_contexts) if trace_contexts is not None else [None] * len(payloads)
        if len(contexts) != len(payloads):
            raise ValueError(f"sqs_send: {len(payloads)} payloads but {len(contexts)} trace contexts")
        keys = list(flow_keys) if flow_keys is not None else [None] * len(payloads)
        if len(keys) != len(payloads):
            raise ValueError(f"sqs_send: {len(payloads)} payloads but {len(keys)} flow keys")
        rows = self._rows("sqs_message_send", {"queue": queue, "task": SQS_TASK, "payloads": list(payloads),
                                               "delays": [float(d) for d in delays], "max_attempts": max_attempts,
                                               "trace_contexts": contexts, "flow_keys": keys,
                                               "channel": self.channel})
        return [int(r["id"]) for r in rows]

    def sqs_fifo_lock(self, queue: str, lane: str) -> None:
        """Serialise the ``send`` or the ``receive`` lane of a FIFO queue for this transaction."""
        self._rows("sqs_fifo_lock", {"queue": queue, "lane": lane})

    def sqs_dedup_lookup(self, queue: str, dedup_ids: Sequence[str]) -> dict[str, int]:
        return {r["dedup_id"]: int(r["job_id"]) for r in self._rows("sqs_dedup_lookup", {
            "queue": queue, "dedup_ids": list(dedup_ids), "window": SQS_DEDUP_WINDOW_SECONDS})}

    def sqs_dedup_record(self, queue: str, dedup: dict[str, int]) -> None:
        if dedup:
            self._rows("sqs_dedup_record", {"queue": queue, "dedup_ids": list(dedup),
                                            "job_ids": list(dedup.values())})

    def sqs_expire(self, queue: str, worker_id: str, dlq: str | None, max_receive: int | None) -> Row:
        """Return the queue's expired in-flight messages to it (or redrive them to ``dlq``)."""
        row = self._one("sqs_message_expire", {"queue": queue, "worker_id": worker_id, "dlq": dlq,
                                               "max_receive": max_receive})
        assert row is not None
        return row

    def sqs_receive(self, worker_id: str, queue: str, limit: int, lease: float, *, fifo: bool,
                    dlq: str | None, max_receive: int | None) -> tuple[list[ClaimedJob], dict[int, tuple[int, int]]]:
        """One ReceiveMessage attempt in one round trip: the claimed messages and ``{job id:
        (first receive, sent)}`` in epoch ms.

        Three statements (four on a FIFO queue) go in one pipeline with one Sync, so on this
        autocommit connection they run as one implicit transaction: the expired visibility
        timeouts of the queue first (``sqs_message_expire``, redrive to ``dlq`` past
        ``max_receive``), then the claim (``job_claim`` ungated, or ``sqs_fifo_lock`` and
        ``sqs_fifo_claim``, the advisory lock held to the commit), then the first receives of
        what this transaction claimed (``sqs_message_first_receive_claimed``: its rows are
        those whose ``started_at`` is the transaction's ``now()``). A failure rolls back all
        three. The connection must be idle, in autocommit.

        A queue with a global running limit makes the ungated claim take nothing and say so;
        the expiry has then committed and the claim runs gated (:meth:`ClaimQueries.claim`),
        its first receives by id: a few more round trips, on limited queues only."""
        base = {"queue": queue, "worker_id": worker_id}
        claim = {"queues": [queue], "limit": limit, "lease": float(lease), "worker_id": worker_id,
                 "aging": PRIORITY_AGING_DEFAULT}
        with (self.conn.cursor() as expire, self.conn.cursor() as lock,
              self.conn.cursor(row_factory=tuple_row) as cur, self.conn.cursor(row_factory=dict_row) as firsts):
            with self.conn.pipeline():
                expire.execute(self._q["sqs_message_expire"], {**base, "dlq": dlq, "max_receive": max_receive})
                if fifo:
                    lock.execute(self._q["sqs_fifo_lock"], {"queue": queue, "lane": "receive"})
                    cur.execute(self._q["sqs_fifo_claim"], {**base, "limit": limit, "lease": float(lease)})
                else:
                    cur.execute(self._q["job_claim"], claim)
                firsts.execute(self._q["sqs_message_first_receive_claimed"], base)
            rows = cur.fetchall()
            check_claim_columns(cur.description)
            times = {int(r["job_id"]): (int(r["first_ms"]), int(r["sent_ms"])) for r in firsts.fetchall()}
        if rows and rows[-1][0] is None:  # the ungated claim's marker: a running limit applies
            jobs = cast(ClaimStore, self).claim(worker_id, [queue], limit, lease)  # a Repository is both
            return jobs, self.sqs_first_receive([j.id for j in jobs])
        jobs = claimed_jobs(rows)
        return jobs, {j.id: times[j.id] for j in jobs if j.id in times}

    def sqs_first_receive(self, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        """``{job id: (first receive, sent)}`` in epoch ms, recording the first receive of
        messages received for the first time."""
        if not ids:
            return {}
        return {int(r["job_id"]): (int(r["first_ms"]), int(r["sent_ms"]))
                for r in self._rows("sqs_message_first_receive", {"ids": list(ids)})}

    def sqs_change_visibility(self, worker_id: str, changes: Sequence[tuple[int, uuid.UUID, float]],
                              cap: float) -> list[str]:
        """Per change, in order: ``changed``, ``capped`` (past ``cap`` seconds after its receive)
        or ``stale`` (the token is no longer the message's)."""
        rows: list[Any] = self._rows("sqs_message_visibility", {
            "ids": [c[0] for c in changes], "tokens": [c[1] for c in changes],
            "timeouts": [float(c[2]) for c in changes], "cap": float(cap), "worker_id": worker_id,
            "channel": self.channel})
        return [str(r["outcome"]) for r in rows]

    def sqs_message_move(self, source: str, target: str, limit: int) -> int:
        """Move up to ``limit`` visible messages from ``source`` to ``target`` (a move task's step)."""
        row = self._one("sqs_message_move", {"source": source, "target": target, "limit": limit,
                                             "channel": self.channel})
        return int(row["moved"]) if row else 0
