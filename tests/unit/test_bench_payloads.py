"""The bench's job payloads (bench/payloads.py, ``python -m bench --payload-bytes N``): sizes,
distinct values, the same bytes for every system's fill and producer, and the option's plumbing.

No database: the fills run against stand-ins of tenure's connection and repository, and of
asyncpg/pgqueuer/procrastinate (the ``[bench]`` extra is not installed in CI), which record what
each system would have been handed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import types
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import payloads, systems  # noqa: E402
from bench.payloads import DEFAULT_BYTES, body, dumps, payload  # noqa: E402
from bench.sqlfile import bench_queries  # noqa: E402

SIZES = (50, 100, 500, 2000)
INDEXES = (0, 1, 9, 10, 99, 12_345, 999_999, 1_500_000, 123_456_789)


@pytest.mark.parametrize("size", SIZES)
def test_sizes_are_within_ten_percent(size: int) -> None:
    for i in (*INDEXES, *range(0, 200_000, 7_919)):
        n = len(dumps(payload(i, size)).encode())
        assert abs(n - size) <= 0.1 * size, (i, size, n)
        stamped = payload(i, size, {"t": time.time()})
        assert abs(len(dumps(stamped).encode()) - size) <= 0.1 * size, (i, size, stamped)


def test_size_is_exact_once_the_object_has_room_for_its_pad() -> None:
    for size in (30, *SIZES, 10_000, payloads.MAX_BYTES):
        for i in INDEXES:
            assert len(dumps(payload(i, size))) == size


def test_payloads_are_distinct_per_job_and_deterministic() -> None:
    texts = [dumps(payload(i, DEFAULT_BYTES)) for i in range(20_000)]
    assert len(set(texts)) == len(texts)
    objs = [payload(i, 500) for i in range(5_000)]
    for key in ("i", "customer_id", "order", "email", payloads.PAD_KEY):
        assert len({o[key] for o in objs}) == len(objs), key
    assert payload(41, 500) == payload(41, 500)
    assert dumps(payload(7, 2000)) == dumps(payload(7, 2000))


def test_the_default_is_a_realistic_object() -> None:
    p = payload(3)
    assert len(dumps(p)) == DEFAULT_BYTES == 100
    assert p["i"] == 3 and p["customer_id"].startswith("cus_") and p["order"] == "ord-00000003"
    assert isinstance(p["amount_cents"], int)
    big = payload(3, 500)
    assert big["currency"] in ("EUR", "USD", "GBP", "CHF") and big["email"].endswith("@example.com")
    assert json.loads(dumps(big)) == big


def test_zero_is_the_empty_case_of_before() -> None:
    assert payload(5, 0) == {}
    assert body(5, 0) is None, "pgqueuer had an empty (NULL) payload"
    assert payload(5, 0, {"t": 1.5}) == {"t": 1.5}
    assert body(5, 0, {"t": 1.5}) == b'{"t":1.5}'
    assert payloads.batch("sql", 0, 3, 0) == ["{}"] * 3


def test_extra_fields_are_kept_and_counted() -> None:
    p = payload(12, 100, {"t": 1712345678.123456})
    assert p["t"] == 1712345678.123456 and p["i"] == 12
    assert len(dumps(p)) == 100


def test_compact_json_is_what_tenure_stores() -> None:
    from tenure.core.repository.specs import encode_payload
    for i in (0, 77, 10**6):
        for size in (0, *SIZES):
            p = payload(i, size)
            assert encode_payload(p) == dumps(p)
            assert body(i, size) == (dumps(p).encode() if size else None)


def test_batch_gives_every_system_the_same_bytes() -> None:
    for size in (DEFAULT_BYTES, 1000):
        tenure = [dumps(p) for p in payloads.batch("tenure", 40, 30, size)]
        procrastinate = [dumps(p) for p in payloads.batch("procrastinate", 40, 30, size)]
        pgqueuer = [b.decode() for b in payloads.batch("pgqueuer", 40, 30, size)]
        sql = payloads.batch("sql", 40, 30, size)
        assert tenure == procrastinate == pgqueuer == sql
        assert tenure == [dumps(payload(i, size)) for i in range(40, 70)]
    with pytest.raises(ValueError):
        payloads.batch("sqs", 0, 1, 100)


# -- each system's fill, against stand-ins -----------------------------------------------------
class _Conn:
    """tenure's connection as the fills use it: ``execute`` records (query name, params)."""

    def __init__(self, sent: list[Any]) -> None:
        self.sent = sent
        self.names = {sql: name for name, sql in bench_queries("tenure").items()}

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self.sent.append((self.names[sql], params))


def _fake_tenure(monkeypatch: pytest.MonkeyPatch, sent: list[Any]) -> None:
    import tenure.core.db
    import tenure.core.repository

    @contextmanager
    def connect(dsn: str) -> Any:
        yield _Conn(sent)

    class Repository:
        def __init__(self, conn: Any, schema: str) -> None:
            pass

        def enqueue_many(self, specs: list[Any]) -> int:
            sent.append(("enqueue_many", [s.validate() for s in specs]))  # the stored JSON texts
            return len(specs)

    monkeypatch.setattr(tenure.core.db, "connect", connect)
    monkeypatch.setattr(tenure.core.repository, "Repository", Repository)


def _fake_peers(monkeypatch: pytest.MonkeyPatch, sent: dict[str, list[Any]]) -> None:
    """asyncpg + pgqueuer and procrastinate, recording what their batch calls get."""

    class AsyncConn:
        async def close(self) -> None:
            pass

    async def connect(dsn: str) -> AsyncConn:
        return AsyncConn()

    class Queries:
        def __init__(self, driver: Any) -> None:
            pass

        async def enqueue(self, entrypoints: list[str], bodies: list[bytes | None], priorities: list[int]) -> None:
            assert len(entrypoints) == len(bodies) == len(priorities)
            sent["pgqueuer"].extend(bodies)

    class PsycopgConnector:
        def __init__(self, *, conninfo: str, json_dumps: Any = None) -> None:
            self.json_dumps = json_dumps or json.dumps

    class App:
        def __init__(self, connector: PsycopgConnector) -> None:
            self.connector = connector

        def task(self, name: str) -> Any:
            connector = self.connector

            def wrap(fn: Any) -> Any:
                async def batch_defer_async(*task_kwargs: dict[str, Any]) -> None:
                    # procrastinate sends each job's arguments through its connector's json_dumps
                    sent["procrastinate"].extend(connector.json_dumps(a) for a in task_kwargs)
                return types.SimpleNamespace(batch_defer_async=batch_defer_async)
            return wrap

        @asynccontextmanager
        async def open_async(self) -> Any:
            yield self

    mods: dict[str, dict[str, Any]] = {
        "asyncpg": {"connect": connect}, "pgqueuer": {}, "pgqueuer.db": {"AsyncpgDriver": lambda conn: conn},
        "pgqueuer.queries": {"Queries": Queries},
        "procrastinate": {"App": App, "PsycopgConnector": PsycopgConnector}}
    for name, attrs in mods.items():
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize("size", [0, DEFAULT_BYTES, 700])
def test_every_system_fill_hands_over_the_same_bytes(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    monkeypatch.setattr(systems, "FILL_CHUNK", 10)  # several statements, numbering across them
    monkeypatch.setattr(systems, "BULK_CHUNK", 7)
    tenure_sent: list[Any] = []
    peers: dict[str, list[Any]] = {"pgqueuer": [], "procrastinate": []}
    _fake_tenure(monkeypatch, tenure_sent)
    _fake_peers(monkeypatch, peers)
    n = 25
    for system in systems.SYSTEMS:
        systems.fill(system, "postgresql://x/db", n, payload_bytes=size)
    enqueued = [text for name, texts in tenure_sent if name == "enqueue_many" for text in texts]
    assert [len(texts) for name, texts in tenure_sent] == [10, 10, 5]
    expected = [dumps(payload(i, size)) for i in range(n)]
    assert enqueued == expected
    assert peers["procrastinate"] == expected
    assert peers["pgqueuer"] == ([None] * n if size == 0 else [t.encode() for t in expected])

    tenure_sent.clear()  # the bulk SQL path (scale's big backlog): the same payloads
    systems.fill("tenure", "postgresql://x/db", n, fast=True, payload_bytes=size)
    if size == 0:
        assert tenure_sent == [("tenure_fill_pending", {"n": n}), ("tenure_vacuum", None)]
    else:
        bulk = [p for name, p in tenure_sent if name == "tenure_fill_pending_payloads"]
        assert [p["offset"] for p in bulk] == [0, 7, 14, 21]
        assert [t for p in bulk for t in p["payloads"]] == expected
        assert tenure_sent[-1] == ("tenure_vacuum", None)


def test_bulk_fixtures_have_a_payload_form() -> None:
    q = bench_queries("tenure")
    for name in ("tenure_fill_pending", "tenure_fill_completed", "tenure_fill_expired", "tenure_fill_healthy",
                 "floor_fill"):
        assert "%(n)s" in q[name]
        assert "%(payloads)s::text[]" in q[f"{name}_payloads"]
    sent: list[Any] = []
    systems.bulk_insert(_Conn(sent), "tenure_fill_expired", 12, 100, first=1000)
    texts = [t for _, p in sent for t in p["payloads"]]
    assert texts == [dumps(payload(i, 100)) for i in range(1000, 1012)]


# -- producers ---------------------------------------------------------------------------------
def test_producers_stamp_every_job_and_pad_it() -> None:
    from bench import worker
    args = argparse.Namespace(payload_bytes=200)
    made = {s: worker._batch(args, s, 50, 20) for s in systems.SYSTEMS}
    for system, batch in made.items():
        objs = [json.loads(b) for b in batch] if system == "pgqueuer" else batch
        assert [o["i"] for o in objs] == list(range(50, 70)), system
        assert all(abs(o["t"] - time.time()) < 60 for o in objs)
        assert all(abs(len(dumps(o)) - 200) <= 20 for o in objs)
    strip = [{k: v for k, v in o.items() if k not in ("t", payloads.PAD_KEY)} for o in made["tenure"]]
    assert strip == [{k: v for k, v in json.loads(b).items() if k not in ("t", payloads.PAD_KEY)}
                     for b in made["pgqueuer"]]
    empty = worker._batch(argparse.Namespace(payload_bytes=0), "pgqueuer", 0, 3)
    assert [set(json.loads(b)) for b in empty] == [{"t"}] * 3, "0: the producer's {t} alone, as before"


def test_producer_command_carries_the_size_to_the_worker_parser() -> None:
    from bench import worker
    cmd = systems.producer_cmd("pgqueuer", "postgresql://x/db", 1000.0, 5.0, payload_bytes=321)
    assert cmd[cmd.index("--payload-bytes") + 1] == "321"
    args = worker.build_parser().parse_args(cmd[3:])
    assert (args.system, args.role, args.payload_bytes) == ("pgqueuer", "produce", 321)
    assert worker.build_parser().parse_args(["tenure", "produce", "--dsn", "x"]).payload_bytes == DEFAULT_BYTES


# -- the option --------------------------------------------------------------------------------
def test_size_option_validates() -> None:
    assert payloads.size_arg("0") == 0 and payloads.size_arg("2000") == 2000
    for bad in ("-1", "abc", "1.5", str(payloads.MAX_BYTES + 1)):
        with pytest.raises(argparse.ArgumentTypeError):
            payloads.size_arg(bad)
    assert payloads.describe(100) == "payload 100 B" and payloads.describe(2000) == "payload 2,000 B"
    assert "empty" in payloads.describe(0)


def test_runner_accepts_payload_bytes_and_refuses_negative(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psutil")
    from bench import runner
    parser = runner.build_parser()
    assert parser.parse_args([]).payload_bytes == DEFAULT_BYTES
    assert parser.parse_args(["--payload-bytes", "0"]).payload_bytes == 0
    assert parser.parse_args(["--payload-bytes", "2000", "--scenario", "compare"]).payload_bytes == 2000
    for bad in ("-1", "lots"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--payload-bytes", bad])
        assert exc.value.code == 2
        assert "--payload-bytes" in capsys.readouterr().err
    from bench import sustained_drain
    with pytest.raises(SystemExit):
        sustained_drain.main(["--payload-bytes", "-5"])


def test_the_size_reaches_the_scenarios_the_json_and_the_table_header(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psutil")
    from bench import compare, runner, sustained_drain
    calls: dict[str, list[Any]] = {"run_one": [], "drain_run": [], "traced_drain": []}

    def run_one(server: Any, c: Any, n: int, **kw: Any) -> Any:
        calls["run_one"].append(kw["payload_bytes"])
        return compare.CompareResult(key=c.key, jobs=n, steady_rate=10.0, e2e_rate=9.0, e2e_seconds=1.0,
                                     first_done_seconds=0.1, tail_seconds=0.1, worker_cpu_per_job_us=1.0,
                                     db_cpu_per_job_us=1.0, steady_worker_cpu_per_job_us=1.0,
                                     steady_db_cpu_per_job_us=1.0, load_average=0.0)

    def drain_run(server: Any, system: str, plan: Any, **kw: Any) -> Any:
        calls["drain_run"].append(kw["payload_bytes"])
        return runner.DrainResult(100, 1.0, 100.0, 30.0, 0.1, 0.1)

    def traced_drain(server: Any, key: str, jobs: int, **kw: Any) -> Any:
        calls["traced_drain"].append(kw["payload_bytes"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(compare, "run_one", run_one)
    monkeypatch.setattr(compare, "compile_sources", lambda: None)
    monkeypatch.setattr(sustained_drain, "compile_sources", lambda: None)
    monkeypatch.setattr(sustained_drain, "traced_drain", traced_drain)
    monkeypatch.setattr(runner, "drain_run", drain_run)
    monkeypatch.setattr(runner, "start_server", lambda datadir: object())
    out = tmp_path / "results.json"
    level = logging.getLogger("tenure").level
    try:
        code = runner.main(["--quick", "--payload-bytes", "250", "--scenario", "compare", "--scenario", "drain",
                            "--scenario", "sustained", "--contender", "tenure", "--contender", "pgqueuer",
                            "--output", str(out)])
    finally:
        logging.getLogger("tenure").setLevel(level)
    assert code == 1, "the sustained stand-in fails on purpose"
    assert calls == {"run_one": [250, 250], "drain_run": [250] * len(systems.SYSTEMS), "traced_drain": [250]}
    data = json.loads(out.read_text())
    assert data["meta"]["payload_bytes"] == 250
    assert data["compare"]["payload_bytes"] == 250
    assert "sustained" in data["errors"]
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("## ")]
    assert len(headers) == 2 and all("payload 250 B" in h for h in headers), headers


def test_table_headers_name_the_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psutil")
    from bench import compare, runner
    monkeypatch.setattr(compare, "compile_sources", lambda: None)
    monkeypatch.setattr(compare, "run_one", lambda server, c, n, **kw: compare.CompareResult(
        key=c.key, jobs=n, steady_rate=10.0, e2e_rate=9.0, e2e_seconds=1.0, first_done_seconds=0.1,
        tail_seconds=0.1, worker_cpu_per_job_us=1.0, db_cpu_per_job_us=1.0, steady_worker_cpu_per_job_us=1.0,
        steady_db_cpu_per_job_us=1.0, load_average=0.0))
    for size, label in ((100, "payload 100 B"), (0, "empty payload")):
        rep = runner.Report()
        args = argparse.Namespace(quick=True, backlog=0, contenders=["tenure"], runs=1, before_src=None,
                                  payload_bytes=size)
        compare.scenario_compare(None, args, rep)
        assert label in rep.sections[-1].splitlines()[1]
