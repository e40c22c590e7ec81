"""Set up the OpenTelemetry SDK for a tenure command from the standard ``OTEL_*`` environment.

Purpose: ``tenure worker``, ``reaper``, ``enqueue`` (and the HTTP servers) export their spans
when the ``otel`` extra is installed and an exporter is configured, with no tenure-specific
setting. The library itself only uses ``opentelemetry-api`` (:mod:`tenure.core.tracing`).

Limits:
- Configured means ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or an OTLP
  endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
  Exporters: ``otlp`` (``OTEL_EXPORTER_OTLP_PROTOCOL`` ``http/protobuf``, the default; ``grpc``
  when ``opentelemetry-exporter-otlp-proto-grpc`` is installed) and ``console``.
- The SDK reads the rest itself: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_TRACES_SAMPLER(_ARG)``, ``OTEL_BSP_*``, the exporter's endpoint, headers and timeout.
  Without ``OTEL_SERVICE_NAME`` the service is ``tenure-<command>``.
- An application that already set a tracer provider keeps it: nothing is replaced.
- :meth:`TracingSetup.shutdown` flushes and ends the provider; it is also registered with
  ``atexit``, so a ``--burst`` worker's last spans are exported before the process ends.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tenure.core.errors import ConfigError

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
PROTOCOL_DEFAULT = "http/protobuf"


@dataclass(frozen=True)
class TracingConfig:
    """What the environment asks for; :meth:`validate` refuses what cannot be set up."""

    exporters: tuple[str, ...]
    protocol: str = PROTOCOL_DEFAULT
    service_name: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TracingConfig:
        names = tuple(n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip())
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if not names and endpoint:
            names = ("otlp",)
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or PROTOCOL_DEFAULT).strip().lower()
        return cls(tuple(n for n in names if n != "none"), protocol, env.get("OTEL_SERVICE_NAME") or None)

    @property
    def enabled(self) -> bool:
        return bool(self.exporters)

    def validate(self) -> None:
        for name in self.exporters:
            if name not in EXPORTERS:
                raise ConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (one of {', '.join(EXPORTERS)})")
        if "otlp" in self.exporters and self.protocol not in PROTOCOLS:
            raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: unknown protocol {self.protocol!r} "
                              f"(one of {', '.join(PROTOCOLS)})")


class TracingSetup:
    """The provider this process installed (None: nothing installed) and how to flush it."""

    def __init__(self, provider: Any | None) -> None:
        self.provider = provider

    @property
    def active(self) -> bool:
        return self.provider is not None

    def shutdown(self) -> None:
        """Export what is buffered and end the provider (idempotent)."""
        provider, self.provider = self.provider, None
        if provider is not None:
            provider.shutdown()


NOT_SET_UP = TracingSetup(None)


def sdk_installed() -> bool:
    """True when the ``otel`` extra's SDK is importable (nothing is imported to find out)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None and \
            importlib.util.find_spec("opentelemetry.sdk") is not None
    except ImportError:
        return False


def setup_tracing_from_env(command: str, env: Mapping[str, str] | None = None) -> TracingSetup:
    """Install an SDK tracer provider for ``command`` when the environment configures an exporter
    and the SDK is installed; else (or when a provider is already set) change nothing.
    Raises ConfigError for an unknown exporter or protocol, or a missing exporter package."""
    config = TracingConfig.from_env(os.environ if env is None else env)
    if not config.enabled or not sdk_installed():
        return NOT_SET_UP
    config.validate()
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return NOT_SET_UP  # the application configured its own: respected
    attributes = {} if config.service_name else {SERVICE_NAME: f"tenure-{command}"}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in config.exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, config.protocol)))
    trace.set_tracer_provider(provider)
    setup = TracingSetup(provider)
    atexit.register(setup.shutdown)
    _installed.append(setup)
    return setup


_installed: list[TracingSetup] = []
"""The providers this process installed (at most one; written only at start-up, by the main thread)."""


def shutdown_installed() -> None:
    """Flush and end what :func:`setup_tracing_from_env` installed: for a command that leaves with
    ``os._exit`` (the worker: handler threads must not keep it alive), where ``atexit`` never runs."""
    for setup in _installed:
        setup.shutdown()


def _exporter(name: str, protocol: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if protocol == "grpc":
        if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
            raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                              "(pip install opentelemetry-exporter-otlp-proto-grpc), or use http/protobuf")
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
        raise ConfigError("OTEL_TRACES_EXPORTER=otlp needs the otel extra: pip install 'tenure[otel]'")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
