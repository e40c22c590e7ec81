"""The job browser at scale: ``tenure ui``'s JSON API timed from outside over millions of jobs.

``python -m bench.experiments.ui_scale [--jobs 5000000] [--requests 30] [--explain] [--before-src DIR]``:

1. seeds (or reuses) a database of ``--jobs`` mostly finished jobs (bench/experiments/ui_seed.py; the
   embedded server's data directory is kept under ~/.cache/tenure-bench/ui-scale, so the seed
   is made once; ``--reseed`` redoes it);
2. starts a real ``tenure ui --bind 127.0.0.1:0`` process of the tenure it imports (this
   checkout's ``src`` first on ``PYTHONPATH``; an older checkout's for a "before": ``--before-src``,
   best with its own ``--schema``) against it;
3. for every single filter of ``GET /api/v1/jobs`` (queue, each status, task, priority range,
   created/finished since, idempotency key, id, payload containment present and absent) sends
   one warm-up request and then ``--requests`` timed ones over one keep-alive HTTP connection,
   and does the same for ``GET /api/v1/jobs/count`` and ``GET /api/v1/jobs/{id}``;
4. prints p50/p95/max per request and writes JSON (bench/results/ui_scale-<time>.json);
5. with ``--explain``, runs a second ``tenure ui`` whose database sessions load auto_explain
   (``ALTER DATABASE … SET``, reset afterwards; needs a superuser, as the embedded server's is,
   and the embedded server's log file), sends each request once,
   and prints the ``EXPLAIN (ANALYZE, BUFFERS)`` of every statement it ran, flagging any
   sequential scan of ``jobs`` and any primary-key walk that removed most of what it read.

Timings include HTTP, JSON and the UI's own work; they are one shared machine's figures
(2 cores, other sessions running), never assertions. Targets (issue 24): first page p95 < 300 ms
for any single filter, job detail < 100 ms. The figures: docs/performance.md, "The job browser at
5M jobs (issue 24)".
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import tenure
from bench import stats
from bench.console import log
from bench.experiments.ui_seed import DATABASE_DEFAULT, ensure_database, seed, ui_queries
from bench.server import ROOT, add_before_src, code_env, rerun_before
from tenure.core.queries import named_queries, quote_ident

TENURE_SRC = Path(tenure.__file__).resolve().parent.parent
"""The tenure this bench imported (``--before-src OLD/src``, or ``PYTHONPATH=OLD/src``, benches an
older checkout): its migrations make the schema and its ``tenure ui`` serves the requests."""
RESULTS_DIR = ROOT / "bench" / "results"
HOME_DEFAULT = Path(os.environ.get("TENURE_BENCH_HOME", Path.home() / ".cache" / "tenure-bench")) / "ui-scale"
FEED_QUERIES = ("job_newest_id", "job_events_since", "job_events_last_id")
"""The change feed's statements (its own thread, not a request's), left out of the plans."""
PAGE_TARGET_MS = 300.0
DETAIL_TARGET_MS = 100.0
EXPLAIN_SETTINGS = (("session_preload_libraries", "'auto_explain'"), ("auto_explain.log_min_duration", "0"),
                    ("auto_explain.log_analyze", "on"), ("auto_explain.log_buffers", "on"),
                    ("auto_explain.log_timing", "on"))


@dataclass(frozen=True)
class Case:
    """One request: a label, an API path and its query parameters, and what its answer must hold."""

    label: str
    kind: str  # page | count | detail
    path: str
    params: dict[str, str] = field(default_factory=dict)
    expect_empty: bool = False


def cases(anchor: datetime, total: int, key: str, detail_ids: list[int], limit: int) -> list[Case]:
    """Every single filter's first page, a second page, counts and details (see the module docstring)."""
    def iso(back: timedelta) -> str:
        return (anchor - back).isoformat()

    page = [
        ("no filter", {}),
        ("queue=default (50%)", {"queue": "default"}),
        ("queue=legacy (0.1%, oldest tenth only)", {"queue": "legacy"}),
        ("queue=absent", {"queue": "no-such-queue"}),
        *[(f"status={s}", {"status": s}) for s in ("pending", "running", "completed", "failed", "cancelled")],
        ("task=invoice.render (17%)", {"task": "invoice.render"}),
        ("task=search.reindex (0.01%)", {"task": "search.reindex"}),
        ("task=legacy.migrate (oldest tenth)", {"task": "legacy.migrate"}),
        ("priority 50..100 (~4%)", {"priority_min": "50", "priority_max": "100"}),
        ("priority 100..100 (0.07%)", {"priority_min": "100", "priority_max": "100"}),
        ("priority -100..-90 (0.8%)", {"priority_min": "-100", "priority_max": "-90"}),
        ("created_since seed-1h", {"created_since": iso(timedelta(hours=1))}),
        ("created_since seed-7d", {"created_since": iso(timedelta(days=7))}),
        ("created_since 1m (none if the seed is older)", {"created_since": "1m"}),
        ("finished_since seed-1h", {"finished_since": iso(timedelta(hours=1))}),
        ("finished_since seed-7d", {"finished_since": iso(timedelta(days=7))}),
        ("finished_since 1m (none if the seed is older)", {"finished_since": "1m"}),
        ("idempotency_key present", {"idempotency_key": key}),
        ("idempotency_key absent", {"idempotency_key": "no-such-key"}),
        ("id present", {"id": str(total // 3)}),
        ("id absent", {"id": str(total * 10)}),
        ("payload invoice_id present (1 job)", {"payload": json.dumps({"invoice_id": total // 4})}),
        ("payload customer present (0.1%)", {"payload": json.dumps({"customer": "cust-417"})}),
        ("payload absent", {"payload": json.dumps({"invoice_id": -1})}),
    ]
    out = [Case(label, "page", "/api/v1/jobs", {**p, "limit": str(limit)},
                expect_empty=label.endswith("absent")) for label, p in page]
    out += [Case(f"count: {label}", "count", "/api/v1/jobs/count", p) for label, p in (
        ("no filter", {}), ("status=failed", {"status": "failed"}), ("queue=legacy", {"queue": "legacy"}),
        ("task=search.reindex", {"task": "search.reindex"}),
        ("payload customer", {"payload": json.dumps({"customer": "cust-417"})}))]
    out += [Case(f"detail: job {i}", "detail", f"/api/v1/jobs/{i}") for i in detail_ids[:3]]
    out.append(Case("detail: mixed jobs", "detail", "/api/v1/jobs/{each}"))
    return out


class UiProcess:
    """A ``tenure ui`` subprocess of this checkout; its base URL once it printed it."""

    LISTENING = re.compile(r"ui listening on (http://\S+?)/?\s*$")

    def __init__(self, dsn: str, schema: str, extra_env: dict[str, str] | None = None) -> None:
        env = code_env(TENURE_SRC, base={**os.environ, **(extra_env or {})})
        cmd = [sys.executable, "-m", "tenure.cli", "--database-url", dsn, "--schema", schema,
               "ui", "--bind", "127.0.0.1:0"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.base = self._wait()
        parsed = urllib.parse.urlsplit(self.base)
        self.host, self.port, self.prefix = parsed.hostname or "127.0.0.1", parsed.port or 80, parsed.path.rstrip("/")
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def _wait(self, timeout: float = 60.0) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = self.LISTENING.search(line.strip())
            if m:
                return m.group(1)
        self.stop()
        raise RuntimeError("tenure ui did not print its address:\n" + "".join(seen[-20:]))

    def get(self, path: str, params: dict[str, str]) -> tuple[float, int, Any]:
        """``(milliseconds, HTTP status, decoded JSON)`` of one GET, timed from before the request
        is sent to after the whole body is read."""
        url = self.prefix + path + ("?" + urllib.parse.urlencode(params) if params else "")
        for attempt in (1, 2):
            try:
                t0 = time.perf_counter()
                self.conn.request("GET", url, headers={"Accept": "application/json"})
                resp = self.conn.getresponse()
                body = resp.read()
                ms = (time.perf_counter() - t0) * 1000
                break
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                if attempt == 2:
                    raise
        try:
            doc = json.loads(body)
        except ValueError:
            doc = body.decode(errors="replace")[:300]
        return ms, resp.status, doc

    def stop(self) -> None:
        self.conn.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def check(case: Case, status: int, doc: Any) -> str:
    """Empty when the answer is what the case expects, else why not."""
    if status != 200:
        return f"HTTP {status}: {str(doc)[:200]}"
    if case.kind == "page":
        if not isinstance(doc, dict) or "jobs" not in doc or "next_cursor" not in doc:
            return f"not a page: {str(doc)[:200]}"
        if case.expect_empty and doc["jobs"]:
            return f"expected no job, got {len(doc['jobs'])}"
        ids = [j.get("id") for j in doc["jobs"]]
        if ids != sorted(ids, reverse=True):
            return "jobs not newest first"
    if case.kind == "count" and (not isinstance(doc, dict) or "count" not in doc):
        return f"not a count: {str(doc)[:200]}"
    return ""


def measure(ui: UiProcess, all_cases: list[Case], detail_ids: list[int], requests: int) -> list[dict[str, Any]]:
    """One warm-up and ``requests`` timed requests per case; the summary rows."""
    rows: list[dict[str, Any]] = []
    for case in all_cases:
        paths = [case.path.replace("{each}", str(i)) for i in detail_ids] if "{each}" in case.path else [case.path]
        first_ms, status, doc = ui.get(paths[0], case.params)
        problem = check(case, status, doc)
        times: list[float] = []
        for n in range(requests):
            ms, status, doc2 = ui.get(paths[n % len(paths)], case.params)
            problem = problem or check(case, status, doc2)
            times.append(ms)
        info = ""
        if case.kind == "page" and isinstance(doc, dict):
            info = f"{len(doc.get('jobs', []))} jobs" + (", more" if doc.get("next_cursor") else "")
        elif case.kind == "count" and isinstance(doc, dict):
            info = f"{doc.get('count')}" + (" (estimated)" if doc.get("estimated") else " (exact)")
        p50, p95 = stats.percentile(times, 50), stats.percentile(times, 95)
        row: dict[str, Any] = {"label": case.label, "kind": case.kind, "params": case.params, "first_ms": first_ms,
               "p50_ms": p50, "p95_ms": p95, "max_ms": max(times),
               "requests": len(times), "answer": info, "problem": problem}
        target = DETAIL_TARGET_MS if case.kind == "detail" else PAGE_TARGET_MS if case.kind == "page" else None
        row["verdict"] = stats.verdict(p95, target, higher_is_better=False) if target else "-"
        rows.append(row)
        log(f"  {case.label}: p50 {row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms, {info} {problem}")
        if case.kind == "page" and case.label == "no filter" and isinstance(doc, dict) and doc.get("next_cursor"):
            second = Case("no filter, page 2 (cursor)", "page", case.path,
                          {**case.params, "cursor": str(doc["next_cursor"])})
            rows += measure(ui, [second], detail_ids, requests)
    return rows


def explain(dsn: str, schema: str, all_cases: list[Case], detail_ids: list[int],
            server_log: Path) -> list[dict[str, Any]]:
    """Each case's request once, against a ``tenure ui`` whose sessions auto-explain every statement
    (set on the database for the pass, reset after it); the change feed's own statements are left out."""
    from tenure.core.db import connect
    with connect(dsn) as conn:
        for name, value in EXPLAIN_SETTINGS:
            conn.execute(f"ALTER DATABASE {quote_ident(_db(conn))} SET {name} = {value}")
    try:
        ui = UiProcess(dsn, schema)
        out = []
        try:
            probe = connect(dsn)
            named = named_queries(schema)
            feed_sql = [named[n].strip()[:60] for n in FEED_QUERIES if n in named]
            for case in all_cases:
                row = probe.execute(ui_queries(schema)["feed_backends"]).fetchone()
                feed = {int(str(p)) for p in str(row["pids"] or "").strip("{}").split(",") if p} if row else set()
                path = case.path.replace("{each}", str(detail_ids[0]))
                ui.get(path, case.params)  # warm-up, unlogged below
                time.sleep(0.2)
                offset = server_log.stat().st_size
                ms, status, _ = ui.get(path, case.params)
                time.sleep(0.3)  # let the server write its log
                with server_log.open("rb") as f:
                    f.seek(offset)
                    text = f.read().decode(errors="replace")
                plans = [p for p in parse_auto_explain(text)
                         if p["pid"] not in feed and not any(p["query"].startswith(f) for f in feed_sql)]
                out.append({"label": case.label, "params": case.params, "ms": ms, "status": status, "plans": plans,
                            "seq_scan_jobs": any(p["seq_scan_jobs"] for p in plans),
                            "pkey_walk_removed": max((p["pkey_removed"] for p in plans), default=0)})
        finally:
            probe.close()
            ui.stop()
    finally:
        with connect(dsn) as conn:
            for name, _ in EXPLAIN_SETTINGS:
                conn.execute(f"ALTER DATABASE {quote_ident(_db(conn))} RESET {name}")
    return out


def _db(conn: Any) -> str:
    row = conn.execute(ui_queries("public")["database_current"]).fetchone()
    return str(row["name"])


_ENTRY = re.compile(r"^\S.*?\[(\d+)\] LOG:\s+duration: ([\d.]+) ms\s+plan:\s*$", re.M)


def parse_auto_explain(text: str) -> list[dict[str, Any]]:
    """The plans auto_explain wrote into a slice of the server log."""
    plans = []
    starts = [m for m in _ENTRY.finditer(text)]
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        block = text[m.end():end]
        lines = []
        for line in block.splitlines():
            if re.match(r"^\d{4}-\d\d-\d\d ", line):  # the next log entry of another kind
                break
            lines.append(line.rstrip())
        body = "\n".join(lines).strip("\n")
        query = re.search(r"Query Text: (.*?)(?:\n\s*(?:Limit|Sort|Result|Aggregate|Nested|Hash|Index|Seq|Bitmap|"
                          r"Unique|Append|Merge|Subquery|CTE|WindowAgg|Gather|Incremental|ProjectSet|Function|"
                          r"Values|Insert|Update|Delete|LockRows)\b)", body, re.S)
        removed = [int(x) for x in re.findall(r"Rows Removed by Filter: (\d+)", body)]
        pkey = "jobs_pkey" in body and "Backward" in body
        plans.append({"pid": int(m.group(1)), "duration_ms": float(m.group(2)), "query": (query.group(1).strip() if query else "")[:4000],
                      "plan": body, "seq_scan_jobs": bool(re.search(r"Seq Scan on jobs\b", body)),
                      "pkey_removed": max(removed, default=0) if pkey else 0})
    return plans


def page_table(rows: list[dict[str, Any]]) -> str:
    cells = [[r["label"], f"{r['first_ms']:.1f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", f"{r['max_ms']:.1f}",
              r["answer"], r["verdict"] + (f" ({r['problem']})" if r["problem"] else "")] for r in rows]
    return stats.table(["request", "first ms", "p50 ms", "p95 ms", "max ms", "answer", "target"], cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.ui_scale", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5_000_000, help="jobs in the seeded database (default 5,000,000)")
    p.add_argument("--requests", type=int, default=30, help="timed requests per case (default 30)")
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--reseed", action="store_true", help="drop and redo the seed even if one of --jobs exists")
    p.add_argument("--explain", action="store_true", help="also print each request's plans (auto_explain)")
    p.add_argument("--only", action="append", default=[], help="run only cases whose label contains this")
    p.add_argument("--home", type=Path, default=HOME_DEFAULT, help="where the embedded server's data lives")
    p.add_argument("--database-url", default=None, help="a server to use instead of the embedded one")
    p.add_argument("--schema", default="tenure")
    p.add_argument("--output", type=Path, default=None)
    add_before_src(p, "serve the requests with (and migrate the schema by) the tenure sources in DIR")
    args = p.parse_args(argv)
    code = rerun_before(args.before_src, "bench.experiments.ui_scale", argv)
    if code is not None:
        return code

    server_log: Path | None = None
    if args.database_url:
        dsn = args.database_url
    else:
        from tenure.core.embedded import ensure_server
        server = ensure_server(args.home / "pgdata")
        dsn = ensure_database(server.dsn, DATABASE_DEFAULT)
        server_log = server.datadir / "server.log"
    made = seed(dsn, args.schema, args.jobs, reuse=not args.reseed)
    log(f"jobs by status: {made.counts}")
    from tenure.core.db import connect
    q = ui_queries(args.schema)
    with connect(dsn) as conn:
        detail_ids = [int(str(r["id"])) for r in conn.execute(q["pick_detail_ids"], {"total": args.jobs}).fetchall()]
        key_row = conn.execute(q["pick_idempotency_key"], {"total": args.jobs}).fetchone()
        sizes = {str(r["name"]): int(str(r["bytes"])) for r in
                 conn.execute(q["seed_sizes"], {"schema_name": args.schema}).fetchall()}
        current = conn.execute(q["database_current"]).fetchone()
        version = str(current["server_version"]) if current else "?"
    all_cases = cases(made.anchor, args.jobs, str(key_row["idempotency_key"]) if key_row else "none",
                      detail_ids, args.limit)
    if args.only:
        all_cases = [c for c in all_cases if any(o in c.label for o in args.only)]

    ui = UiProcess(dsn, args.schema)
    try:
        log(f"tenure ui at {ui.base}; {len(all_cases)} cases × (1 warm-up + {args.requests})")
        rows = measure(ui, all_cases, detail_ids, args.requests)
    finally:
        ui.stop()
    if args.explain and server_log is None:
        log("--explain needs the embedded server's log: skipped with --database-url")
    plans = explain(dsn, args.schema, all_cases, detail_ids, server_log) if args.explain and server_log else []

    head = (f"tenure ui over {sum(made.counts.values()):,} jobs {made.counts} (PostgreSQL {version}; seed taken "
            f"{made.anchor:%Y-%m-%d %H:%M} UTC; jobs heap {sizes.get('jobs', 0) / 2**20:,.0f} MiB); "
            f"{args.requests} requests per row after one warm-up, one keep-alive connection, page size {args.limit}")
    print(f"\n{head}\n\n{page_table(rows)}", flush=True)
    for e in plans:
        flags = (" SEQ SCAN OF jobs" if e["seq_scan_jobs"] else "") + \
                (f" primary-key walk removed {e['pkey_walk_removed']:,} rows" if e["pkey_walk_removed"] > 1000 else "")
        print(f"\n### {e['label']} {json.dumps(e['params'])}{flags}")
        for plan in e["plans"]:
            print(f"\n{plan['plan']}")
    RESULTS_DIR.mkdir(exist_ok=True)
    out = args.output or RESULTS_DIR / f"ui_scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"header": head, "jobs": made.counts, "anchor": made.anchor.isoformat(),
                               "server_version": version, "sizes_bytes": sizes, "rows": rows, "explain": plans},
                              indent=2, default=str))
    log(f"wrote {out}")
    misses = [r["label"] for r in rows if r["verdict"] == "MISS" or r["problem"]]
    if misses:
        log(f"missed target or wrong answer: {misses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
