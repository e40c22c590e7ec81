"""Tracing set-up from the OTEL_* environment, and the promise that without the otel extra
nothing changes and nothing of OpenTelemetry is imported (issue 26)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tenure.core.errors import ConfigError
from tenure.observability.traces import TracingConfig, setup_tracing_from_env


@pytest.mark.parametrize("env, exporters, protocol", [
    ({}, (), "http/protobuf"),
    ({"OTEL_TRACES_EXPORTER": "none"}, (), "http/protobuf"),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",), "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",), "http/protobuf"),
    ({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ("otlp", "console"), "grpc"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
      "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, ("otlp",), "http/protobuf"),
])
def test_the_environment_decides(env: dict[str, str], exporters: tuple[str, ...], protocol: str) -> None:
    config = TracingConfig.from_env(env)
    assert (config.exporters, config.protocol, config.enabled) == (exporters, protocol, bool(exporters))
    config.validate()


@pytest.mark.parametrize("env, message", [
    ({"OTEL_TRACES_EXPORTER": "jaeger"}, "unknown exporter 'jaeger'"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "unknown protocol 'http/json'"),
])
def test_what_cannot_be_set_up_is_a_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        setup_tracing_from_env("worker", env)


def test_no_exporter_configured_sets_nothing_up() -> None:
    assert not setup_tracing_from_env("worker", {}).active


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


BLOCK_OTEL = """
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(name)
            return None
    sys.meta_path.insert(0, Block())
"""


def test_without_opentelemetry_nothing_is_imported_and_nothing_changes() -> None:
    result = _python(BLOCK_OTEL + """
    import sys
    import tenure, tenure.cli, tenure.worker.runtime, tenure.reaper.reaper
    from tenure.core import tracing
    from tenure.observability import traces
    assert not tracing.enabled()
    span = tracing.start_producer("q", "t")
    assert span.traceparent is None
    span.sent(1); span.end()
    attempt = tracing.start_attempt(queue="q", task="t", job_id=1, attempt=1, fence=1, trace_context=None,
                                    worker_id="w")
    with attempt.effect("k") as eff:
        eff.outcome("ran")
    attempt.finish("complete")
    assert not traces.setup_tracing_from_env("worker", {"OTEL_TRACES_EXPORTER": "otlp"}).active
    assert tracing.current_ids() is None
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_tenure_imports_no_opentelemetry_until_traces_are_used() -> None:
    result = _python("""
    import sys
    import tenure, tenure.cli, tenure.worker.runtime
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_application_provider_is_respected() -> None:
    result = _python("""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    mine = TracerProvider()
    trace.set_tracer_provider(mine)
    from tenure.observability import traces
    setup = traces.setup_tracing_from_env("worker", {"OTEL_TRACES_EXPORTER": "console"})
    assert not setup.active and trace.get_tracer_provider() is mine
    from tenure.core import tracing
    assert tracing.enabled()
    print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
