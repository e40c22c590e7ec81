"""The handler of SQS messages on queue ``traced``, run by a `tenure worker` in the SQS trace test
(tests/acceptance/test_traces_otlp.py)."""

from __future__ import annotations

from tenure import App, JobContext

app = App("sqs-traced")


@app.task("sqs.message", queue="traced")
def handle(ctx: JobContext) -> None:
    assert isinstance(ctx.payload["body"], str)
