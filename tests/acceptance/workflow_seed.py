"""A workflow in every step status for the workflow page's tests and screenshot: a diamond
(extract -> transform, validate -> load), then a fan-out of 8 shards joined by merge -> notify,
and audit waiting for one shard. Driven through the repository as workers would: 3 shards
completed, 2 running, 2 pending, 1 dead-lettered, so merge and notify are cancelled."""

from __future__ import annotations

import tenure
from tenure.core.repository import Repository

QUEUE = "reports"
SHARDS = 8


def seed_workflow(repo: Repository, name: str = "nightly-report") -> tuple[int, dict[str, int]]:
    """The workflow's id and each step's job id by name."""
    wf = tenure.Workflow(name)
    extract = wf.add("extract", {"day": "2026-12-04"}, queue=QUEUE)
    transform = wf.add("transform", deps=[extract], queue=QUEUE)
    validate = wf.add("validate", deps=[extract], queue=QUEUE)
    load = wf.add("load", deps=[transform, validate], queue=QUEUE)
    shards = [wf.add("shard", {"n": i}, name=f"shard-{i}", deps=[load], queue=QUEUE) for i in range(1, SHARDS + 1)]
    merge = wf.add("merge", deps=shards, queue=QUEUE)
    wf.add("notify", deps=[merge], queue=QUEUE)
    wf.add("audit", deps=[shards[-1]], queue=QUEUE)
    wid = wf.enqueue(repo.conn, schema=repo.schema)
    ids = dict(zip(["extract", "transform", "validate", "load", *[f"shard-{i}" for i in range(1, SHARDS + 1)],
                    "merge", "notify", "audit"], wf.step_ids, strict=True))
    for expected in (1, 2, 1):  # extract; transform and validate; load
        claimed = repo.claim("w", [QUEUE], expected, 60)
        assert len(claimed) == expected
        for j in claimed:
            assert repo.workflow_step_output_set(j.id, j.lock_token, {"rows": 1000 + j.id})
        assert all(repo.complete_many("w", [(j.id, j.lock_token) for j in claimed]).values())
    # Six shards claimed: three completed, one dead-lettered (merge and notify are cancelled), two
    # left running (shard-8, which audit waits for, among them if claimed); two stay pending.
    claimed = sorted(repo.claim("w", [QUEUE], 6, 600), key=lambda j: (j.id == ids[f"shard-{SHARDS}"], j.id))
    assert len(claimed) == 6
    assert all(repo.complete_many("w", [(j.id, j.lock_token) for j in claimed[:3]]).values())
    assert repo.dead_letter("w", claimed[3].id, claimed[3].lock_token, error="disk full", error_code="io")
    return wid, ids
