"""The execution store (R14): one row per idempotency key, claimed, succeeded or given up."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class ExecutionQueries(RepositoryBase):
    """Effectively-once effects' keys."""

    def execution_list_for_job(self, job_id: int) -> list[Row]:
        """The effects (execution-store records) of one job's attempts."""
        return self._rows("execution_list_for_job", {"id": job_id})

    def execution_claim(self, key: str, job_id: int, token: uuid.UUID, lease: float) -> Row:
        """``{outcome: claimed | in_doubt | already_succeeded | leased_by_other_worker, result_ref,
        attempt_count}``; ``in_doubt`` is a claim of a key whose earlier holder may have performed
        the effect without recording it."""
        for _ in range(5):
            row = self._one("execution_claim", {"key": key, "job_id": job_id, "token": token,
                                                "lease": float(lease)})
            if row is not None:
                return row
        raise RuntimeError(f"execution claim for {key!r} found neither a new nor an existing record")

    def execution_succeed(self, key: str, token: uuid.UUID, result_ref: str | None) -> bool:
        return self._one("execution_succeed", {"key": key, "token": token, "result_ref": result_ref}) is not None

    def execution_fail(self, key: str, token: uuid.UUID, *, retrying: bool, error_code: str) -> bool:
        """Give the key up after a failed body (``retrying`` lets the next attempt take it at once).
        With ``error_code='in_doubt'`` the next claim is in doubt too."""
        return self._one("execution_fail", {"key": key, "token": token, "error_code": error_code,
                                            "status": "retrying" if retrying else "failed"}) is not None

    def execution_recheck(self, acked: Sequence[tuple[str, uuid.UUID]]) -> list[Row]:
        """``[{key, token, status, token_current}]`` for (key, token) pairs whose success was
        acknowledged; ``status`` is None when the row is missing (a failover lost it)."""
        return self._rows("execution_recheck", {"keys": [a[0] for a in acked], "tokens": [a[1] for a in acked]})

    def execution_mark_in_doubt(self, key: str, job_id: int, token: uuid.UUID) -> bool:
        """Make a key whose acknowledged success is missing in doubt; False if another live
        claim holds it (or it succeeded after all)."""
        return self._one("execution_mark_in_doubt", {"key": key, "job_id": job_id, "token": token}) is not None

    def execution_get(self, key: str) -> Row | None:
        return self._one("execution_get", {"key": key})
