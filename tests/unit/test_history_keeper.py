"""The reaper's history upkeep (reaper/history.py): when it checks partitions, when it stops and
resumes moving pre-0009 rows, and that a database error never escapes into the reap cycle."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tenure.core.errors import ConfigError
from tenure.reaper.history import HistoryConfig, HistoryKeeper


class _Conn:
    autocommit = True


class _Repo:
    """The two repository calls the keeper makes, scripted."""

    def __init__(self, legacy_ids: list[int], fail: bool = False) -> None:
        self.conn = _Conn()
        self.legacy = sorted(legacy_ids)
        self.ensured = 0
        self.fail = fail
        self.moves: list[int] = []

    def history_ensure(self, *, days_ahead: int) -> int:
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


@pytest.mark.parametrize("kw", [{"ensure_interval": 0}, {"days_ahead": 0}, {"move_batch": -1}])
def test_bad_settings_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        HistoryConfig(**kw).validate()
