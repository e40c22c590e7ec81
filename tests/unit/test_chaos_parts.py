"""Pure parts of the chaos harness: the workers' environment, the one RNG per run, the producer's
pace, the fault records kept while the database is away, and the core helper that opens an install
to the database user."""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.chaos.config import ChaosConfig
from tenure.chaos.faults import make_plan, proxy_dsn, skew_for, upstream, worker_env
from tenure.chaos.journal import FaultRecord, Journal
from tenure.chaos.producer import Pace, Producer
from tenure.core.embedded import make_tree_readable
from tenure.core.repository import JobSpec

DSN = "postgresql://u@db.example:6543/x?connect_timeout=2"


class _Proxy:
    port = 40001


def test_worker_env_proxy_for_slot_0_skew_for_1_and_2_nothing_for_reapers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tenure.chaos.faults.find_libfaketime", lambda: None)
    config = ChaosConfig(skew=300)
    proxy: Any = _Proxy()
    assert worker_env(config, None, dsn=DSN, proxy=proxy, control_dir=Path("/c")) == {}
    zero = worker_env(config, 0, dsn=DSN, proxy=proxy, control_dir=Path("/c"))
    assert "127.0.0.1" in zero["TENURE_DATABASE_URL"] and "40001" in zero["TENURE_DATABASE_URL"]
    assert zero["TENURE_CHAOS_CONTROL_DIR"] == "/c" and "TENURE_CHAOS_CLOCK_OFFSET" not in zero
    assert worker_env(config, 1, dsn=DSN, proxy=proxy, control_dir=None) == {"TENURE_CHAOS_CLOCK_OFFSET": "300"}
    assert worker_env(config, 2, dsn=DSN, proxy=None, control_dir=None) == {"TENURE_CHAOS_CLOCK_OFFSET": "-300"}
    assert skew_for(ChaosConfig(skew=0), 1) == 0.0


def test_upstream_and_proxy_dsn() -> None:
    assert upstream(DSN) == ("db.example", 6543)
    assert upstream("postgresql://u@a:1,b:2/x") is None
    assert upstream("postgresql://u@/x?host=/run/postgresql") is None
    assert psycopg.conninfo.conninfo_to_dict(proxy_dsn(DSN, 9)) == {
        "user": "u", "host": "127.0.0.1", "port": "9", "dbname": "x", "connect_timeout": "2"}


def test_one_rng_per_run_the_plan_draws_first() -> None:
    config = ChaosConfig(jobs=100, seed=5)
    rng = config.rng()
    assert make_plan(config, can_partition=True, can_restart=True, rng=rng) == make_plan(
        config, can_partition=True, can_restart=True)
    after_plan = rng.random()
    again = config.rng()
    make_plan(config, can_partition=True, can_restart=True, rng=again)
    assert again.random() == after_plan  # the targets drawn after the plan are reproducible too


class _FlakyRepo:
    """Stands in for Repository: the first enqueue fails, then every batch is kept."""

    batches: list[list[int]] = []
    failed = False

    def __init__(self, conn: Any, schema: str) -> None:
        pass

    def enqueue_many(self, batch: list[JobSpec]) -> None:
        if not _FlakyRepo.failed:
            _FlakyRepo.failed = True
            raise psycopg.OperationalError("server closed the connection")
        _FlakyRepo.batches.append([int(j.payload["n"]) for j in batch])


class _Conn:
    closed = broken = False

    def close(self) -> None:
        self.closed = True


def test_producer_resends_the_same_batch_and_caps_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    _FlakyRepo.batches, _FlakyRepo.failed = [], False
    monkeypatch.setattr("tenure.chaos.producer.Repository", _FlakyRepo)
    monkeypatch.setattr("tenure.chaos.producer.connect", lambda *a, **k: _Conn())
    seen: list[range] = []
    pace = Pace(due=lambda elapsed: 7, over=lambda n: n >= 7, idle=0.01, retry_on=psycopg.OperationalError,
                retry_wait=0.01, batch_max=3)
    producer = Producer("dsn", "s", pace=pace, stop=threading.Event(), on_enqueued=seen.append,
                        job=lambda n: JobSpec(task="chaos.job", queue="chaos", payload={"n": n}))
    producer.start()
    producer._thread.join(timeout=10)
    assert producer.error is None and producer.enqueued == 7
    assert _FlakyRepo.batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert seen == [range(0, 3), range(3, 6), range(6, 7)]


def test_journal_keeps_records_while_the_database_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal("s", show_progress=False, dsn="postgresql://u@127.0.0.1:1/x")
    monkeypatch.setattr(journal, "store", lambda: None)
    journal.record("sigstop", 12, 1.0, 2.0, slot=1)
    journal.record("pg_restart", None, 3.0)
    assert journal._pending == [FaultRecord("sigstop", 12, 1.0, 2.0, {"slot": 1}),
                                FaultRecord("pg_restart", None, 3.0, None, {})]
    written: list[tuple[str, int | None]] = []

    class _Store:
        def fault_record(self, kind: str, *, pid: int | None, started: float, ended: float | None,
                         detail: dict[str, Any]) -> None:
            written.append((kind, pid))

    monkeypatch.setattr(journal, "store", lambda: _Store())
    journal.flush()
    assert written == [("sigstop", 12), ("pg_restart", None)] and journal._pending == []


def test_make_tree_readable_opens_files_and_programs_to_the_chosen_users(tmp_path: Path) -> None:
    root = tmp_path / "install"
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    prog, data = root / "bin" / "postgres", root / "lib" / "data.txt"
    prog.write_text("x")
    data.write_text("y")
    for p in (root / "bin", root / "lib"):
        p.chmod(0o700)
    prog.chmod(0o700)
    data.chmod(0o600)
    outside = tmp_path / "outside.txt"
    outside.write_text("z")
    outside.chmod(0o600)
    (root / "lib" / "link").symlink_to(outside)
    make_tree_readable(root, who=0o077, executable=lambda _, mode: bool(mode & 0o100))
    assert stat.S_IMODE((root / "bin").stat().st_mode) == 0o755
    assert stat.S_IMODE(prog.stat().st_mode) == 0o755
    assert stat.S_IMODE(data.stat().st_mode) == 0o644
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600  # a symlink's target outside the tree is not ours
    make_tree_readable(root, who=0o777, executable=lambda p, _: p.parent.name == "bin")
    assert stat.S_IMODE(data.stat().st_mode) == 0o644  # not a program: read only
