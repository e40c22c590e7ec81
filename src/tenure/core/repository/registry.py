"""The worker registry (R9): a fresh id per process, its heartbeat and its stop."""

from __future__ import annotations

from collections.abc import Sequence

from tenure.core.repository.base import RepositoryBase
from tenure.core.repository.specs import Row


class RegistryQueries(RepositoryBase):
    """Register, touch, stop, list and prune workers."""

    def worker_register(self, worker_id: str, *, host: str, pid: int, queues: Sequence[str],
                        concurrency: int, heartbeat_seconds: float, version: str,
                        lease_seconds: float | None = None) -> None:
        self._rows("worker_register", {"id": worker_id, "host": host, "pid": pid, "queues": list(queues),
                                       "concurrency": concurrency, "heartbeat_seconds": heartbeat_seconds,
                                       "version": version, "lease_seconds": lease_seconds})

    def worker_touch(self, worker_id: str, abandoned: int = 0) -> None:
        self._rows("worker_touch", {"id": worker_id, "abandoned": abandoned})

    def worker_stop(self, worker_id: str) -> None:
        self._rows("worker_stop", {"id": worker_id})

    def worker_list(self) -> list[Row]:
        return self._rows("worker_list")

    def worker_prune(self, older_than: float) -> int:
        return len(self._rows("worker_prune", {"older_than": float(older_than)}))
