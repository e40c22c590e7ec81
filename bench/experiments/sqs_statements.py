"""Round trips and statements per `tenure sqs` action (issue 25's receive speed): the message
actions run in process on a one-connection pool, libpq's trace of that connection counts the
messages that make the client wait (a Sync, a simple Query), and the named queries each
action executes are listed.

    .venv/bin/python -m bench.experiments.sqs_statements

Uses the database of ``TENURE_DATABASE_URL`` (else tenure's embedded server) in a fresh schema,
dropped afterwards. Steady state: the queue's row is cached (``QUEUE_CACHE_SECONDS``), so the
``sqs_queue_get`` of the first request in each second is not counted. Counts, not timings:
deterministic. The figures: docs/sqs.md, "Performance" (round trips per action).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from tenure.core.db import connect, resolve_dsn
from tenure.core.queries import named_queries
from tenure.core.repository import Repository
from tenure.sqs import messages, queues
from tenure.sqs.service import Call, SqsConfig, SqsService


@contextmanager
def _statements(schema: str) -> Iterator[list[str]]:
    """The named queries executed meanwhile, by name (patches ``Cursor.execute``)."""
    names = {sql: name for name, sql in named_queries(schema).items()}
    seen: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        seen.append(names.get(query, str(query)[:40]) if isinstance(query, str) else str(query)[:40])
        return original(self, query, params, **kw)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


def _round_trips(trace: Path, start: int) -> tuple[int, int]:
    """Client waits in the trace after line ``start``, and the trace's length in lines."""
    lines = trace.read_text().splitlines()[start:]
    waits = sum(1 for line in lines if (f := line.split("\t")) and len(f) > 2 and f[0] == "F"
                and f[2].split(" ")[0] in ("Sync", "Query"))
    return waits, start + len(lines)


def main() -> None:
    argparse.ArgumentParser(prog="python -m bench.experiments.sqs_statements", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    dsn, schema = resolve_dsn(None), f"bench_sqs_st_{uuid.uuid4().hex[:8]}"
    with connect(dsn) as conn:
        Repository(conn, schema).migrate()
    service = SqsService(SqsConfig(dsn=dsn, schema=schema, pool_size=1))
    trace = Path(tempfile.mkdtemp(prefix="bench-sqs-st-")) / "libpq.trace"
    try:
        service.open()
        call = Call(service, "http://127.0.0.1:9324", None)
        for name in ("std", "f.fifo"):
            queues.create_queue(call, {"QueueName": name})
        url = {n: call.queue_url(n) for n in ("std", "f.fifo")}
        handles: list[str] = []

        def send(q: str, n: int) -> Callable[[], Any]:
            def run() -> Any:
                extra = ({"MessageGroupId": "g", "MessageDeduplicationId": uuid.uuid4().hex}
                         if q.endswith(".fifo") else {})
                entries = [{"Id": str(i), "MessageBody": f"m{i}", **extra} for i in range(n)]
                if n == 1:
                    return messages.send_message(call, {"QueueUrl": url[q], **entries[0]})
                return messages.send_message_batch(call, {"QueueUrl": url[q], "Entries": entries})
            return run

        def receive(q: str) -> Callable[[], Any]:
            def run() -> Any:
                req, got = messages.receive_first(call, {"QueueUrl": url[q], "MaxNumberOfMessages": 10})
                handles[:] = [m["ReceiptHandle"] for m in got]
                return got
            return run

        def delete(q: str) -> Callable[[], Any]:
            def run() -> Any:
                return messages.delete_message_batch(call, {"QueueUrl": url[q], "Entries": [
                    {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles)]})
            return run

        def visibility(q: str) -> Callable[[], Any]:
            return lambda: messages.change_message_visibility(
                call, {"QueueUrl": url[q], "ReceiptHandle": handles[0], "VisibilityTimeout": 60})

        steps = [("SendMessageBatch(10)", send("std", 10)), ("ReceiveMessage(10)", receive("std")),
                 ("ChangeMessageVisibility", visibility("std")), ("DeleteMessageBatch(10)", delete("std")),
                 ("SendMessage", send("std", 1)), ("ReceiveMessage(10), empty after", receive("std")),
                 ("DeleteMessageBatch(1)", delete("std")), ("ReceiveMessage(10) empty", receive("std")),
                 ("FIFO SendMessageBatch(10)", send("f.fifo", 10)), ("FIFO ReceiveMessage(10)", receive("f.fifo")),
                 ("FIFO DeleteMessageBatch(10)", delete("f.fifo"))]
        for _ in range(6):  # psycopg prepares a statement at its 5th execution
            for _, step in steps:  # warm: queue rows cached, statements prepared (psycopg's
                step()             # prepare is one more round trip, once) as in a long-running server
        out = open(trace, "w")  # noqa: SIM115 - libpq writes to its descriptor until untrace
        with service.pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        print(f"{'action':36} round trips  statements")
        for label, step in steps:
            _, mark = _round_trips(trace, 0)
            with _statements(schema) as seen:
                step()
            waits, _ = _round_trips(trace, mark)
            print(f"{label:36} {waits:>11}  {', '.join(seen)}", flush=True)
        with service.pool.connection() as conn:
            conn.pgconn.untrace()
        out.close()
    finally:
        service.close()
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    sys.stdout.flush()


if __name__ == "__main__":
    main()
