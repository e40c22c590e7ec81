"""Smoke test of the benchmark runner's pure parts (bench/): no database, no benchmark run.

Only modules that need the core dependencies are imported (the ``[bench]`` extra with psutil,
pgqueuer and procrastinate is not installed in CI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import stats  # noqa: E402
from bench.sqlfile import FLOOR_SCRIPT, bench_queries  # noqa: E402
from bench.systems import BEST_DRAIN, SYSTEMS, WorkerPlan, parse_plan, worker_cmd  # noqa: E402


def test_summarize_gives_median_and_range_and_skips_missing_runs() -> None:
    s = stats.summarize([3.0, 1.0, float("nan"), 2.0, 10.0])
    assert s == stats.Summary(median=2.5, low=1.0, high=10.0, runs=4)
    assert s.as_dict() == {"median": 2.5, "min": 1.0, "max": 10.0, "runs": 4}
    assert stats.summarize([]) is None


def test_percentile_matches_percentile_cont() -> None:
    values = [float(v) for v in range(1, 101)]
    assert stats.percentile(values, 50) == pytest.approx(50.5)
    assert stats.percentile(values, 99) == pytest.approx(99.01)
    assert stats.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_ratio_and_throughput_handle_missing_and_zero() -> None:
    a, b = stats.summarize([20.0]), stats.summarize([10.0])
    assert stats.ratio(a, b) == 2.0
    assert stats.ratio(a, None) is None
    assert stats.ratio(a, stats.summarize([0.0])) is None
    assert stats.throughput(500, 0.5) == 1000.0
    assert stats.throughput(500, 0.0) == 0.0


def test_formatting_of_figures_and_summaries() -> None:
    assert stats.fmt_num(12345.0, "/s") == "12.3k/s"
    assert stats.fmt_num(950.4) == "950"
    assert stats.fmt_num(4.567, " ms") == "4.57 ms"
    assert stats.fmt_num(None) == "-"
    assert stats.fmt_summary(stats.summarize([9000.0, 10000.0, 11000.0]), "/s") == "10.0k/s (9000–11.0k)"
    assert stats.fmt_summary(stats.summarize([2.0]), " ms") == "2.00 ms"
    assert stats.fmt_ratio(2.0) == "2.00×"
    assert stats.verdict(0.5, 1.0, higher_is_better=False) == "PASS"
    assert stats.verdict(12.0, 10.0, higher_is_better=False) == "MISS"
    assert stats.verdict(None, 1.0, higher_is_better=True) == "n/a"


def test_table_pads_columns_and_rejects_ragged_rows() -> None:
    text = stats.table(["system", "jobs/s"], [["tenure", "10k"], ["pgqueuer", "9k"]])
    lines = text.splitlines()
    assert lines[0] == "| system   | jobs/s |"
    assert lines[1] == "|----------|--------|"
    assert lines[3] == "| pgqueuer | 9k     |"
    with pytest.raises(ValueError):
        stats.table(["a", "b"], [["only one"]])


def test_runs_are_interleaved() -> None:
    order = stats.interleave(["tenure", "pgqueuer", "procrastinate"], 2)
    assert [s for _, s in order] == ["tenure", "pgqueuer", "procrastinate"] * 2
    assert [i for i, _ in order] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError):
        stats.interleave(["tenure"], 0)


def test_worker_plan_parsing_and_command_line() -> None:
    plan = parse_plan("2x200x100:sync")
    assert plan == WorkerPlan(2, 200, 100, "sync")
    assert parse_plan("1x32x32").handler == "async"
    for bad in ("2x200", "0x1x1", "2x2x2:threads", "axbxc"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_plan(bad)
    cmd = worker_cmd("tenure", "postgresql://x/db", plan, record_to="/tmp/out.json")
    assert cmd[1:5] == ["-m", "bench.worker", "tenure", "work"]
    assert "--record" in cmd and cmd[cmd.index("--concurrency") + 1] == "200"
    assert set(BEST_DRAIN) == set(SYSTEMS)


def test_bench_sql_file_parses_with_the_schema_substituted() -> None:
    q = bench_queries("tenure")
    assert {"tenure_done_count", "tenure_fill_expired", "floor_create", "db_commits"} <= set(q)
    assert '"tenure".all_jobs' in q["tenure_done_count"]
    assert "{schema}" not in "".join(q.values())
    script = FLOOR_SCRIPT.read_text()
    assert "SKIP LOCKED" in script and "j.token = d.token" in script


def _result(key: str, steady: float, e2e: float) -> object:
    from bench.compare import CompareResult
    return CompareResult(key=key, jobs=1000, steady_rate=steady, e2e_rate=e2e, e2e_seconds=1000 / e2e,
                         first_done_seconds=0.5, tail_seconds=0.1, worker_cpu_per_job_us=40.0,
                         db_cpu_per_job_us=45.0, steady_worker_cpu_per_job_us=38.0,
                         steady_db_cpu_per_job_us=44.0, load_average=1.0)


def test_compare_contenders_run_the_clis_and_ratios_are_of_medians() -> None:
    pytest.importorskip("psutil")
    from bench.compare import CONTENDERS, table
    tenure, oob = CONTENDERS["tenure"], CONTENDERS["tenure-oob"]
    assert tenure.processes == 2 and "worker" in tenure.argv and "--burst" in tenure.argv
    assert tenure.argv[tenure.argv.index("--concurrency") + 1] == "200"
    assert "--concurrency" not in oob.argv and oob.processes == 1, "out of the box means defaults"
    assert "drain" in CONTENDERS["pgqueuer"].argv and CONTENDERS["pgqueuer"].processes == 2
    results = {"tenure": [_result("tenure", s, e) for s, e in ((30.0, 20.0), (10.0, 8.0), (20.0, 12.0))],
               "pgqueuer": [_result("pgqueuer", s, e) for s, e in ((10.0, 10.0), (10.0, 10.0), (10.0, 8.0))]}
    text, data = table(results, 1000)  # type: ignore[arg-type]
    assert data["ratios"]["tenure/pgqueuer"]["steady"] == pytest.approx(2.0)
    assert data["ratios"]["tenure/pgqueuer"]["e2e"] == pytest.approx(1.2)
    assert data["ratios"]["tenure/pgqueuer"]["steady_per_run"] == pytest.approx([3.0, 1.0, 2.0])
    assert "tenure ÷ pgqueuer" in text and "2.00×" in text
