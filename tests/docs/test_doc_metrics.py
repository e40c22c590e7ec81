"""docs/metrics.md against what the processes serve: a `tenure worker --metrics-port`, the
`tenure exporter --port` and a `tenure reaper --metrics-port`, all on loopback, scraped after one
job went through. Names, types and (where the scrape has samples) label names must agree.
"""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from docsupport import ROOT, TENURE, help_env, section

from support.processes import wait_for
from tenure.core.repository import Repository

pytestmark = pytest.mark.acceptance

METRICS_MD = ROOT / "docs" / "metrics.md"


@dataclass(frozen=True)
class Documented:
    name: str
    type: str
    labels: frozenset[str]


def documented(heading: str) -> dict[str, Documented]:
    rows = re.findall(r"^\| `(tenure_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", section(METRICS_MD, heading),
                      flags=re.MULTILINE)
    return {name: Documented(name, kind, frozenset(re.findall(r"[a-z_]+", labels.replace("(none)", ""))))
            for name, kind, labels in rows}


@dataclass
class Served:
    types: dict[str, str]
    labels: dict[str, set[str]]  # family -> label names seen on its samples (without `le`)


def _family(sample: str, types: dict[str, str]) -> str | None:
    for suffix in ("", "_bucket", "_sum", "_count", "_created"):
        base = sample[: len(sample) - len(suffix)] if suffix and sample.endswith(suffix) else sample
        if base in types and (suffix == "" or sample.endswith(suffix)):
            return base
    return None


def scrape(port: int) -> Served:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    types = {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (tenure_\S+) (\w+)$", body, flags=re.MULTILINE)}
    # prometheus-client's `X_created` gauges (creation time of counter and histogram X) are not metrics of ours.
    types = {n: t for n, t in types.items()
             if not (n.endswith("_created") and ({n[:-8], n[:-8] + "_total"} & set(types)))}
    labels: dict[str, set[str]] = {}
    for m in re.finditer(r"^(tenure_[a-z0-9_]+)(?:\{(.*?)\})? ", body, flags=re.MULTILINE):
        family = _family(m.group(1), types)
        if family is not None:
            names = set(re.findall(r'(\w+)="', m.group(2) or "")) - {"le"}
            labels.setdefault(family, set()).update(names)
    return Served(types, labels)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def served(dsn: str, schema: str, repo: Repository, tmp_path: Path) -> Iterator[dict[str, Served]]:
    """Scrapes of a worker, the exporter and a reaper, after one job was claimed and completed."""
    env = {**help_env(), "TENURE_DATABASE_URL": dsn, "TENURE_SCHEMA": schema}
    ports = {name: _free_port() for name in ("worker", "exporter", "reaper")}
    commands = {
        "worker": ["worker", "--app", "tenure.demo.tasks:app", "--metrics-port", str(ports["worker"]),
                   "--heartbeat", "0.5", "--lease", "2", "--grace", "1"],
        "exporter": ["exporter", "--port", str(ports["exporter"]), "--interval", "0.2", "--completed-interval", "0.2"],
        "reaper": ["reaper", "--interval", "0.2", "--metrics-port", str(ports["reaper"])],
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in commands.items():
            with open(tmp_path / f"{name}.log", "wb") as log:
                procs.append(subprocess.Popen([TENURE, *args], env=env, stdout=log, stderr=subprocess.STDOUT))
        for name, port in ports.items():
            wait_for(lambda: _up(port), 90, f"{name} /metrics on {port}")
        job = repo.enqueue("send_invoice_email", {"invoice_id": 42}, idempotency_key="invoice:42:email:v1").id
        wait_for(lambda: (j := repo.get_job(job)) and j["status"] == "completed", 60, "the job to complete")
        wait_for(lambda: "tenure_job_runtime_seconds" in scrape(ports["worker"]).labels, 30, "the worker's counters")
        wait_for(lambda: "tenure_reaper_cycle_seconds" in scrape(ports["reaper"]).labels, 30, "a reaper cycle")
        # The schema-wide reaper figures appear once a cycle is recorded and the stats cache renews.
        for name in ("exporter", "reaper"):
            wait_for(lambda: "tenure_reaper_cycles_total" in scrape(ports[name]).types, 60, f"{name}: reaper cycles")
        yield {name: scrape(port) for name, port in ports.items()}
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=15)


def _compare(doc: dict[str, Documented], got: Served, where: str) -> None:
    assert set(got.types) == set(doc), (
        f"{where}: served but not in docs/metrics.md: {sorted(set(got.types) - set(doc))}; "
        f"documented but not served: {sorted(set(doc) - set(got.types))}")
    wrong_type = {n: (doc[n].type, t) for n, t in got.types.items() if doc[n].type != t}
    assert wrong_type == {}, f"{where}: (documented, served) types differ: {wrong_type}"
    wrong_labels = {n: (sorted(doc[n].labels), sorted(ls)) for n, ls in got.labels.items()
                    if ls and ls != set(doc[n].labels)}
    assert wrong_labels == {}, f"{where}: (documented, served) label names differ: {wrong_labels}"


def test_the_metrics_tables_parse() -> None:
    worker, queue = documented("Worker metrics"), documented("Queue metrics")
    assert len(worker) >= 15 and len(queue) >= 12
    assert worker["tenure_stale_writes_rejected_total"].labels == {"queue", "task", "operation"}


def test_docs_metrics_match_what_the_processes_serve(served: dict[str, Served]) -> None:
    worker_doc, queue_doc = documented("Worker metrics"), documented("Queue metrics")
    _compare(worker_doc, served["worker"], "tenure worker --metrics-port")
    _compare(queue_doc, served["exporter"], "tenure exporter --port")
    _compare({**queue_doc, **documented("Reaper process metrics")}, served["reaper"], "tenure reaper --metrics-port")
    # Label names were compared on real samples for most families, not only on empty ones.
    with_samples = [n for s in served.values() for n, ls in s.labels.items() if ls]
    assert len(with_samples) >= 12, with_samples
