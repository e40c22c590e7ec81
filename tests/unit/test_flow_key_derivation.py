"""`@app.task(flow_key=...)` and what `App.enqueue` derives from it (issue 38, item 1), without
a database: the task's queue unless one is given, an explicit key over the derived one, and a
failing or wrong callable refused with the task's name."""

from __future__ import annotations

from typing import Any

import pytest

from tenure import App
from tenure.core.errors import ConfigError, JobSpecError


def _app() -> App:
    app = App(default_queue="main")

    @app.task("bill", queue="billing", flow_key=lambda p: f"tenant:{p['tenant']}")
    def bill(ctx: Any) -> None: ...

    @app.task("maybe", flow_key=lambda p: p.get("tenant"))
    def maybe(ctx: Any) -> None: ...

    @app.task("plain")
    def plain(ctx: Any) -> None: ...

    @app.task("broken", flow_key=lambda p: p["missing"])
    def broken(ctx: Any) -> None: ...

    @app.task("numeric", flow_key=lambda p: 42)
    def numeric(ctx: Any) -> None: ...

    @app.task("huge", flow_key=lambda p: "x" * 201)
    def huge(ctx: Any) -> None: ...

    return app


def test_the_key_is_derived_from_the_payload_and_the_queue_is_the_tasks() -> None:
    app = _app()
    task, queue, key = app.enqueue_options("bill", {"tenant": "acme"})
    assert (task.name, queue, key) == ("bill", "billing", "tenant:acme")
    assert app.enqueue_options("bill", {"tenant": "acme"}, queue="other")[1:] == ("other", "tenant:acme")
    assert app.enqueue_options("maybe", {})[1:] == ("main", None)
    assert app.enqueue_options("plain", {"tenant": "acme"})[1:] == ("main", None)
    assert app.get("bill") is not None and app.get("bill").derive_flow_key({"tenant": "b"}) == "tenant:b"  # type: ignore[union-attr]


def test_an_explicit_key_wins_and_the_callable_is_not_called() -> None:
    app = _app()
    assert app.enqueue_options("broken", {}, flow_key="given")[2] == "given"
    assert app.enqueue_options("bill", {"tenant": "acme"}, flow_key="mine")[2] == "mine"


@pytest.mark.parametrize(("task", "match"), [
    ("broken", "task 'broken': its flow_key callable raised KeyError"),
    ("numeric", "task 'numeric': its flow_key callable must return a string or None, got int 42"),
    ("huge", "task 'huge': its flow_key callable gave a bad key: flow key must be at most 200 bytes"),
])
def test_a_failing_or_wrong_callable_is_refused_naming_the_task(task: str, match: str) -> None:
    with pytest.raises(JobSpecError, match=match):
        _app().enqueue_options(task, {})


def test_an_unknown_task_or_a_flow_key_that_is_no_function_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown task 'nope'.*registered: bill, broken"):
        _app().enqueue_options("nope", {})
    with pytest.raises(ConfigError, match="flow_key must be a function"):
        App().task("t", flow_key="tenant")  # type: ignore[arg-type]
