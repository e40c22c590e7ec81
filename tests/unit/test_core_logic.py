"""Pure logic: backoff, error classes, config validation, the named-query file, CLI parsing."""

from __future__ import annotations

import random
import re
import statistics
from pathlib import Path

import pytest

from tenure.cli import build_parser, command_names, duration, invoked_command
from tenure.core.backoff import RetryPolicy, backoff_cap, full_jitter_delay
from tenure.core.errors import AmbiguousError, ConfigError, PermanentError, RetryableError, classify_exception
from tenure.core.queries import parse_named_queries, parse_query_files, query_files
from tenure.reaper.reaper import ReaperConfig
from tenure.worker.app import App, load_app
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.runtime import WorkerConfig


def test_backoff_cap_grows_exponentially_and_is_clamped() -> None:
    assert [backoff_cap(a, 1.0, 60.0) for a in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]
    assert backoff_cap(10_000, 1.0, 60.0) == 60.0


@pytest.mark.parametrize("attempt", [1, 3, 6])
def test_full_jitter_stays_in_window_and_is_really_spread(attempt: int) -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=30.0)
    rng = random.Random(1234)
    cap = backoff_cap(attempt, 1.0, 30.0)
    delays = [full_jitter_delay(attempt, policy, rng) for _ in range(5000)]
    assert all(0.0 <= d <= cap for d in delays)
    # Uniform on [0, cap]: mean cap/2, stdev cap/sqrt(12); deciles roughly equally filled.
    assert statistics.fmean(delays) == pytest.approx(cap / 2, rel=0.05)
    assert statistics.pstdev(delays) == pytest.approx(cap / 12 ** 0.5, rel=0.05)
    counts = [0] * 10
    for d in delays:
        counts[min(int(d / cap * 10), 9)] += 1
    chi2 = sum((c - 500) ** 2 / 500 for c in counts)
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001
    assert len({round(d, 6) for d in delays}) > 4900


def test_retry_policy_validation() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(base_delay=10, max_delay=1).validate()
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0).validate()


def test_error_classification() -> None:
    assert classify_exception(TimeoutError("x")).code == "timeout"
    assert isinstance(classify_exception(ConnectionResetError()), RetryableError)
    assert classify_exception(ConnectionResetError()).code == "connection_error"
    assert classify_exception(KeyError("k")).code == "handler_error"
    perm = PermanentError("no", code="bad_credentials")
    assert classify_exception(perm) is perm
    mapped = classify_exception(LookupError("gone"), (lambda e: PermanentError(str(e), code="missing_reference")
                                                      if isinstance(e, LookupError) else None,))
    assert isinstance(mapped, PermanentError) and mapped.code == "missing_reference"
    assert AmbiguousError("x").code == "ambiguous"
    with pytest.raises(ValueError):
        RetryableError("x", retry_after=-1)


@pytest.mark.parametrize("lease, interval, ok", [(30, 10, True), (30, 10.01, False), (1, 0.3, True), (3, 1.5, False)])
def test_heartbeat_must_be_at_most_a_third_of_the_lease(lease: float, interval: float, ok: bool) -> None:
    cfg = HeartbeatConfig(lease=lease, interval=interval)
    if ok:
        cfg.validate()
    else:
        with pytest.raises(ConfigError, match="lease/3"):
            cfg.validate()


def test_worker_and_reaper_config_validation() -> None:
    WorkerConfig().validate()
    ReaperConfig().validate()
    for bad in (WorkerConfig(concurrency=0), WorkerConfig(queues=()), WorkerConfig(queues=("",)),
                WorkerConfig(reaper=ReaperConfig(grace=1), heartbeat=HeartbeatConfig(lease=30, interval=5))):
        with pytest.raises(ConfigError):
            bad.validate()
    with pytest.raises(ConfigError):
        HeartbeatConfig(lease=30, interval=5, max_lease_total=10).validate()
    with pytest.raises(ConfigError):
        ReaperConfig(batch=0).validate()


def test_named_queries_follow_house_style() -> None:
    queries = {name: (description, sql) for name, (description, sql, _) in parse_query_files(query_files()).items()}
    assert len(queries) >= 25
    for name, (description, sql) in queries.items():
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", name), name
        assert name.split("_")[0] in {"job", "queue", "worker", "execution", "dlq", "db", "migration",
                                      "periodic", "reaper", "sqs", "flow", "workflow", "batch"}, name
        assert len(description) > 10, name
        assert "{schema}" in sql or (name == "queue_listen" and "{channel}" in sql) \
            or name in ("db_now", "db_statement_timeout_set", "migration_lock", "migration_table_exists", "job_table_analyze_lock",
                        "job_table_vacuum_lock", "job_table_vacuum_unlock",
                        "sqs_fifo_lock", "queue_series_rollup_bound"), name
    # Every time-dependent query compares with the database clock, never a parameter.
    for name in ("job_claim", "job_heartbeat", "job_reap_candidates", "execution_claim"):
        assert "now()" in queries[name][1]
    assert "FOR UPDATE SKIP LOCKED" in queries["job_claim"][1]
    assert "lock_token = held.token" in queries["job_heartbeat"][1]


def test_query_files_are_one_per_repository_area() -> None:
    """sql/queries/<area>.sql holds the queries the mixin tenure/core/repository/<area>.py runs,
    under a header that says what the area is, and stays readable (at most 400 lines)."""
    import tenure.core.repository
    repository = Path(tenure.core.repository.__file__).parent
    files = query_files()
    queries = parse_query_files(files)
    assert {f.name for f in files} == {p.stem + ".sql" for p in repository.glob("*.py")} - {
        "__init__.sql", "base.sql", "plans.sql", "specs.sql", "stores.sql"}
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines()
        assert len(lines) <= 400, (f.name, len(lines))
        assert lines[0].startswith("-- ") and not lines[0].startswith("-- name:"), f"{f.name}: no header"
    # A query runs from its own area, except the claim (`tenure sqs` receives with job_claim) and
    # the registry's touch (the worker heartbeat renews it too).
    shared = {("sqs", "job_claim"), ("lease", "worker_touch")}
    misplaced = []
    for module in repository.glob("*.py"):
        for name in re.findall(r"[\"'](\w+)[\"']", module.read_text(encoding="utf-8")):
            if name in queries and queries[name][2] != module.stem + ".sql" and (module.stem, name) not in shared:
                misplaced.append(f"{module.name} runs {name} of {queries[name][2]}")
    assert misplaced == []


def test_each_store_is_exactly_its_mixins_public_methods() -> None:
    """A face (tenure.core.repository.stores) lists its area's public methods, with the same
    signatures; every area has one; no mixin reads another's private names."""
    import ast
    import inspect

    import tenure.core.repository as repository
    from tenure.core.repository import stores
    from tenure.core.repository.base import RepositoryBase

    mixins = [c for c in repository.Repository.__mro__[1:] if c not in (RepositoryBase, object)]
    faces = {c.__name__: c for c in vars(stores).values()
             if isinstance(c, type) and c.__module__ == stores.__name__ and c.__name__.endswith("Store")}
    assert len(faces) == len(mixins)
    for mixin in mixins:
        area = mixin.__module__.rsplit(".", 1)[1]
        [face] = [f for f in faces.values() if (f.__doc__ or "").startswith(f"The {area} area")]
        public = {n: v for n, v in vars(mixin).items() if not n.startswith("_") and callable(v)}
        listed = {n: v for n, v in vars(face).items() if not n.startswith("_") and callable(v)}
        assert set(listed) == set(public), (face.__name__, set(listed) ^ set(public))
        for name, fn in public.items():
            assert inspect.signature(listed[name]) == inspect.signature(fn), (face.__name__, name)
    root = Path(repository.__file__).parent
    owners = {c.__name__ for c in mixins}
    touched = []
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mine = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in owners - mine):
                touched.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert touched == []


def test_a_query_name_defined_in_two_files_is_refused(tmp_path: Path) -> None:
    root = tmp_path
    (root / "lease.sql").write_text("-- Lease.\n\n-- name: job_x\n-- d\nSELECT 1;\n")
    (root / "reads.sql").write_text("-- Reads.\n\n-- name: job_y\n-- d\nSELECT 2;\n\n-- name: job_x\n-- d\nSELECT 3;\n")
    with pytest.raises(ValueError, match=r"'job_x'.*lease\.sql.*reads\.sql"):
        parse_query_files(sorted(root.iterdir()))
    (root / "reads.sql").write_text("-- Reads.\n\n-- name: job_y\n-- d\nSELECT 2;\n")
    assert {n: (sql, f) for n, (_, sql, f) in parse_query_files(sorted(root.iterdir())).items()} == {
        "job_x": ("SELECT 1", "lease.sql"), "job_y": ("SELECT 2", "reads.sql")}


def test_parse_named_queries_rejects_missing_description() -> None:
    with pytest.raises(ValueError, match="description"):
        parse_named_queries("-- name: job_x\nSELECT 1;\n")
    with pytest.raises(ValueError, match="duplicate"):
        parse_named_queries("-- name: a_b\n-- d\nSELECT 1;\n-- name: a_b\n-- d\nSELECT 2;\n")


def test_only_the_repository_runs_sql() -> None:
    from pathlib import Path

    import tenure
    root = Path(tenure.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        if re.search(r"\.execute\(\s*f?[\"'](SELECT|INSERT|UPDATE|DELETE|WITH)\b", text):
            offenders.append(str(path.relative_to(root)))
    assert offenders == [], offenders


@pytest.mark.parametrize("text, seconds", [("30", 30), ("30s", 30), ("1.5m", 90), ("2h", 7200), ("250ms", 0.25)])
def test_duration(text: str, seconds: float) -> None:
    assert duration(text) == pytest.approx(seconds)


def test_parser_knows_every_command() -> None:
    parser = build_parser()
    for argv in (["migrate"], ["enqueue", "t"], ["worker", "--app", "m:a"], ["reaper", "--once"], ["stats"],
                 ["jobs", "show", "1"], ["dlq", "list"], ["dlq", "replay", "--rate", "5"], ["demo"],
                 ["exporter"], ["prune", "--older-than", "7d"]):
        assert parser.parse_args(argv).func


@pytest.mark.parametrize("argv, command", [
    (["worker", "--app", "m:a"], "worker"),
    (["--database-url", "postgresql://h/worker", "--schema=x", "--log-json", "stats"], "stats"),
    (["--schema", "worker", "dlq", "list"], "dlq"),  # an option's value is not the command
    (["--help"], None), (["--data", "x", "worker"], None), ([], None), (["bogus"], None),
])
def test_invoked_command_is_told_only_when_plain(argv: list[str], command: str | None) -> None:
    assert invoked_command(argv) == command


def test_one_command_parser_parses_as_the_full_one() -> None:
    """main() builds only the invoked command's parser: each must parse like the whole tree."""
    full = build_parser()
    for argv in (["migrate"], ["--schema", "s", "enqueue", "t"], ["worker", "--app", "m:a", "--concurrency", "3"],
                 ["reaper", "--once"], ["stats"], ["jobs", "show", "1"], ["dlq", "replay", "--rate", "5"],
                 ["prune", "--older-than", "7d"], ["queues", "pause", "q"]):
        one = build_parser(invoked_command(argv))
        a, b = vars(one.parse_args(argv)), vars(full.parse_args(argv))
        assert a.keys() == b.keys() and all(a[k] == b[k] for k in a if k != "func"), argv
    assert set(command_names()) >= {"worker", "reaper", "stats", "migrate"}


def test_app_registry_and_loading() -> None:
    app = App()

    @app.task("a", queue="q1", max_attempts=2)
    def a(ctx: object) -> None:
        return None

    with pytest.raises(ConfigError, match="twice"):
        app.task("a")(a)
    assert app.get("a") is not None and app.get("a").retry.max_attempts == 2  # type: ignore[union-attr]
    assert app.queues == ["q1"]
    assert load_app("tenure.demo.tasks:app").get("send_invoice_email") is not None
    with pytest.raises(ConfigError, match="not a tenure.App"):
        load_app("tenure.demo.tasks:send_invoice_email")


def test_queue_retry_policy_applies_unless_the_task_overrides() -> None:
    app = App(retry=RetryPolicy(base_delay=1, max_delay=10, max_attempts=5))

    @app.task("plain")
    def plain(ctx: object) -> None:
        return None

    @app.task("own", max_attempts=9)
    def own(ctx: object) -> None:
        return None

    queue = RetryPolicy(base_delay=2, max_delay=20, max_attempts=3)
    assert app.tasks["plain"].retry_policy(None).max_attempts == 5
    assert app.tasks["plain"].retry_policy(queue) == queue
    assert app.tasks["own"].retry_policy(queue) == RetryPolicy(base_delay=2, max_delay=20, max_attempts=9)


def test_every_tenure_module_imports() -> None:
    """Lazily imported modules (the operator's, imported when `tenure operator` runs) cannot rot unseen."""
    import importlib
    import pkgutil

    import tenure
    names = [m.name for m in pkgutil.walk_packages(tenure.__path__, "tenure.") if not m.name.endswith("__main__")]
    assert "tenure.operator.main" in names and "tenure.cli.dlq" in names
    for name in names:
        importlib.import_module(name)


@pytest.mark.parametrize("argv, schema, url", [
    (["stats"], None, None),
    (["--schema", "before", "stats"], "before", None),
    (["stats", "--schema", "after", "--database-url", "postgresql://h/db"], "after", "postgresql://h/db"),
    (["--schema", "before", "dlq", "list", "--schema", "after"], "after", None),
    (["--database-url", "postgresql://h/db", "jobs", "show", "1"], None, "postgresql://h/db"),
])
def test_global_options_before_or_after_the_command(argv: list[str], schema: str | None, url: str | None) -> None:
    args = build_parser().parse_args(argv)
    assert (args.schema, args.database_url) == (schema, url)
