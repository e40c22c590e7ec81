"""Generated dashboards and alert rules: up to date, complete, and in house style."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tenure.core.errors import ConfigError
from tenure.observability import generate
from tenure.observability.alerts import (
    ALERT_NAMES,
    SEVERITIES,
    AlertThresholds,
    build_rule_groups,
    prom_duration,
    render_rules,
    runbook_anchor,
)
from tenure.observability.dashboard_flow import FLOW_ROW_TITLE, RATE_LIMIT_METRICS
from tenure.observability.dashboard_sqs import SQS_METRICS, SQS_ROW_TITLE
from tenure.observability.dashboards import DASHBOARD_UIDS, build_dashboards, render_dashboard
from tenure.sqs.metrics import SqsMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_STEMS = ("overview", "lease-health", "retries-dedup")
METRIC_RE = re.compile(r"\b(tenure_[a-z0-9_]+)(\{[^}]*\})?")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
#: Metrics with no queue label (one reaper serves every queue of a schema, a rate limit is
#: shared by every queue): the only ones a panel may show without the $queue filter.
SCHEMA_WIDE_METRICS = {
    "tenure_reaper_last_cycle_timestamp_seconds",
    "tenure_reaper_last_cycle_duration_seconds",
    *RATE_LIMIT_METRICS,
}


def _rules(text: str) -> list[dict[str, Any]]:
    data = yaml.safe_load(text)
    return [rule for group in data["groups"] for rule in group["rules"]]


def _committed_rules() -> list[dict[str, Any]]:
    return _rules((ROOT / "dashboards" / "alerts.yaml").read_text(encoding="utf-8"))


def _committed_dashboards() -> dict[str, dict[str, Any]]:
    return {
        stem: json.loads((ROOT / "dashboards" / f"{stem}.json").read_text(encoding="utf-8"))
        for stem in DASHBOARD_STEMS
    }


def _documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(tenure_[a-z0-9_]+)` \|", text, flags=re.MULTILINE))


def _github_slug(heading: str) -> str:
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


# --- regeneration ---------------------------------------------------------------------------

def test_regenerating_into_a_temp_dir_matches_the_committed_files(tmp_path: Path) -> None:
    assert generate.main(["--root", str(tmp_path)]) == 0
    produced = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert produced == sorted(generate.generated_files())
    differing = [
        rel for rel in produced
        if (tmp_path / rel).read_bytes() != (ROOT / rel).read_bytes()
    ]
    assert differing == [], (
        f"generated files differ from the committed ones: {differing}; "
        "run `python -m tenure.observability.generate`"
    )


def test_check_mode_passes_on_the_repository() -> None:
    assert generate.main(["--check", "--root", str(ROOT)]) == 0


def test_check_mode_reports_a_modified_missing_or_stale_file(tmp_path: Path) -> None:
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.main(["--check", "--root", str(tmp_path)]) == 0

    overview = tmp_path / "dashboards" / "overview.json"
    overview.write_text(overview.read_text(encoding="utf-8").replace("tenure", "tenur"))
    (tmp_path / "charts" / "tenure" / "files" / "alerts.yaml").unlink()
    (tmp_path / "dashboards" / "old.json").write_text("{}\n")

    problems = generate.check(tmp_path, generate.generated_files())
    assert any(p.startswith("differs: dashboards/overview.json") for p in problems)
    assert "missing: charts/tenure/files/alerts.yaml" in problems
    assert "stale (not generated any more): dashboards/old.json" in problems
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1


def test_rendering_is_deterministic() -> None:
    assert render_rules() == render_rules()
    first = {k: render_dashboard(d) for k, d in build_dashboards().items()}
    second = {k: render_dashboard(d) for k, d in build_dashboards().items()}
    assert first == second


def test_chart_copies_equal_the_dashboards_directory() -> None:
    chart = ROOT / "charts" / "tenure" / "files"
    assert (chart / "alerts.yaml").read_bytes() == (ROOT / "dashboards" / "alerts.yaml").read_bytes()
    for stem in DASHBOARD_STEMS:
        assert (chart / "dashboards" / f"{stem}.json").read_bytes() == (
            ROOT / "dashboards" / f"{stem}.json"
        ).read_bytes()


# --- alert rules ----------------------------------------------------------------------------

REQUIRED_ALERTS = {
    "TenureExpiredLeases", "TenureExpiredLeasesHigh", "TenureHeartbeatLagHigh",
    "TenureOldestRunningJobTooOld", "TenureReaperTooAggressive", "TenureDedupHitRateSpike",
    "TenureRetryStorm", "TenureDeadLetterQueueGrowing", "TenureOldestReadyJobOverSLA",
    "TenureJobsPilingUpWorkersAlive", "TenureExporterDown", "TenureClaimsStalled",
    "TenureDatabaseReconnectBurst", "TenureFlowStarvation",
}


def test_all_required_alerts_exist_once() -> None:
    names = [rule["alert"] for rule in _committed_rules()]
    assert len(names) == len(set(names))
    assert REQUIRED_ALERTS <= set(names)
    assert tuple(names) == ALERT_NAMES


@pytest.mark.parametrize("rule", _committed_rules(), ids=lambda r: str(r["alert"]))
def test_alert_follows_house_style(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert re.fullmatch(r"Tenure[A-Z][A-Za-z0-9]+", name)
    assert rule["labels"]["severity"] in SEVERITIES
    assert re.fullmatch(r"\d+[hms](\d+[ms])?(\d+s)?", rule["for"]), rule["for"]
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["summary"].strip()
    assert "$value" in annotations["description"]
    # The exporter and the reaper cycle serve a whole schema, reconnects are per process: no queue label.
    if name not in ("TenureExporterDown", "TenureReaperNotRunning", "TenureDatabaseReconnectBurst"):
        assert "{{ $labels.queue }}" in annotations["description"]
        assert "queue" in rule["expr"]
    assert annotations["runbook_url"] == (
        f"https://github.com/tenure-dev/tenure/blob/main/docs/runbooks.md#{name.lower()}"
    )


def test_every_alert_has_a_runbook_section() -> None:
    text = (ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8")
    anchors = {
        _github_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    }
    missing = [name for name in ALERT_NAMES if runbook_anchor(name) not in anchors]
    assert missing == []
    assert "general-playbook-zombie-jobs" in anchors
    # Each alert section names the commands an operator uses to confirm it.
    for name in ALERT_NAMES:
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for label in ("**Meaning.**", "**Likely causes.**", "**Confirm.**", "**What to do.**",
                      "**What not to do.**"):
            assert label in section, f"{name}: {label}"
        assert "tenure " in section or "PromQL" in section, name


def test_metrics_used_by_rules_and_dashboards_are_documented() -> None:
    documented = _documented_metrics()
    assert "tenure_queue_running_expired_leases" in documented  # the table parsed
    used: set[str] = set()
    for rule in _committed_rules():
        used.update(m.group(1) for m in METRIC_RE.finditer(rule["expr"]))
    for dashboard in _committed_dashboards().values():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                used.update(m.group(1) for m in METRIC_RE.finditer(target["expr"]))
    undocumented = set()
    for metric in used:
        base = metric
        for suffix in HISTOGRAM_SUFFIXES:
            if metric.endswith(suffix) and metric[: -len(suffix)] in documented:
                base = metric[: -len(suffix)]
        if base not in documented:
            undocumented.add(metric)
    assert undocumented == set()


def test_thresholds_are_settings_not_literals() -> None:
    t = AlertThresholds(
        ready_age_sla_seconds=123, expired_leases_critical_count=42,
        heartbeat_lag_p95_seconds=17.5, reaper_window_seconds=420,
        exporter_job_regex="my-exporter", runbook_base_url="https://example.test/rb.md",
    )
    rules = {r["alert"]: r for r in _rules(render_rules(t))}
    assert rules["TenureOldestReadyJobOverSLA"]["expr"].endswith("> 123")
    assert rules["TenureExpiredLeasesHigh"]["expr"].endswith("> 42")
    assert rules["TenureHeartbeatLagHigh"]["expr"].endswith("> 17.5")
    assert "[7m]" in rules["TenureReaperTooAggressive"]["expr"]
    assert 'up{job=~"my-exporter"}' in rules["TenureExporterDown"]["expr"]
    assert rules["TenureRetryStorm"]["annotations"]["runbook_url"] == (
        "https://example.test/rb.md#tenureretrystorm"
    )


def test_fast_variant_changes_only_for_and_interval() -> None:
    default = build_rule_groups(AlertThresholds())
    fast = build_rule_groups(AlertThresholds().with_for_seconds(10, evaluation_interval_seconds=1))
    assert [g["interval"] for g in fast["groups"]] == ["1s"] * len(fast["groups"])
    for g_default, g_fast in zip(default["groups"], fast["groups"], strict=True):
        for r_default, r_fast in zip(g_default["rules"], g_fast["rules"], strict=True):
            assert r_fast["for"] == "10s"
            assert r_fast["expr"] == r_default["expr"]
            assert r_fast["labels"] == r_default["labels"]


@pytest.mark.parametrize("changes, message", [
    ({"evaluation_interval_seconds": 0}, "evaluation_interval_seconds"),
    ({"expired_leases_for_seconds": -1}, "expired_leases_for_seconds"),
    ({"reaper_window_seconds": 0}, "reaper_window_seconds"),
    ({"retry_share_of_claims": 1.5}, "retry_share_of_claims"),
    ({"expired_leases_warning_count": 5, "expired_leases_critical_count": 2},
     "expired_leases_critical_count"),
    ({"dedup_baseline_window_seconds": 60}, "dedup_baseline_window_seconds"),
    ({"exporter_job_regex": "("}, "exporter_job_regex"),
    ({"dependency_timeout_error_code_regex": 'a"b'}, "dependency_timeout_error_code_regex"),
    ({"runbook_base_url": "https://x/runbooks.md#top"}, "runbook_base_url"),
    ({"ready_age_sla_seconds": 0}, "ready_age_sla_seconds"),
])
def test_invalid_thresholds_raise_config_error(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AlertThresholds(**changes).validate()
    with pytest.raises(ConfigError):
        render_rules(AlertThresholds(**changes))


def test_defaults_are_valid() -> None:
    AlertThresholds().validate()


@pytest.mark.parametrize("seconds, expected", [
    (0, "0s"), (1, "1s"), (60, "1m"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"),
    (3661, "1h1m1s"),
])
def test_prom_duration(seconds: int, expected: str) -> None:
    assert prom_duration(seconds) == expected


def test_promtool_suite_covers_every_alert_before_and_at_for() -> None:
    """Each alert has a test group with no alert at T-1m and the alert firing at T."""
    covered: dict[str, bool] = {name: False for name in ALERT_NAMES}
    annotated: dict[str, bool] = {name: False for name in ALERT_NAMES}
    for path in sorted((ROOT / "tests" / "prometheus").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert data["rule_files"] == ["../../dashboards/alerts.yaml"], path
        for group in data["tests"]:
            cases = group.get("alert_rule_test", [])
            firing = {(c["alertname"], c["eval_time"]) for c in cases if c["exp_alerts"]}
            quiet = {(c["alertname"], c["eval_time"]) for c in cases if not c["exp_alerts"]}
            for case in cases:
                for alert in case["exp_alerts"]:
                    if "severity" in alert["exp_labels"] and {
                        "summary", "description", "runbook_url"
                    } <= set(alert["exp_annotations"]):
                        annotated[case["alertname"]] = True
            for name, eval_time in firing:
                minutes = int(eval_time.rstrip("m"))
                if (name, f"{minutes - 1}m") in quiet:
                    covered[name] = True
    assert [n for n, ok in covered.items() if not ok] == []
    assert [n for n, ok in annotated.items() if not ok] == []


# --- dashboards -----------------------------------------------------------------------------

def test_dashboards_have_stable_unique_uids() -> None:
    dashboards = _committed_dashboards()
    assert {stem: d["uid"] for stem, d in dashboards.items()} == DASHBOARD_UIDS
    assert len(set(DASHBOARD_UIDS.values())) == len(DASHBOARD_UIDS)


@pytest.mark.parametrize("stem", DASHBOARD_STEMS)
def test_dashboard_template_variables(stem: str) -> None:
    variables = {v["name"]: v for v in _committed_dashboards()[stem]["templating"]["list"]}
    assert set(variables) == {"datasource", "queue"}
    datasource = variables["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    queue = variables["queue"]
    assert queue["type"] == "query"
    assert queue["query"] == "label_values(tenure_queue_jobs, queue)"
    assert queue["multi"] is True and queue["includeAll"] is True
    assert queue["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def _sqs_row(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels under the overview's "SQS API" row (up to the next row or the end)."""
    panels = dashboard["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == SQS_ROW_TITLE)
    rest = panels[start + 1:]
    end = next((i for i, p in enumerate(rest) if p["type"] == "row"), len(rest))
    return rest[:end]


@pytest.mark.parametrize("stem", DASHBOARD_STEMS)
def test_every_panel_query_filters_by_queue(stem: str) -> None:
    dashboard = _committed_dashboards()[stem]
    panels = dashboard["panels"]
    assert len(panels) >= 4
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    sqs_ids = {p["id"] for p in _sqs_row(dashboard)} if stem == "overview" else set()
    for panel in panels:
        if panel["type"] == "row":
            assert panel["targets"] == [] and panel["collapsed"] is False, panel["title"]
            assert panel["gridPos"] == {"h": 1, "w": 24, "x": 0, "y": panel["gridPos"]["y"]}
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            expr = target["expr"]
            selectors = list(METRIC_RE.finditer(expr))
            assert selectors, f"{panel['title']}: no tenure metric in {expr}"
            for match in selectors:
                if match.group(1) in SCHEMA_WIDE_METRICS:
                    continue
                if panel["id"] in sqs_ids:  # `tenure sqs` metrics: no queue label, and only there
                    assert match.group(1).removesuffix("_bucket") in SQS_METRICS, (panel["title"], expr)
                    assert "$queue" not in (match.group(2) or ""), (panel["title"], expr)
                    continue
                assert match.group(2) and 'queue=~"$queue"' in match.group(2), (
                    f"{panel['title']}: {match.group(0)} lacks the queue filter"
                )


def test_dashboards_cover_the_requested_panels() -> None:
    dashboards = _committed_dashboards()

    def exprs(stem: str) -> str:
        return "\n".join(
            t["expr"] for p in dashboards[stem]["panels"] for t in p["targets"]
        )

    overview = exprs("overview")
    for metric in ("tenure_jobs_completed_total", "tenure_queue_live_workers",
                   "tenure_queue_oldest_ready_age_seconds", "tenure_queue_dead_letter_jobs"):
        assert metric in overview
    lease = exprs("lease-health")
    for metric in ("tenure_queue_running_expired_leases", "tenure_queue_heartbeat_lag_max_seconds",
                   "tenure_queue_heartbeat_lag_p95_seconds",
                   "tenure_queue_oldest_running_age_seconds", "tenure_queue_reaped_jobs_total",
                   "tenure_leases_lost_total", "tenure_stale_writes_rejected_total",
                   "tenure_lease_extensions_total", "tenure_queue_reaps_total",
                   "tenure_reaper_last_cycle_timestamp_seconds"):
        assert metric in lease
    # The reaper's own process metrics are absent when it is a CronJob: no panel needs them.
    assert "tenure_reaper_reaped_total" not in "\n".join(
        exprs(stem) for stem in ("overview", "lease-health", "retries-dedup"))
    retries = exprs("retries-dedup")
    for metric in ("tenure_job_attempts_bucket", "tenure_jobs_retried_total",
                   "tenure_dedup_hits_total", "tenure_dedup_checks_total",
                   "tenure_jobs_dead_lettered_total"):
        assert metric in retries
    assert "error_code" in retries and "source" in retries


@pytest.mark.parametrize("stem", DASHBOARD_STEMS)
def test_panels_do_not_overlap_and_fit_the_grid(stem: str) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _committed_dashboards()[stem]["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_overview_has_an_sqs_api_row_charting_every_sqs_metric() -> None:
    dashboard = _committed_dashboards()["overview"]
    row = next(p for p in dashboard["panels"] if p["type"] == "row" and p["title"] == SQS_ROW_TITLE)
    assert row["id"] > max(p["id"] for p in dashboard["panels"] if p["type"] != "row"
                          and not p["title"].startswith("SQS"))  # below the queue panels
    panels = _sqs_row(dashboard)
    assert len(panels) >= 4 and all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in panels)
    exprs = {t["expr"] for p in panels for t in p["targets"]}
    joined = "\n".join(exprs)
    # The metrics tenure sqs really exports, from its own registry: each one is charted.
    registry = CollectorRegistry()
    SqsMetrics(registry, ["ReceiveMessage"], lambda: 0)
    exported = {m.name for m in registry.collect()}
    assert {n.removesuffix("_total") for n in SQS_METRICS} == exported
    for name in SQS_METRICS:
        assert name in joined, name
    # request rate by action, error rate by error shape, p95 latency by action, long polls
    assert "sum by (action) (rate(tenure_sqs_requests_total[$__rate_interval]))" in exprs
    assert any('outcome!="ok"' in e and e.startswith("sum by (outcome") for e in exprs)
    assert ("histogram_quantile(0.95, sum by (action, le) "
            "(rate(tenure_sqs_request_duration_seconds_bucket[$__rate_interval])))") in exprs
    assert any(e.startswith("sum(tenure_sqs_long_polls_waiting") for e in exprs)
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in panels}
    assert units["SQS latency p95 by action"] == "s" and units["SQS error share"] == "percentunit"
    # no other dashboard uses the SQS metrics, and no SQS panel sits outside the row
    others = "\n".join(t["expr"] for stem, d in _committed_dashboards().items() for p in d["panels"]
                        for t in p["targets"] if stem != "overview" or p not in panels)
    assert "tenure_sqs_" not in others


def test_overview_has_a_flow_control_row_above_the_sqs_row() -> None:
    dashboard = _committed_dashboards()["overview"]
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == [FLOW_ROW_TITLE, SQS_ROW_TITLE]
    start = dashboard["panels"].index(rows[0])
    panels = dashboard["panels"][start + 1:dashboard["panels"].index(rows[1])]
    joined = "\n".join(t["expr"] for p in panels for t in p["targets"])
    for metric in ("tenure_flow_blocked_jobs", "tenure_flow_keys_at_limit", "tenure_rate_limit_tokens",
                   "tenure_rate_limit_paused", "tenure_flow_oldest_unblocked_wait_seconds"):
        assert metric in joined, metric
    assert "by (queue, reason)" in joined
    starvation = next(p for p in panels if "tenure_flow_oldest_unblocked_wait_seconds" in p["targets"][0]["expr"])
    steps = starvation["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == AlertThresholds().flow_starvation_wait_seconds


def test_dashboard_thresholds_follow_alert_settings() -> None:
    t = AlertThresholds(ready_age_sla_seconds=42)
    overview = json.loads(render_dashboard(build_dashboards(t)["overview"]))
    panel = next(p for p in overview["panels"] if p["title"] == "Oldest ready job age")
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 42
