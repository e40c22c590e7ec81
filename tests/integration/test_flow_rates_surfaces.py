"""The surfaces of rate limits and weights against a real PostgreSQL (issue 38, items 3 and 5):
``tenure.flow`` creates, changes and deletes named rate limits and sets flow keys' weights, each
change audited in ``flow_changes``; a key's row lives while it carries a running limit or a
weight; every enqueue path stores a job's rate limit and units, and refuses (writing nothing) an
unknown limit or more units than its burst; `tenure flow rate|weight|list` and `tenure enqueue
--rate-limit` answer bad input with exit 2, one line, and nothing changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tenure
from tenure import App, flow
from tenure.cli import main
from tenure.core.db import Connection
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import JobSpec, Repository
from tenure.job_document import job_document

pytestmark = pytest.mark.integration


def _changes(conn: Connection, schema: str) -> list[tuple[Any, ...]]:
    """Every flow change, oldest first: (changed_by, queue, key, rate_limit, setting, old, new)."""
    return [(c["changed_by"], c["queue_name"], c["flow_key"], c["rate_limit"], c["setting"], c["old_value"],
             c["new_value"]) for c in reversed(flow.flow_changes(conn, schema=schema, limit=1000))]


def _keys(conn: Connection, schema: str) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in conn.execute(
        f'SELECT queue_name, flow_key, running, weight FROM "{schema}".flow_keys ORDER BY 1, 2').fetchall()]


def test_a_rate_limit_is_created_changed_deleted_and_audited(conn: Connection, schema: str) -> None:
    made = flow.set_rate_limit(conn, "api", 2.5, schema=schema, requested_by="alice")
    assert (made["name"], made["per_second"], made["burst"], made["per_key"], made["old_per_second"]) == \
        ("api", 2.5, 3, False, None)  # burst: one second's tokens, rounded up
    assert flow.set_rate_limit(conn, "slow", 0.01, schema=schema)["burst"] == 1
    (api, slow) = flow.rate_status(conn, schema=schema)
    assert (api["name"], api["buckets"], api["tokens"], api["paused_until"]) == ("api", 0, 3.0, None)
    assert slow["name"] == "slow"

    # The claim's consumption (rate_take) makes the bucket; the status refills it by the DB clock.
    assert conn.execute(f'SELECT "{schema}".rate_take(%s, %s, %s) AS t', ("api", 3, None)).fetchone() == {"t": None}
    (api, _) = flow.rate_status(conn, schema=schema)
    assert api["buckets"] == 1 and 0 <= api["tokens"] < 1
    changed = flow.set_rate_limit(conn, "api", 2.5, burst=10, per_key=False, schema=schema, requested_by="bob")
    assert (changed["burst"], changed["old_burst"], changed["old_per_key"]) == (10, 3, False)
    assert flow.rate_status(conn, schema=schema)[0]["buckets"] == 1  # kept: per_key did not change
    # A handler's pause empties the bucket until its end.
    conn.execute(f"UPDATE \"{schema}\".rate_buckets SET paused_until = now() + interval '1 hour'")
    (api, _) = flow.rate_status(conn, schema=schema)
    assert api["tokens"] == 0 and api["paused_buckets"] == 1 and api["paused_until"] is not None

    # Per key: one bucket per flow key; the status shows the fewest tokens of any one bucket.
    flow.set_rate_limit(conn, "api", 2, burst=4, per_key=True, schema=schema, requested_by="carol")
    assert flow.rate_status(conn, schema=schema)[0]["buckets"] == 0  # per_key changed: buckets start full
    for key, units in (("a", 1), ("b", 3)):
        conn.execute(f'SELECT "{schema}".rate_take(%s, %s, %s)', ("api", units, key))
    (api, _) = flow.rate_status(conn, schema=schema)
    assert api["per_key"] and api["buckets"] == 2 and 1 <= api["tokens"] < 1.5

    assert flow.delete_rate_limit(conn, "api", schema=schema, requested_by="dave") is True
    assert flow.delete_rate_limit(conn, "api", schema=schema, requested_by="dave") is False
    assert [r["name"] for r in flow.rate_status(conn, schema=schema)] == ["slow"]
    assert conn.execute(f'SELECT count(*) AS n FROM "{schema}".rate_buckets').fetchone() == {"n": 0}
    api_changes = [c for c in _changes(conn, schema) if c[3] == "api"]
    assert api_changes == [
        ("alice", None, None, "api", "per_second", None, "2.5"), ("alice", None, None, "api", "burst", None, "3"),
        ("alice", None, None, "api", "per_key", None, "false"),
        ("bob", None, None, "api", "burst", "3", "10"),
        ("carol", None, None, "api", "per_second", "2.5", "2"), ("carol", None, None, "api", "burst", "10", "4"),
        ("carol", None, None, "api", "per_key", "false", "true"),
        ("dave", None, None, "api", "per_second", "2", None), ("dave", None, None, "api", "burst", "4", None),
        ("dave", None, None, "api", "per_key", "true", None)]
    assert flow.flow_changes(conn, schema=schema, queue="default") == []  # a queue's changes only


def test_a_keys_row_lives_while_it_carries_a_running_limit_or_a_weight(conn: Connection, schema: str) -> None:
    assert flow.set_key_weight(conn, "q", "k", 3, schema=schema, requested_by="a") == {"weight": 3.0, "old_weight": 1.0}
    assert _keys(conn, schema) == [("q", "k", None, 3.0)]
    (queue,) = flow.flow_status(conn, schema=schema)  # a queue with only a weight is listed
    assert queue.queue == "q" and [(k["flow_key"], k["weight"], k["running_limit"], k["own_limit"])
                                   for k in queue.keys] == [("k", 3.0, None, False)]
    assert Repository(conn, schema).flow_key_limits("q") == {}  # the operator's read: running limits only
    flow.set_key_running(conn, "q", "k", 2, schema=schema, requested_by="a")
    assert _keys(conn, schema) == [("q", "k", 2, 3.0)]
    flow.set_key_running(conn, "q", "k", 0, schema=schema, requested_by="a")  # the weight keeps the row
    assert _keys(conn, schema) == [("q", "k", None, 3.0)]
    flow.set_key_running(conn, "q", "k", 0, schema=schema, requested_by="a")  # nothing to remove: no change
    assert flow.set_key_weight(conn, "q", "k", 1, schema=schema, requested_by="a") == {"weight": 1.0,
                                                                                     "old_weight": 3.0}
    assert _keys(conn, schema) == [] and flow.flow_status(conn, schema=schema) == []
    # The other way round: weight 1 keeps a row that has a running limit, with weight 1.
    flow.set_key_running(conn, "q", "r", 5, schema=schema, requested_by="b")
    flow.set_key_weight(conn, "q", "r", 0.5, schema=schema, requested_by="b")
    flow.set_key_weight(conn, "q", "r", 1, schema=schema, requested_by="b")
    flow.set_key_weight(conn, "q", "r", 1, schema=schema, requested_by="b")  # no weight: no change
    assert _keys(conn, schema) == [("q", "r", 5, 1.0)]
    assert _changes(conn, schema) == [
        ("a", "q", "k", None, "weight", "1", "3"), ("a", "q", "k", None, "running", None, "2"),
        ("a", "q", "k", None, "running", "2", None), ("a", "q", "k", None, "weight", "3", "1"),
        ("b", "q", "r", None, "running", None, "5"), ("b", "q", "r", None, "weight", "1", "0.5"),
        ("b", "q", "r", None, "weight", "0.5", "1")]


def test_changes_wake_the_queues_they_concern(dsn: str, schema: str, conn: Connection, repo: Repository) -> None:
    """A weight wakes its queue; a rate limit's change wakes each queue with pending jobs naming it."""
    flow.set_rate_limit(conn, "api", 1, schema=schema)
    repo.enqueue_many([JobSpec("t", queue=q, rate_limit="api") for q in ("emails", "sms", "sms")]
                      + [JobSpec("t", queue="other")])
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{schema}_jobs"')
        flow.set_rate_limit(conn, "api", 5, schema=schema)
        assert sorted(n.payload for n in listener.notifies(timeout=2, stop_after=2)) == ["emails", "sms"]
        flow.set_key_weight(conn, "push", "k", 2, schema=schema)
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["push"]
        flow.delete_rate_limit(conn, "api", schema=schema)
        assert sorted(n.payload for n in listener.notifies(timeout=2, stop_after=2)) == ["emails", "sms"]


def test_every_enqueue_path_stores_the_rate_limit(conn: Connection, schema: str, repo: Repository) -> None:
    flow.set_rate_limit(conn, "api", 10, schema=schema)
    app = App()

    @app.task("call", rate_limit="api", rate_units=2)
    def call(ctx: Any) -> None: ...

    @app.task("plain")
    def plain(ctx: Any) -> None: ...

    ids = [repo.enqueue("t", rate_limit="api:3").id,
           tenure.enqueue(conn, "t", schema=schema, rate_limit="api").id,
           app.enqueue(conn, "call", {}, schema=schema).id,
           app.enqueue(conn, "call", {}, schema=schema, rate_limit="api:5").id,  # an explicit one wins
           app.enqueue(conn, "plain", {}, schema=schema).id,
           repo.enqueue("t").id]
    assert repo.enqueue_many([JobSpec("t", rate_limit="api:10"), JobSpec("t")]) == 2
    rows = [repo.get_job(i) or {} for i in ids]
    assert [(r["rate_limit"], r["rate_units"]) for r in rows] == [
        ("api", 3), ("api", 1), ("api", 2), ("api", 5), (None, 1), (None, 1)]
    batch = conn.execute(f'SELECT rate_limit, rate_units FROM "{schema}".jobs WHERE id > %s ORDER BY id',
                         (ids[-1],)).fetchall()
    assert [tuple(r.values()) for r in batch] == [("api", 10), (None, 1)]
    document = job_document(conn, ids[0], schema=schema) or {}
    assert (document["job"]["rate_limit"], document["job"]["rate_units"]) == ("api", 3)


def test_enqueue_refuses_an_unknown_limit_or_more_units_than_its_burst(conn: Connection, schema: str,
                                                                      repo: Repository) -> None:
    flow.set_rate_limit(conn, "api", 1, burst=5, schema=schema)
    app = App()

    @app.task("ghost", rate_limit="nope")
    def ghost(ctx: Any) -> None: ...

    for ref, message in (("nope", "unknown rate limit 'nope'"), ("api:6", "could never be claimed: its burst is 5"),
                         ("api:0", "units must be a whole number"), ("api:x", "units must be a whole number"),
                         ("bad name", "rate limit name"), (":3", "rate limit name"), ("api:", "units")):
        with pytest.raises(JobSpecError, match=message):
            repo.enqueue("t", rate_limit=ref)
        with pytest.raises(JobSpecError, match=message):
            repo.enqueue_many([JobSpec("t"), JobSpec("t", rate_limit=ref)])
        with pytest.raises(JobSpecError, match=message):
            tenure.enqueue(conn, "t", schema=schema, rate_limit=ref)
    with pytest.raises(JobSpecError, match="unknown rate limit 'nope'"):
        app.enqueue(conn, "ghost", {}, schema=schema)
    with pytest.raises(ConfigError, match="rate limit name"):
        app.task("x", rate_limit="no way")
    with pytest.raises(ConfigError, match="rate_units needs a rate_limit"):
        app.task("x", rate_units=2)
    with pytest.raises(ConfigError, match="units must be a whole number"):
        app.task("x", rate_limit="api", rate_units=0)
    assert repo.job_list(limit=100) == []
    assert repo.enqueue("t", rate_limit="api:5").created  # exactly the burst is fine


# -- the CLI ----------------------------------------------------------------------------------

def _cli(capsys: pytest.CaptureFixture[str], dsn: str, schema: str, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["--database-url", dsn, "--schema", schema, *args])
    except SystemExit as exc:  # a usage error (argparse), as the process would exit
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _state(conn: Connection, schema: str) -> tuple[Any, ...]:
    """What a refused command must leave as it was."""
    return tuple(conn.execute(f'SELECT (SELECT count(*) FROM "{schema}".{t}) AS n').fetchone()["n"]  # type: ignore[index]
                 for t in ("flow_changes", "rate_limits", "flow_keys", "jobs"))


def test_the_cli_sets_lists_and_enqueues(capsys: pytest.CaptureFixture[str], dsn: str, schema: str,
                                         conn: Connection, repo: Repository, tmp_path: Path) -> None:
    assert _cli(capsys, dsn, schema, "flow", "rate", "api", "--per-second", "2", "--per-key")[:2] == \
        (0, "rate limit 'api': 2/s, burst 2, per flow key (new)\n")
    assert _cli(capsys, dsn, schema, "flow", "weight", "emails", "--key", "tenant:big", "--weight", "4")[0] == 0
    code, out, _ = _cli(capsys, dsn, schema, "flow", "list")
    assert code == 0 and "queue emails" in out and "tenant:big" in out and "rate limits:" in out, out
    code, out, _ = _cli(capsys, dsn, schema, "flow", "list", "--json")
    listed = json.loads(out)
    assert [(k["flow_key"], k["weight"]) for k in listed["queues"][0]["keys"]] == [("tenant:big", 4.0)]
    assert [(r["name"], r["per_key"], r["buckets"], r["tokens"]) for r in listed["rate_limits"]] == \
        [("api", True, 0, 2.0)]

    code, out, _ = _cli(capsys, dsn, schema, "enqueue", "t", "--rate-limit", "api:2", "--flow-key", "k")
    assert code == 0
    code, out, _ = _cli(capsys, dsn, schema, "jobs", "show", out.strip())
    assert code == 0 and "rate_limit           api\n" in out and "rate_units           2\n" in out, out
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"task": "t", "rate_limit": "api"}\n{"task": "t"}\n')
    assert _cli(capsys, dsn, schema, "enqueue", "--from-file", str(jobs), "--rate-limit", "api:2")[0] == 0
    assert sorted((r["rate_limit"], r["rate_units"]) for r in map(lambda i: repo.get_job(i) or {},
                  [int(j["id"]) for j in repo.job_list(limit=10)])) == [("api", 1), ("api", 2), ("api", 2)]

    assert _cli(capsys, dsn, schema, "flow", "weight", "emails", "--key", "tenant:big")[0] == 0  # default 1
    assert _cli(capsys, dsn, schema, "flow", "rate", "api", "--delete")[:2] == (0, "rate limit 'api': deleted\n")
    assert _cli(capsys, dsn, schema, "flow", "list")[:2] == (0, "(no flow limits)\n")


BAD = [
    ("flow", "rate", "bad name", "--per-second", "1"),
    ("flow", "rate", "-x", "--per-second", "1"),
    ("flow", "rate", "x" * 101, "--per-second", "1"),
    ("flow", "rate", "api", "--per-second", "0"),
    ("flow", "rate", "api", "--per-second", "-1"),
    ("flow", "rate", "api", "--per-second", "nan"),
    ("flow", "rate", "api", "--per-second", "inf"),
    ("flow", "rate", "api", "--per-second", "2000000"),
    ("flow", "rate", "api", "--per-second", "1", "--burst", "1.5"),
    ("flow", "rate", "api", "--per-second", "1", "--burst", "0"),
    ("flow", "rate", "api", "--per-second", "1", "--burst", "-2"),
    ("flow", "rate", "api", "--burst", "2"),
    ("flow", "rate", "api", "--delete", "--per-second", "1"),
    ("flow", "weight", "q", "--key", "k", "--weight", "0"),
    ("flow", "weight", "q", "--key", "k", "--weight", "-1"),
    ("flow", "weight", "q", "--key", "k", "--weight", "inf"),
    ("flow", "weight", "q", "--key", "k", "--weight", "nan"),
    ("flow", "weight", "q", "--key", "k", "--weight", "1001"),
    ("flow", "weight", "q", "--key", "k", "--weight", "lots"),
    ("flow", "weight", "q", "--key", "", "--weight", "2"),
    ("flow", "weight", "q", "--key", "x" * 201, "--weight", "2"),
    ("flow", "weight", "q", "--weight", "2"),
    ("flow", "weight", " q", "--key", "k", "--weight", "2"),
    ("flow", "limit", "q", "--key", "k", "--running", "-1"),
    ("enqueue", "t", "--rate-limit", "nope"),
    ("enqueue", "t", "--rate-limit", "api:0"),
    ("enqueue", "t", "--rate-limit", "api:x"),
    ("enqueue", "t", "--rate-limit", "api:4"),
    ("enqueue", "t", "--rate-limit", "a b"),
]


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a)[:60])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(capsys: pytest.CaptureFixture[str], dsn: str,
                                                             schema: str, conn: Connection,
                                                             args: tuple[str, ...]) -> None:
    flow.set_rate_limit(conn, "api", 1, burst=3, schema=schema)
    flow.set_key_weight(conn, "q", "k", 2, schema=schema)
    before = _state(conn, schema)
    code, out, err = _cli(capsys, dsn, schema, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "error" in err, (code, out, err)
    assert _state(conn, schema) == before


def test_a_bad_line_of_a_file_names_its_line_and_enqueues_nothing(capsys: pytest.CaptureFixture[str], dsn: str,
                                                                  schema: str, conn: Connection,
                                                                  tmp_path: Path) -> None:
    flow.set_rate_limit(conn, "api", 1, burst=3, schema=schema)
    jobs = tmp_path / "jobs.jsonl"
    for bad, message in (('{"task": "t", "rate_limit": "nope"}', "jobs.jsonl:2: unknown rate limit 'nope'"),
                         ('{"task": "t", "rate_limit": "api:9"}', "jobs.jsonl:2: a job taking 9 units"),
                         ('{"task": "t", "rate_limit": 3}', "jobs.jsonl:2: rate limit must be a string")):
        jobs.write_text('{"task": "t", "rate_limit": "api"}\n' + bad + "\n")
        code, _, err = _cli(capsys, dsn, schema, "enqueue", "--from-file", str(jobs))
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert _state(conn, schema)[3] == 0
