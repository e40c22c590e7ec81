"""The owner of job_history (reaper/history.py): when the reaper's upkeep checks partitions, when
it stops and resumes moving pre-0009 rows, that a database error never escapes into the reap
cycle; that `tenure history move` takes the same steps to the end; and retention's loops."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tenure.core.errors import ConfigError
from tenure.reaper.history import HistoryConfig, HistoryKeeper, Retention, RetentionConfig, move_legacy


class _Conn:
    autocommit = True


class _Repo:
    """The repository calls of history upkeep, scripted."""

    def __init__(self, legacy_ids: list[int], fail: bool = False) -> None:
        self.conn = _Conn()
        self.legacy = sorted(legacy_ids)
        self.ensured = 0
        self.fail = fail
        self.moves: list[int] = []
        self.ensure_days: list[tuple[int, int]] = []

    def history_ensure(self, *, days_back: int, days_ahead: int) -> int:
        self.ensure_days.append((days_back, days_ahead))
        if self.fail:
            raise psycopg.errors.InsufficientPrivilege("permission denied for schema tenure")
        self.ensured += 1
        return 3 if self.ensured == 1 else 0

    def history_move_batch(self, batch: int, *, after_id: int) -> tuple[int, int]:
        self.moves.append(after_id)
        chunk = [i for i in self.legacy if i > after_id][:batch]
        return len(chunk), (chunk[-1] if chunk else after_id)


def _keeper(**kw: Any) -> HistoryKeeper:
    return HistoryKeeper(HistoryConfig(**kw))


def test_it_moves_pre_0009_rows_batch_by_batch_then_stops() -> None:
    repo = _Repo(list(range(1, 26)))
    keeper = _keeper(move_batch=10)
    cycles = [keeper.run_once(repo) for _ in range(5)]  # type: ignore[arg-type]
    assert [c.moved for c in cycles] == [10, 10, 5, 0, 0]
    assert cycles[0].partitions_created == 3 and repo.ensured == 1, "partitions checked once per interval"
    assert repo.moves == [0, 10, 20, 25], "keyset: each batch continues after the last id; no walk once done"


def test_a_partition_check_resumes_the_move(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _Repo([])
    keeper = _keeper(move_batch=10, ensure_interval=60)
    clock = [1000.0]
    monkeypatch.setattr("tenure.reaper.history.time.monotonic", lambda: clock[0])
    keeper.run_once(repo)  # type: ignore[arg-type]
    keeper.run_once(repo)  # type: ignore[arg-type]
    assert repo.moves == [0]
    repo.legacy = [40, 41]  # an older tenure's worker completed jobs in place meanwhile
    clock[0] += 61
    assert keeper.run_once(repo).moved == 2  # type: ignore[arg-type]
    assert repo.moves == [0, 0]


def test_a_database_error_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    cycle = _keeper().run_once(_Repo([1], fail=True))  # type: ignore[arg-type]
    assert (cycle.partitions_created, cycle.moved) == (0, 0)
    assert "upkeep failed" in caplog.text and "permission denied" in caplog.text


def test_partitions_are_ensured_as_far_as_configured() -> None:
    repo = _Repo([])
    _keeper(days_back=0, days_ahead=5).run_once(repo)  # type: ignore[arg-type]
    assert repo.ensure_days == [(0, 5)]


def test_history_move_walks_the_same_steps_to_the_end() -> None:
    repo = _Repo(list(range(1, 26)))
    done = move_legacy(repo, batch=10)  # type: ignore[arg-type]
    assert (done.moved, done.batches) == (25, 3)
    assert repo.moves == [0, 10, 20, 25] and repo.ensured == 1, "partitions first, then batches until none is found"
    assert repo.ensure_days == [(1, 2)], "the defaults: yesterday to two days ahead"


def test_history_move_raises_a_database_error() -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        move_legacy(_Repo([1], fail=True))  # type: ignore[arg-type]


class _PruneRepo:
    """The repository calls of retention, scripted: old partitions, then rows deleted in batches."""

    def __init__(self, partitions: list[int], completed: int, cancelled: int) -> None:
        self.partitions = list(partitions)
        self.left = {"completed": completed, "cancelled": cancelled}
        self.calls: list[str] = []

    def history_drop_oldest(self, older_than: float) -> int | None:
        self.calls.append("drop")
        return self.partitions.pop(0) if self.partitions else None

    def _take(self, status: str, batch: int) -> int:
        n = min(batch, self.left[status])
        self.left[status] -= n
        return n

    def prune_completed(self, older_than: float, batch: int) -> int:
        self.calls.append("completed")
        return self._take("completed", batch)

    def prune_cancelled(self, older_than: float, batch: int) -> int:
        self.calls.append("cancelled")
        return self._take("cancelled", batch)

    def worker_prune(self, older_than: float) -> int:
        self.calls.append("workers")
        return 2

    def workflow_prune(self, older_than: float, batch: int) -> int:
        self.calls.append("workflows")
        return 1

    def batch_prune(self, older_than: float, batch: int) -> int:
        self.calls.append("batches")
        return 0


def test_retention_drops_partitions_then_deletes_in_batches_until_a_short_one() -> None:
    repo = _PruneRepo([5, 7], completed=25, cancelled=10)
    pruned = Retention(RetentionConfig(older_than=86400, batch=10)).run_once(repo)  # type: ignore[arg-type]
    assert (pruned.completed, pruned.partitions, pruned.cancelled, pruned.workers) == (37, 2, 10, 2)
    assert (pruned.workflows, pruned.batches) == (1, 0)
    assert repo.calls == ["drop"] * 3 + ["completed"] * 3 + ["cancelled"] * 2 + ["workers", "workflows", "batches"]


@pytest.mark.parametrize("kw", [{"ensure_interval": 0}, {"days_ahead": 0}, {"days_back": -1}, {"move_batch": -1}])
def test_bad_settings_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        HistoryConfig(**kw).validate()


@pytest.mark.parametrize("kw", [{"older_than": -1.0}, {"older_than": 60.0, "batch": 0}])
def test_bad_retention_settings_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Retention(RetentionConfig(**kw))
