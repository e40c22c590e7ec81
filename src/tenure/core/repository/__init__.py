"""The repository: the only package that runs SQL (house style 1).

Every method executes one named query from ``sql/queries/<area>.sql`` on the connection it was given.
With an autocommit connection each call is its own transaction; :meth:`Repository.enqueue`
also works inside a caller's open transaction (transactional outbox, R17). Every write that
changes a claimed job is a compare-and-set on ``(id, status='running', locked_by, lock_token)``;
a rejected stale write is recorded in ``job_events`` and never changes the row (R2).
No caching and no retries here: callers decide how to react to errors.

One module per area, each a mixin over :class:`~tenure.core.repository.base.RepositoryBase`;
:class:`Repository` is all of them on one connection and schema. The queries of an area are in the
file of the same name, ``sql/queries/<area>.sql``:

- ``specs``: what an enqueue is made of (JobSpec, payload encoding, priorities); no SQL;
- ``schema``: migrations, the version check, claim statistics;
- ``enqueue``: one job or a batch;
- ``claim``: the claims, hot, gated and fair (R1; flow control, docs/flow.md);
- ``lease``: heartbeat and the fenced writes of an attempt (R1-R5);
- ``reaping``: the reaper's candidates, CAS and cycle counter (R7);
- ``reads``: a job, its events, queue figures, the doctor's views;
- ``registry``: workers (R9); ``executions``: the execution store (R14);
- ``dlq``: dead letters (R12); ``control``: cancel, retry, pause, limits;
- ``periodic``: periodic schedules; ``sqs``: the queues and messages of `tenure sqs`;
- ``browse``: the job browser of `tenure ui` and `tenure jobs list` (one filter for pages, counts,
  bulk actions and the CLI's listing);
- ``flow``: per-key running limits, weights and rate limits, and their status (the claim
  enforces them);
- ``series``: the job browser's charts per time bucket, and the queue depth samples;
- ``workflows``: workflows (DAGs of steps) and batches with callbacks, their outputs and
  listings; ``plans``: what a workflow or batch is made of, checked whole (no SQL);
- ``history``: where completed jobs live (day partitions, the batched move, retention of
  completed and cancelled jobs); :mod:`tenure.reaper.history` decides when they run.

Callers see an area through its face (``stores``: :class:`LeaseStore`, :class:`BrowseStore`,
:class:`SqsStore`, ...; a protocol per mixin with exactly its public methods), or a small
combination of faces, never the whole :class:`Repository`; only construction sites name it. No
mixin touches another's private names: what two areas share is public (``lease.claimed_jobs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure.core.repository.browse import COUNT_BUDGET_MS_DEFAULT, COUNT_CAP_DEFAULT, BrowseQueries, JobCount, JobFilter
from tenure.core.repository.claim import ClaimQueries
from tenure.core.repository.control import ControlQueries
from tenure.core.repository.dlq import DeadLetterQueries
from tenure.core.repository.enqueue import EnqueueQueries
from tenure.core.repository.executions import ExecutionQueries
from tenure.core.repository.flow import FlowQueries
from tenure.core.repository.history import (
    HISTORY_DAYS_AHEAD_DEFAULT,
    HISTORY_DAYS_BACK_DEFAULT,
    HISTORY_MOVE_BATCH_DEFAULT,
    PRUNE_BATCH_DEFAULT,
    HistoryPartition,
    HistoryQueries,
)
from tenure.core.repository.lease import (
    PRIORITY_AGING_DEFAULT,
    REJECTED_WRITE_EVENTS,
    ClaimedJob,
    HeartbeatOutcome,
    LeaseQueries,
)
from tenure.core.repository.periodic import PeriodicQueries
from tenure.core.repository.reads import ReadQueries
from tenure.core.repository.reaping import ReapCandidate, ReapDecision, Reaped, ReaperQueries
from tenure.core.repository.registry import RegistryQueries
from tenure.core.repository.schema import STATS_STALE_FRACTION, STATS_STALE_MIN_ROWS, SchemaQueries
from tenure.core.repository.series import SeriesQueries
from tenure.core.repository.specs import (
    DELAY_MAX_SECONDS,
    MAX_ATTEMPTS_LIMIT,
    MAX_PAYLOAD_BYTES_DEFAULT,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    EnqueueResult,
    JobSpec,
    Row,
    check_priority,
    encode_payload,
    iter_batches,
    max_payload_bytes,
)
from tenure.core.repository.sqs import SQS_TASK, SqsQueries
from tenure.core.repository.stores import (
    BrowseStore,
    ClaimStore,
    Connected,
    ControlStore,
    DeadLetterStore,
    EnqueueStore,
    ExecutionStore,
    FlowStore,
    HistoryStore,
    LeaseStore,
    PeriodicStore,
    ReadStore,
    ReapingStore,
    RegistryStore,
    SchemaStore,
    SeriesStore,
    SqsStore,
    WorkflowStore,
)
from tenure.core.repository.workflows import WorkflowQueries

__all__ = [
    "COUNT_BUDGET_MS_DEFAULT", "COUNT_CAP_DEFAULT", "DELAY_MAX_SECONDS", "HISTORY_DAYS_AHEAD_DEFAULT",
    "HISTORY_DAYS_BACK_DEFAULT", "HISTORY_MOVE_BATCH_DEFAULT", "HistoryPartition", "MAX_ATTEMPTS_LIMIT", "MAX_PAYLOAD_BYTES_DEFAULT", "PRIORITY_AGING_DEFAULT",
    "PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN", "PRUNE_BATCH_DEFAULT", "REJECTED_WRITE_EVENTS", "SQS_TASK", "STATS_STALE_FRACTION",
    "STATS_STALE_MIN_ROWS", "ClaimedJob", "EnqueueResult", "HeartbeatOutcome", "JobCount", "JobFilter", "JobSpec", "ReapCandidate",
    "ReapDecision", "Reaped", "Repository", "Row", "check_priority", "encode_payload", "iter_batches",
    "max_payload_bytes",
    # The faces (tenure.core.repository.stores).
    "BrowseStore", "ClaimStore", "Connected", "ControlStore", "DeadLetterStore", "EnqueueStore", "ExecutionStore", "FlowStore",
    "HistoryStore", "LeaseStore", "PeriodicStore", "ReadStore", "ReapingStore", "RegistryStore", "SchemaStore", "SeriesStore",
    "SqsStore", "WorkflowStore",
]


class Repository(SchemaQueries, EnqueueQueries, ClaimQueries, LeaseQueries, ReaperQueries, ReadQueries, RegistryQueries,
                 ExecutionQueries, DeadLetterQueries, ControlQueries, PeriodicQueries, SqsQueries, BrowseQueries,
                 HistoryQueries, FlowQueries, SeriesQueries, WorkflowQueries):
    """Named queries bound to one connection and one schema: every area's queries together."""


if TYPE_CHECKING:
    def _faces(repo: Repository) -> tuple[Connected, SchemaStore, EnqueueStore, ClaimStore, LeaseStore, ReapingStore,
                                          ReadStore, RegistryStore, ExecutionStore, DeadLetterStore, ControlStore,
                                          PeriodicStore, SqsStore, BrowseStore, HistoryStore, FlowStore,
                                          SeriesStore, WorkflowStore]:
        """Never called: mypy checks here that a Repository is every face its callers declare."""
        return (repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo, repo,
                repo)
