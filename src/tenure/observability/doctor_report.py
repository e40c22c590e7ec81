"""What `tenure doctor` reports: findings with their evidence, the scope, suggested settings,
and the report's JSON and text forms.

The diagnosis itself is :mod:`.doctor`; this module only holds the result and renders it.
Limits: the text form is for people (one line per finding, evidence indented); scripts read
``--json`` (:meth:`Report.to_json`), where non-finite floats become null.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

SEVERITIES = ("info", "warning", "critical")
EXIT_HEALTHY = 0
EXIT_FINDINGS = 1


def severity_rank(severity: str) -> int:
    """Position of ``severity`` in :data:`SEVERITIES` (higher is worse)."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Finding:
    """One diagnosis with the data that supports it."""

    code: str
    """``dead_worker``, ``hung_job``, ``slow_storage``, ``heartbeats_late``, ``expired_leases``,
    ``reaper_too_eager``, ``reaper_too_slow``, ``lease_below_runtime_p99``."""
    severity: str
    summary: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class Suggestion:
    """Settings for one queue and task derived from its observed runtime (R21)."""

    queue: str
    task: str
    runs: int
    runtime_p50_seconds: float
    runtime_p99_seconds: float
    lease_seconds: float
    heartbeat_seconds: float
    grace_seconds: float
    current_lease_seconds: float | None
    """Lease granted at the last renewal of a running job of this task (None: none running)."""
    current_heartbeat_seconds: float | None
    """Heartbeat interval registered by the live workers of this queue (None: none live)."""
    basis: str


@dataclass(frozen=True)
class ScopeEntry:
    """Where the trouble is: one queue and task with expired or reaped leases."""

    queue: str
    task: str
    expired_now: int
    reaped_in_window: int
    since: str | None
    """First expired lease or reap seen (ISO time, DB clock)."""
    workers: list[str]
    worker_versions: list[str]


@dataclass(frozen=True)
class Report:
    checked_at: str
    queue: str | None
    findings: list[Finding]
    scope: list[ScopeEntry]
    suggestions: list[Suggestion]
    storage: dict[str, Any]
    workers: dict[str, int]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not any(f.severity in ("warning", "critical") for f in self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_HEALTHY if self.healthy else EXIT_FINDINGS

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"healthy": self.healthy, "exit_code": self.exit_code, **asdict(self)}
        return jsonable(out)  # type: ignore[no-any-return]


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def render_text(report: Report) -> str:
    lines = [f"tenure doctor at {report.checked_at} (DB clock)"
             + (f", queue {report.queue}" if report.queue else "")
             + f": {'healthy' if report.healthy else 'findings need attention'}",
             f"workers: {report.workers['alive']} alive, {report.workers['silent']} silent, "
             f"{report.workers['stopped']} stopped; database round trip median "
             f"{report.storage['rtt_median_seconds'] * 1000:.1f} ms, max {report.storage['rtt_max_seconds'] * 1000:.1f} ms",
             ""]
    if not report.findings:
        lines.append("no findings")
    for f in report.findings:
        lines.append(f"[{f.severity.upper()}] {f.code}: {f.summary}")
        for key, value in jsonable(f.evidence).items():
            lines.append(f"    {key}: {json.dumps(value) if not isinstance(value, str) else value}")
    if report.scope:
        lines += ["", "scope (expired or reaped leases):"]
        for s in report.scope:
            lines.append(f"  {s.queue}/{s.task}: {s.expired_now} expired now, {s.reaped_in_window} reaped in window, "
                         f"since {s.since or '-'}; workers {', '.join(s.workers) or '-'}; "
                         f"versions {', '.join(s.worker_versions) or '-'}")
    if report.suggestions:
        lines += ["", "suggested settings (from observed runtimes):"]
        for g in report.suggestions:
            current = (f" (now: lease {g.current_lease_seconds if g.current_lease_seconds is not None else '?'}s, "
                       f"heartbeat {g.current_heartbeat_seconds if g.current_heartbeat_seconds is not None else '?'}s)")
            lines.append(f"  {g.queue}/{g.task}: --lease {g.lease_seconds:g}s --heartbeat {g.heartbeat_seconds:g}s "
                         f"--grace {g.grace_seconds:g}s{current}")
            lines.append(f"      {g.basis}")
    return "\n".join(lines)
