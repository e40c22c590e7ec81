"""A workflow's DAG as server-side SVG for the job browser's workflow page (issue 39): pure
functions of the steps, no database and no JavaScript.

Layout: a step's layer is the longest path to it from a root (a step without deps), layers are
columns from left to right, and each column is ordered by the mean row of its drawn deps (one
pass, which uncrosses the common shapes: chains, diamonds, fan-out/fan-in). A column draws at
most :data:`LAYER_CAP` steps and then one "+N more" node (edges to the hidden steps end there),
and at most :data:`LAYERS_CAP` columns are drawn, so a workflow of 10,000 steps stays a light
page. Every step is a rounded rect filled by its status (:data:`COLOURS`) inside an ``<a
href>`` to its job page, carrying ``data-step-id`` and ``data-status``; names are XML-escaped and
cut to :data:`NAME_CHARS` characters (the full name is the node's ``<title>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

LAYER_CAP = 50
"""The most steps drawn in one layer; the rest are one "+N more" node."""
LAYERS_CAP = 40
"""The most layers drawn; the deeper steps are counted in a note."""
NAME_CHARS = 20
"""Longer names are cut (with "…") in the node; the node's title has the whole name."""
NODE_W, NODE_H, GAP_X, GAP_Y, PAD, LEGEND_H = 168, 38, 56, 12, 12, 26
COLOURS: dict[str, tuple[str, str]] = {
    "waiting": ("#c4c9d1", "#1d232b"),
    "pending": ("#2f6fd6", "#ffffff"),
    "running": ("#f0a202", "#1d232b"),
    "completed": ("#2b8a3e", "#ffffff"),
    "failed": ("#c92a2a", "#ffffff"),
    "cancelled": ("#495057", "#ffffff"),
}
"""Status -> (fill, text colour). A status not listed is drawn as :data:`UNKNOWN`."""
UNKNOWN = ("#e9ecef", "#1d232b")
MORE = ("#ffffff", "#3d4653")
EDGE = "#8a94a3"


@dataclass(frozen=True)
class Step:
    """One node: the step's job id, name, job status and the job ids of its deps."""

    id: int
    name: str
    status: str
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Placed:
    """A drawn box: a step (``step``) or a layer's "+N more" (``more`` > 0), at column ``layer``, row ``row``."""

    layer: int
    row: int
    step: Step | None = None
    more: int = 0


def steps_of(rows: Iterable[Mapping[str, Any]]) -> list[Step]:
    """:class:`Step` from the rows of ``workflow_show``'s ``steps`` (id, name, status, deps)."""
    return [Step(int(r["id"]), str(r["name"]), str(r["status"]), tuple(int(d) for d in r.get("deps") or ()))
            for r in rows]


def layer_of(steps: Sequence[Step]) -> dict[int, int]:
    """Step id -> its layer: 0 for a root, else one more than its deepest dep (deps outside
    ``steps`` are ignored). Kahn's order, so a long chain needs no recursion; a step on a cycle
    (which the schema cannot hold) gets layer 0."""
    ids = {s.id for s in steps}
    deps = {s.id: [d for d in dict.fromkeys(s.deps) if d in ids and d != s.id] for s in steps}
    children: dict[int, list[int]] = {s.id: [] for s in steps}
    missing = {s.id: len(deps[s.id]) for s in steps}
    for sid, ds in deps.items():
        for d in ds:
            children[d].append(sid)
    layer = dict.fromkeys(ids, 0)
    ready = [s.id for s in steps if missing[s.id] == 0]
    while ready:
        sid = ready.pop()
        for child in children[sid]:
            layer[child] = max(layer[child], layer[sid] + 1)
            missing[child] -= 1
            if missing[child] == 0:
                ready.append(child)
    return layer


def layers(steps: Sequence[Step]) -> list[list[Step]]:
    """The steps by layer, each layer ordered by the mean row of its deps in the layers before
    (then by id)."""
    layer = layer_of(steps)
    out: list[list[Step]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for s in sorted(steps, key=lambda s: s.id):
        out[layer[s.id]].append(s)
    row: dict[int, int] = {}
    for i, column in enumerate(out):
        if i:
            column.sort(key=lambda s: (_mean(row[d] for d in s.deps if d in row), s.id))
        row.update({s.id: r for r, s in enumerate(column)})
    return out


def _mean(values: Iterable[int]) -> float:
    vs = list(values)
    return sum(vs) / len(vs) if vs else 0.0


def place(by_layer: Sequence[Sequence[Step]], *, cap: int = LAYER_CAP,
          layers_cap: int = LAYERS_CAP) -> tuple[list[Placed], int]:
    """The boxes to draw from :func:`layers` (at most ``cap`` steps and one "+N more" per
    layer, at most ``layers_cap`` layers) and how many steps the layers past ``layers_cap`` hold."""
    boxes: list[Placed] = []
    for i, column in enumerate(by_layer[:layers_cap]):
        boxes += [Placed(i, r, step=s) for r, s in enumerate(column[:cap])]
        if len(column) > cap:
            boxes.append(Placed(i, cap, more=len(column) - cap))
    return boxes, sum(len(c) for c in by_layer[layers_cap:])


def colours(status: str) -> tuple[str, str]:
    """(fill, text colour) of a status."""
    return COLOURS.get(status, UNKNOWN)


def _cut(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def render(steps: Sequence[Step], *, href: Callable[[int], str] = lambda i: f"../jobs/{i}",
           cap: int = LAYER_CAP, layers_cap: int = LAYERS_CAP) -> str:
    """The SVG text of the DAG (see the module's doc); ``href`` is a step's link from its job id
    (by default relative to a page at ``{prefix}/workflows/ID``)."""
    by_layer = layers(steps)
    boxes, deeper = place(by_layer, cap=cap, layers_cap=layers_cap)
    rows = max((b.row + 1 for b in boxes), default=0)
    columns = max((b.layer + 1 for b in boxes), default=0)
    height_of = {layer: 0 for layer in range(columns)}
    for b in boxes:
        height_of[b.layer] = max(height_of[b.layer], b.row + 1)
    width = max(PAD * 2 + columns * NODE_W + max(columns - 1, 0) * GAP_X, 600)
    height = PAD * 2 + LEGEND_H + rows * NODE_H + max(rows - 1, 0) * GAP_Y + (18 if deeper else 0)

    def xy(b: Placed) -> tuple[int, int]:
        offset = (rows - height_of[b.layer]) * (NODE_H + GAP_Y) // 2  # centre each column
        return PAD + b.layer * (NODE_W + GAP_X), PAD + LEGEND_H + offset + b.row * (NODE_H + GAP_Y)

    at = {b.step.id: b for b in boxes if b.step is not None}
    more = {b.layer: b for b in boxes if b.more}
    hidden_layer = {s.id: i for i, column in enumerate(by_layer) for s in column if s.id not in at}
    edges: dict[tuple[int, int, int, int], None] = {}
    for s in steps:
        target = at.get(s.id) or more.get(hidden_layer.get(s.id, -1))
        if target is None:
            continue
        for d in s.deps:
            source = at.get(d)
            if source is not None:
                edges[(*xy(source), *xy(target))] = None
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img" aria-label="workflow graph: {len(steps)} steps" '
             f'data-steps="{len(steps)}" data-drawn="{len(at)}" font-family="system-ui, sans-serif" font-size="12">',
             '<defs><marker id="dag-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
             f'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="{EDGE}"/></marker></defs>', _legend()]
    for x1, y1, x2, y2 in edges:
        sx, sy, tx, ty = x1 + NODE_W, y1 + NODE_H // 2, x2, y2 + NODE_H // 2
        bend = (tx - sx) // 2
        parts.append(f'<path class="edge" d="M{sx},{sy} C{sx + bend},{sy} {tx - bend},{ty} {tx},{ty}" fill="none" '
                     f'stroke="{EDGE}" stroke-width="1.4" marker-end="url(#dag-arrow)"/>')
    for b in boxes:
        parts.append(_node(b, *xy(b), href))
    if deeper:
        parts.append(f'<text x="{PAD}" y="{height - PAD}" fill="#3d4653" data-deeper="{deeper}">'
                     f'+{deeper} more steps in the layers past {layers_cap} (see the table)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _node(b: Placed, x: int, y: int, href: Callable[[int], str]) -> str:
    if b.step is None:
        fill, ink = MORE
        return (f'<g class="more" data-more="{b.more}"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" '
                f'fill="{fill}" stroke="#8a94a3" stroke-dasharray="4 3"/><text x="{x + NODE_W // 2}" '
                f'y="{y + NODE_H // 2 + 4}" text-anchor="middle" fill="{ink}">+{b.more} more</text></g>')
    s = b.step
    fill, ink = colours(s.status)
    stroke = "#6a7380" if s.status in COLOURS else "#adb5bd"
    return (f'<a href="{escape(href(s.id), quote=True)}" data-step-id="{s.id}" data-status="{escape(s.status, quote=True)}">'
            f'<title>{escape(s.name)} (job {s.id}, {escape(s.status)})</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x + 10}" y="{y + 16}" fill="{ink}" font-weight="600">{escape(_cut(s.name))}</text>'
            f'<text x="{x + 10}" y="{y + 30}" fill="{ink}" font-size="10.5">#{s.id} · {escape(s.status)}</text></a>')


def _legend() -> str:
    items, x = [], PAD
    for status, (fill, _) in COLOURS.items():
        items.append(f'<rect x="{x}" y="{PAD - 2}" width="12" height="12" rx="3" fill="{fill}" stroke="#6a7380"/>'
                     f'<text x="{x + 17}" y="{PAD + 8}" fill="#3d4653">{status}</text>')
        x += 17 + 7 * len(status) + 18
    return f'<g class="legend">{"".join(items)}</g>'
