"""What one completion statement costs per job as its batch grows (issue 40, ACK_BATCH_MAX_DEFAULT).

``python -m bench.experiments.ack_batch [--jobs N] [--sizes 10,100,...] [--reps R] [--before-src DIR]``:
a fresh database with ``N``
ready jobs, each with a distinct payload of about 100 bytes (analyzed, as a worker does at start),
then, per batch size, ``R`` rounds of one claim and one ``Repository.complete_many`` of the whole
claim, timed from the client. Prints the median microseconds per job and the statement's
milliseconds. ``--before-src DIR`` times the tenure in ``DIR`` instead (an older
``job_complete_many``; the same as ``PYTHONPATH=DIR``). The figures compare the array_position
statement before issue 40 with the join after it; docs/architecture.md cites them as
docs/performance.md, "Acknowledgements". Timings are one machine's numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg

SIZES_DEFAULT = (10, 50, 100, 200, 500, 1000, 2000, 5000)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated batch sizes, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    from bench.server import DATADIR_DEFAULT, add_before_src, rerun_before, start_server
    from tenure.core.repository import Repository
    parser = argparse.ArgumentParser(prog="python -m bench.experiments.ack_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="ready jobs in the table (default 1,000,000)")
    parser.add_argument("--sizes", type=_sizes, default=SIZES_DEFAULT, help="batch sizes, comma-separated")
    parser.add_argument("--reps", type=int, default=7, help="rounds per batch size (default 7)")
    add_before_src(parser, "time the tenure sources in DIR instead of this checkout's")
    args = parser.parse_args(argv)
    if args.jobs < sum(args.sizes) * args.reps:
        parser.error(f"--jobs must cover every round: at least {sum(args.sizes) * args.reps}")
    code = rerun_before(args.before_src, "bench.experiments.ack_batch", argv)
    if code is not None:
        return code
    server = start_server(DATADIR_DEFAULT)
    dsn = server.fresh_db("bench_ack_batch")
    with psycopg.connect(dsn, autocommit=True) as conn:
        repo = Repository(conn, "tenure")
        repo.migrate()
        conn.execute("""INSERT INTO tenure.jobs (queue_name, task, payload)
                        SELECT 'default', 'noop', jsonb_build_object('i', g, 'customer_id', 'cus_' || md5(g::text),
                               'amount_cents', g %% 100000, 'currency', 'EUR')
                        FROM generate_series(1, %s) g""", (args.jobs,))
        conn.execute("ANALYZE tenure.jobs")
        print(f"{args.jobs:,} jobs; median of {args.reps} rounds per batch size")
        for n in args.sizes:
            per_job = []
            for _ in range(args.reps):
                claimed = repo.claim("bench", ["default"], n, 600)
                started = time.perf_counter()
                accepted = repo.complete_many("bench", [(j.id, j.lock_token) for j in claimed])
                per_job.append((time.perf_counter() - started) / n * 1e6)
                assert len(claimed) == n and all(accepted.values())
            med = statistics.median(per_job)
            print(f"batch {n:>6,}: {med:7.1f} µs per job (min {min(per_job):.1f}, max {max(per_job):.1f}), "
                  f"statement {med * n / 1000:.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
