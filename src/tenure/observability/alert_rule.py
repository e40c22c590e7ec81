"""The shape of one generated alerting rule and the text helpers the rule groups share.

Each ``alerts_<group>`` module returns :class:`AlertRule` values; :mod:`.alerts` turns them
into the Prometheus rule file. Limits: pure text, no PromQL parsing (promtool checks the
result in tests/prometheus).
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("critical", "warning", "info")
"""The only ``severity`` labels a rule may carry (Alertmanager routes on them)."""


@dataclass(frozen=True)
class AlertRule:
    """One generated alerting rule (rendered in this field order)."""

    name: str
    group: str
    severity: str
    expr: str
    for_seconds: int
    summary: str
    description: str


def prom_duration(seconds: int) -> str:
    """Render whole seconds as a Prometheus duration (``90`` -> ``1m30s``)."""
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    if seconds == 0:
        return "0s"
    out = ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out += f"{count}{unit}"
    return out


def number(value: float) -> str:
    """Render a number for PromQL or prose without a trailing ``.0``."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))
