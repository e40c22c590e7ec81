"""`tenure ui`'s workflow endpoints through a real `tenure ui` process on a real database (issue
39): GET workflows (newest first, paged), GET workflows/ID (header, steps with deps, statuses and
outputs, the DAG as SVG), a step's job document naming its workflow, the pages, and bad or
unknown ids as one JSON message; all readable under --read-only."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.core.repository import Repository
from ui_server import call, ui_process
from workflow_seed import seed_workflow

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def ui(cli_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with ui_process(cli_env, tmp_path / "ui.log", "--read-only") as url:
        yield url


def test_the_list_is_newest_first_and_pages(repo: Repository, ui: str) -> None:
    older, ids = seed_workflow(repo, "first")
    newer = tenure.Workflow("second <b>")
    newer.add("only")
    newer_id = newer.enqueue(repo.conn, schema=repo.schema)
    status, body, _ = call(f"{ui}/api/v1/workflows")
    assert status == 200 and [w["id"] for w in body["workflows"]] == [newer_id, older]
    assert body["next_cursor"] is None
    first = body["workflows"][1]
    assert (first["name"], first["steps"], first["finished"]) == ("first", len(ids), False)
    assert first["by_status"] == {"completed": 7, "running": 2, "pending": 2, "failed": 1, "cancelled": 2,
                                  "waiting": 1}
    status, page, _ = call(f"{ui}/api/v1/workflows?limit=1")
    assert status == 200 and [w["id"] for w in page["workflows"]] == [newer_id]
    status, rest, _ = call(f"{ui}/api/v1/workflows?limit=1&cursor={page['next_cursor']}")
    assert [w["id"] for w in rest["workflows"]] == [older] and rest["next_cursor"] is None


def test_one_workflow_has_its_steps_deps_outputs_and_graph(repo: Repository, ui: str) -> None:
    wid, ids = seed_workflow(repo)
    status, body, _ = call(f"{ui}/api/v1/workflows/{wid}")
    assert status == 200, body
    assert (body["id"], body["name"], body["cancelled_at"]) == (wid, "nightly-report", None)
    steps = {s["name"]: s for s in body["steps"]}
    assert set(steps) == set(ids)
    assert steps["load"]["deps"] == sorted([ids["transform"], ids["validate"]])
    assert steps["merge"]["deps"] == sorted(ids[f"shard-{i}"] for i in range(1, 9))
    assert steps["extract"]["output"] == {"rows": 1000 + ids["extract"]}
    assert (steps["merge"]["status"], steps["merge"]["cancel_reason"]) == ("cancelled", "dependency_failed")
    assert steps["audit"]["status"] == "waiting"
    assert body["by_status"]["completed"] == 7
    graph = ET.fromstring(body["graph"])
    nodes = {int(a.attrib["data-step-id"]): a.attrib["data-status"] for a in graph.iter(f"{SVG}a")}
    assert nodes == {s["id"]: s["status"] for s in body["steps"]}
    # The step's job document names its workflow; a plain job's has no such key.
    status, document, _ = call(f"{ui}/api/v1/jobs/{ids['load']}")
    assert status == 200 and document["job"]["workflow_id"] == wid
    assert document["workflow"] == {"workflow_id": wid, "workflow_name": "nightly-report", "name": "load"}
    plain = repo.enqueue("alone").id
    assert "workflow" not in call(f"{ui}/api/v1/jobs/{plain}")[1]
    # The pages are served (the app fills them from the API).
    status, html, _ = call(f"{ui}/workflows/{wid}")
    assert status == 200 and f'data-workflow="{wid}"' in html and "workflows.js" not in html
    assert call(f"{ui}/static/workflows.js")[0] == 200
    assert call(f"{ui}/workflows")[0] == 200



def test_a_wide_workflow_lists_its_first_steps_and_counts_and_draws_them_all(repo: Repository, ui: str) -> None:
    wide = tenure.Workflow("wide")
    root = wide.add("root")
    for n in range(600):
        wide.add("leaf", {"n": n}, name=f"leaf-{n}", deps=[root])
    wid = wide.enqueue(repo.conn, schema=repo.schema)
    status, body, _ = call(f"{ui}/api/v1/workflows/{wid}")
    assert status == 200
    assert (len(body["steps"]), body["steps_total"]) == (500, 601)
    assert body["by_status"] == {"pending": 1, "waiting": 600}
    assert "+" in body["graph"] and "more" in body["graph"]  # the 600-wide layer is capped

@pytest.mark.parametrize(("path", "status", "message"), [
    ("workflows/987654", 404, "no workflow 987654"),
    ("workflows/abc", 400, "invalid workflow id 'abc'"),
    ("workflows/0", 400, "invalid workflow id '0'"),
    ("workflows/99999999999999999999", 400, "invalid workflow id"),
    ("workflows?limit=0", 400, "limit"),
    ("workflows?cursor=x", 400, "cursor"),
    ("workflows?colour=red", 400, "unknown parameter 'colour'"),
])
def test_bad_or_unknown_ids_are_one_json_message(ui: str, path: str, status: int, message: str) -> None:
    got, answer, headers = call(f"{ui}/api/v1/{path}")
    assert got == status, answer
    assert headers["content-type"].startswith("application/json")
    assert list(answer) == ["error"] and message in answer["error"]
