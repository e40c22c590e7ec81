"""Cost of traces (issue 26), measured as a user runs tenure: CLI processes, timed from outside.

Per run and variant, on a fresh schema of the bench's embedded server:
1. ``tenure enqueue --from-file`` of ``--jobs`` no-op jobs (one process; PRODUCER spans when on);
2. ``tenure worker --app bench.apps:sync_app --burst`` until the queue is empty (one process;
   CONSUMER spans when on), its wall time including start-up.

Variants, interleaved run by run:
- ``before`` (with ``--before-src``): the code before traces (e.g. main's ``src`` from
  ``git archive``), no ``OTEL_*``: what "off" must not be slower than;
- ``off``: no ``OTEL_*`` in the environment (the API is installed, no provider is set);
- ``on``: ``OTEL_TRACES_EXPORTER=otlp`` to an OTLP/HTTP receiver in this process (every span
  sampled, batched, decoded by the receiver);
- ``unsampled``: the same with ``OTEL_TRACES_SAMPLER=always_off`` (the SDK installed, nothing
  recorded).

    git archive 60b6a7e src | tar -x -C /tmp/before
    .venv/bin/python -m bench.experiments.tracing_cost --jobs 20000 --runs 3 --before-src /tmp/before/src

Prints the median jobs/s per variant and phase, the ratio to ``off`` and the cost per job in
microseconds. The figures: docs/observability.md, "Traces" (the span queue size came from these
runs). One machine's numbers (shared and noisy), never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.console import log
from bench.server import DATADIR_DEFAULT, ROOT, add_before_src, code_env, start_server

VARIANTS = ("before", "off", "on", "unsampled")
sys.path.insert(0, str(ROOT / "tests"))


def _env(variant: str, dsn: str, schema: str, endpoint: str, src: Path) -> dict[str, str]:
    env = code_env(src, base={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                   TENURE_DATABASE_URL=dsn, TENURE_SCHEMA=schema)
    if variant in ("on", "unsampled"):
        env.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    if variant == "unsampled":
        env["OTEL_TRACES_SAMPLER"] = "always_off"
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - started


def one_run(dsn: str, variant: str, jobs_file: Path, endpoint: str, concurrency: int,
            src: Path) -> tuple[float, float]:
    """(enqueue seconds, worker seconds) of one variant on a fresh schema."""
    schema = f"bench_tr_{variant}_{uuid.uuid4().hex[:6]}"
    env = _env(variant, dsn, schema, endpoint, src)
    tenure = [sys.executable, "-m", "tenure.cli"]
    subprocess.run([*tenure, "migrate"], env=env, check=True, capture_output=True)
    enqueue = _timed([*tenure, "enqueue", "--from-file", str(jobs_file)], env)
    work = _timed([*tenure, "worker", "--app", "bench.apps:sync_app", "--burst", "--concurrency", str(concurrency),
                   "--poll-interval", "0.05"], env)
    return enqueue, work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.tracing_cost",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--datadir", type=Path, default=DATADIR_DEFAULT)
    add_before_src(parser, "the tenure sources before traces (the 'before' variant; skipped without it)")
    args = parser.parse_args(argv)
    from support.otlp_receiver import OtlpReceiver

    server = start_server(args.datadir)
    dsn = server.fresh_db("bench_tracing")
    with tempfile.TemporaryDirectory() as tmp, OtlpReceiver() as receiver:
        jobs_file = Path(tmp) / "jobs.jsonl"
        jobs_file.write_text("".join(json.dumps({"task": "noop", "payload": {"n": n}}) + "\n"
                                     for n in range(args.jobs)))
        variants = [v for v in VARIANTS if v != "before" or args.before_src is not None]
        times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
        for run in range(args.runs):
            for variant in variants:
                src = args.before_src if variant == "before" else ROOT / "src"
                result = one_run(dsn, variant, jobs_file, receiver.endpoint, args.concurrency, src)
                times[variant].append(result)
                log(f"  run {run + 1} {variant}: enqueue {result[0]:.2f} s, worker {result[1]:.2f} s")
        spans = len(receiver.spans)
    base = {phase: statistics.median(t[i] for t in times["off"]) for i, phase in enumerate(("enqueue", "worker"))}
    print(f"{args.jobs:,} jobs per run, {args.runs} runs, median wall time of each CLI process "
          f"(spans received in all 'on' runs: {spans:,})")
    print(f"{'variant':<10} {'phase':<8} {'jobs/s':>9} {'vs off':>7} {'us/job':>7}")
    for variant in variants:
        for i, phase in enumerate(("enqueue", "worker")):
            seconds = statistics.median(t[i] for t in times[variant])
            cost = (seconds - base[phase]) / args.jobs * 1e6
            print(f"{variant:<10} {phase:<8} {args.jobs / seconds:>9,.0f} {base[phase] / seconds:>6.2f}x {cost:>+7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
