"""The workflow page's DAG (src/tenure/ui/dag.py): layering by the longest path from a root, the
order within a layer, XML escaping, the per-layer and layer caps, and the colours by status."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from tenure.ui import dag
from tenure.ui.dag import Step

SVG = "{http://www.w3.org/2000/svg}"


def _nodes(svg: str) -> dict[int, ET.Element]:
    root = ET.fromstring(svg)
    return {int(a.attrib["data-step-id"]): a for a in root.iter(f"{SVG}a")}


def test_a_step_sits_one_layer_past_its_deepest_dep() -> None:
    # a -> b -> d, a -> d (a shortcut), c is a second root; e waits for c and d.
    steps = [Step(1, "a", "completed"), Step(2, "b", "completed", (1,)), Step(3, "c", "completed"),
             Step(4, "d", "running", (1, 2)), Step(5, "e", "waiting", (3, 4))]
    assert dag.layer_of(steps) == {1: 0, 2: 1, 3: 0, 4: 2, 5: 3}
    assert [[s.name for s in layer] for layer in dag.layers(steps)] == [["a", "c"], ["b"], ["d"], ["e"]]
    # Deps outside the steps and a step naming itself are ignored; no steps, no layers.
    assert dag.layer_of([Step(7, "x", "pending", (99, 7))]) == {7: 0}
    assert dag.layers([]) == []


def test_a_long_chain_needs_no_recursion() -> None:
    chain = [Step(i, f"s{i}", "waiting", (i - 1,) if i > 1 else ()) for i in range(1, 5001)]
    assert dag.layer_of(chain)[5000] == 4999


def test_a_layer_is_ordered_by_its_deps_rows() -> None:
    # Roots 1 and 2; 3 waits for 2 and 4 for 1: 4 is drawn above 3 (no crossing).
    steps = [Step(1, "r1", "completed"), Step(2, "r2", "completed"), Step(3, "after-r2", "pending", (2,)),
             Step(4, "after-r1", "pending", (1,))]
    assert [s.id for s in dag.layers(steps)[1]] == [4, 3]


def test_names_and_statuses_are_escaped_and_long_names_cut() -> None:
    name = '<script>alert("x")</script> & \'more\' and a name far too long to fit'
    svg = dag.render([Step(1, name, "pending"), Step(2, "b]]>", 'we"ird<', (1,))])
    root = ET.fromstring(svg)  # well-formed XML
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert name[:dag.NAME_CHARS - 1] + "…" in texts
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    assert any(t.startswith(name) for t in titles)
    assert _nodes(svg)[2].attrib["data-status"] == 'we"ird<'


def test_every_node_links_to_its_job_and_carries_its_status() -> None:
    steps = [Step(10, "a", "completed"), Step(11, "b", "failed", (10,)), Step(12, "c", "cancelled", (11,))]
    nodes = _nodes(dag.render(steps))
    assert {i: (a.attrib["href"], a.attrib["data-status"]) for i, a in nodes.items()} == {
        10: ("../jobs/10", "completed"), 11: ("../jobs/11", "failed"), 12: ("../jobs/12", "cancelled")}
    custom = _nodes(dag.render(steps, href=lambda i: f"/p/jobs/{i}?a=1&b=2"))
    assert custom[10].attrib["href"] == "/p/jobs/10?a=1&b=2"
    edges = ET.fromstring(dag.render(steps)).findall(f".//{SVG}path[@class='edge']")
    assert len(edges) == 2


def test_a_diamond_draws_four_nodes_and_four_edges() -> None:
    steps = [Step(1, "top", "completed"), Step(2, "left", "completed", (1,)), Step(3, "right", "running", (1,)),
             Step(4, "bottom", "waiting", (2, 3))]
    root = ET.fromstring(dag.render(steps))
    assert len(_nodes(dag.render(steps))) == 4
    assert len(root.findall(f".//{SVG}path[@class='edge']")) == 4
    assert root.attrib["data-steps"] == root.attrib["data-drawn"] == "4"


def test_a_wide_layer_is_capped_with_a_more_node() -> None:
    steps = [Step(1, "root", "completed")] + [Step(i, f"leaf-{i}", "pending", (1,)) for i in range(2, 10_000)]
    svg = dag.render(steps)
    nodes = _nodes(svg)
    assert len(nodes) == 1 + dag.LAYER_CAP
    more = [g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.attrib.get("class") == "more"]
    assert [g.attrib["data-more"] for g in more] == [str(9998 - dag.LAYER_CAP)]
    assert f"+{9998 - dag.LAYER_CAP} more" in svg
    # One edge per drawn leaf and one to the "+N more" node: the page stays light.
    assert svg.count('class="edge"') == dag.LAYER_CAP + 1
    assert len(svg) < 60_000


def test_layers_past_the_cap_are_counted_not_drawn() -> None:
    chain = [Step(i, f"s{i}", "waiting", (i - 1,) if i > 1 else ()) for i in range(1, 101)]
    svg = dag.render(chain, layers_cap=10)
    assert len(_nodes(svg)) == 10
    assert re.search(r'data-deeper="90"', svg)
    boxes, deeper = dag.place(dag.layers(chain), cap=5, layers_cap=10)
    assert (len(boxes), deeper) == (10, 90)


def test_each_status_has_its_colour() -> None:
    assert {s: dag.colours(s)[0] for s in dag.COLOURS} == {
        "waiting": "#c4c9d1", "pending": "#2f6fd6", "running": "#f0a202", "completed": "#2b8a3e",
        "failed": "#c92a2a", "cancelled": "#495057"}
    assert dag.colours("mystery") == dag.UNKNOWN
    svg = dag.render([Step(1, "ok", "completed"), Step(2, "bad", "failed", (1,))])
    rects = {a.attrib["data-step-id"]: a.find(f"{SVG}rect") for a in ET.fromstring(svg).iter(f"{SVG}a")}
    assert rects["1"].attrib["fill"] == "#2b8a3e"  # type: ignore[union-attr]
    assert rects["2"].attrib["fill"] == "#c92a2a"  # type: ignore[union-attr]


def test_steps_of_reads_the_rows_of_workflow_show() -> None:
    rows = [{"id": 5, "name": "a", "status": "completed", "deps": []}, {"id": 6, "name": "b", "status": "waiting",
                                                                        "deps": [5]}]
    assert dag.steps_of(rows) == [Step(5, "a", "completed"), Step(6, "b", "waiting", (5,))]
