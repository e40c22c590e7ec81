"""Panel building blocks of the generated Grafana dashboards: PromQL selectors, a declarative
:class:`PanelSpec`, and its rendering and layout with grafanalib.

Every query built with :func:`sel`, :func:`rate` or :func:`quantile` carries the
``queue=~"$queue"`` filter of the dashboards' queue variable; every panel reads the
``datasource`` variable. Limits: two panel kinds (time series and heatmap), expanded rows
only (a :class:`Section`), and a fixed look (legend table, multi tooltip, y axis from 0); the
dashboards themselves live in :mod:`.dashboards`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grafanalib.core import (
    Dashboard,
    GridPos,
    Heatmap,
    RowPanel,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

QUEUE_FILTER = 'queue=~"$queue"'
"""Label matcher every panel query carries."""

RATE = "$__rate_interval"
"""Range of every rate and increase: Grafana picks it from the scrape interval and the zoom."""
READY = 'state="ready"'
RUNNING = 'state="running"'
CANCELLED = 'state="cancelled"'
DEAD_LETTERED = 'outcome="dead_lettered"'
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
DASHBOARD_TAGS = ["tenure"]
"""Tag of every dashboard; the dashboards link to each other through it."""


def sel(metric: str, *matchers: str) -> str:
    """A series selector for ``metric`` filtered by the queue variable plus ``matchers``."""
    return f"{metric}{{{','.join((QUEUE_FILTER, *matchers))}}}"


def rate(metric: str, *matchers: str) -> str:
    """Per-second rate of a counter, filtered like :func:`sel`."""
    return f"rate({sel(metric, *matchers)}[{RATE}])"


def quantile(q: float, histogram: str, by: str = "queue") -> str:
    """The ``q`` quantile of a histogram's recent observations, per ``by``."""
    return (
        f"histogram_quantile({q}, sum by ({by}, le) "
        f"(rate({sel(histogram + '_bucket')}[{RATE}])))"
    )


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel and its legend (``{{label}}`` templates allowed)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    """Declarative panel description turned into a grafanalib panel by :func:`_panel`."""

    title: str
    description: str
    queries: list[Query]
    unit: str = "short"
    width: int = 12
    height: int = 8
    kind: str = "timeseries"  # or "heatmap"
    thresholds: list[float] = field(default_factory=list)
    bars: bool = False
    right_axis_regex: str | None = None
    stacked: bool = False


def _threshold_steps(values: list[float]) -> list[dict[str, Any]]:
    colors = ["orange", "red"]
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    for i, value in enumerate(values):
        steps.append({"color": colors[min(i, len(colors) - 1)], "value": value})
    return steps


def _targets(spec: PanelSpec) -> list[Any]:
    targets: list[Any] = []
    for i, q in enumerate(spec.queries):
        targets.append(Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            datasource=DATASOURCE,
            format="heatmap" if spec.kind == "heatmap" else "time_series",
            intervalFactor=1,
        ))
    return targets


def _panel(spec: PanelSpec, panel_id: int, x: int, y: int) -> Any:
    grid = GridPos(h=spec.height, w=spec.width, x=x, y=y)
    if spec.kind == "heatmap":
        return Heatmap(
            title=spec.title,
            description=spec.description,
            dataSource=DATASOURCE,
            targets=_targets(spec),
            gridPos=grid,
            id=panel_id,
            dataFormat="tsbuckets",
            hideZeroBuckets=True,
            yBucketBound="upper",
            maxDataPoints=50,
        )
    overrides: list[dict[str, Any]] = []
    if spec.right_axis_regex:
        overrides.append({
            "matcher": {"id": "byRegexp", "options": spec.right_axis_regex},
            "properties": [{"id": "custom.axisPlacement", "value": "right"}],
        })
    return TimeSeries(
        title=spec.title,
        description=spec.description,
        dataSource=DATASOURCE,
        targets=_targets(spec),
        gridPos=grid,
        id=panel_id,
        unit=spec.unit,
        drawStyle="bars" if spec.bars else "line",
        fillOpacity=30 if (spec.bars or spec.stacked) else 10,
        stacking={"mode": "normal", "group": "A"} if spec.stacked else {},
        legendDisplayMode="table",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        thresholds=_threshold_steps(spec.thresholds),
        thresholdsStyleMode="line" if spec.thresholds else "off",
        overrides=overrides,
        valueMin=0,
    )


def _templating() -> Any:
    datasource = Template(
        name="datasource",
        label="Data source",
        query="prometheus",
        type="datasource",
        hide=0,
        refresh=1,
        sort=0,
    )
    queue = Template(
        name="queue",
        label="Queue",
        query="label_values(tenure_queue_jobs, queue)",
        dataSource=DATASOURCE,
        multi=True,
        includeAll=True,
        allValue=".*",
        default="$__all",
        refresh=2,  # on time range change: new queues appear without a reload
        sort=1,
    )
    return Templating(list=[datasource, queue])


@dataclass(frozen=True)
class Section:
    """A titled Grafana row (expanded) and the panels under it."""

    title: str
    specs: list[PanelSpec]


def layout_dashboard(uid: str, title: str, description: str, specs: list[PanelSpec],
                     sections: Sequence[Section] = ()) -> Any:
    """A dashboard of ``specs`` laid out left to right in rows of 24 columns, ids from 1, then
    each of ``sections``: a row header (a Grafana ``row`` panel, no query) and its panels."""
    panels: list[Any] = []
    x = y = 0
    row_height = 0
    panel_id = 0
    for header, group in [(None, specs), *((s.title, s.specs) for s in sections)]:
        if header is not None:
            y += row_height
            x, row_height = 0, 0
            panel_id += 1
            panels.append(RowPanel(title=header, gridPos=GridPos(h=1, w=24, x=0, y=y), id=panel_id,
                                   collapsed=False))
            y += 1
        for spec in group:
            if x + spec.width > 24:
                x, y = 0, y + row_height
                row_height = 0
            panel_id += 1
            panels.append(_panel(spec, panel_id, x, y))
            x += spec.width
            row_height = max(row_height, spec.height)
    return Dashboard(
        title=title,
        description=description,
        uid=uid,
        tags=DASHBOARD_TAGS,
        panels=panels,
        templating=_templating(),
        time=Time("now-3h", "now"),
        refresh="30s",
        timezone="browser",
        schemaVersion=SCHEMA_VERSION,
        graphTooltip=1,
        editable=True,
        links=[{
            "asDropdown": False,
            "icon": "external link",
            "includeVars": True,
            "keepTime": True,
            "tags": DASHBOARD_TAGS,
            "targetBlank": False,
            "title": "tenure dashboards",
            "type": "dashboards",
        }],
    )
