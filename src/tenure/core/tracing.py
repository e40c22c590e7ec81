"""OpenTelemetry traces of enqueues, attempts and effects, through ``opentelemetry-api`` only.

Purpose: one trace per job, from the PRODUCER span of its enqueue to the CONSUMER span
``process <queue>`` of every attempt, with each guarded effect (``tenure.effect``), the lease
losses, cancels and timeouts (span events), and the reaper's recoveries and the refused stale
writes (short spans in the same trace, linked to the attempt they concern).

Limits:
- The package imports ``opentelemetry`` only if it is installed (``pip install 'tenure[otel]'``);
  without it every function here is a no-op and nothing is imported (:func:`available`).
- With the API installed but no SDK provider set (an application that did not configure one,
  a CLI started without ``OTEL_TRACES_EXPORTER``), no span is started at all (:func:`enabled`):
  nothing is recorded and no trace context is written with the job.
- Every attempt, retries included, is a child of the enqueue span: the trace reads as one story
  (enqueue, attempt 1, attempt 2, ...) and a retry's parent is the same producer span as the
  first attempt's. A job enqueued without a trace context starts a new trace at each attempt.
- The trace context travels with the job as a W3C ``traceparent`` string (``jobs.trace_context``).
  An attempt's own context lives only in its worker: a refused stale write (seen by that worker)
  is an event on the attempt's span while it is open, else a short span linked to it; a reap
  (seen by the reaper, which never had the attempt's context) is a short span ``tenure.reap`` in
  the job's trace, a child of the enqueue span, naming the attempt by ``tenure.attempt`` and
  ``tenure.fencing_token``.
- A message sent through ``tenure sqs`` is traced as an enqueue is (a PRODUCER span ``send
  <queue>``, its context stored with the job); its parent comes from the message, not from a
  current span: a W3C ``traceparent`` message attribute, else an X-Ray ``AWSTraceHeader``
  system attribute (:func:`traceparent_from_xray`); a malformed one is ignored. Each
  ReceiveMessage delivery is a CONSUMER span ``receive <queue>``, a child of the send span.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - types only
    from opentelemetry.trace import Span

SYSTEM = "tenure"
"""``messaging.system`` of every tenure span."""
TRACER_NAME = "tenure"

_state: dict[str, Any] = {}
"""The imported API modules (``trace``, ``propagate``, ``context``, ``status``), or ``{"none": True}``."""


def available() -> bool:
    """True when ``opentelemetry-api`` is installed (imported on the first call, once)."""
    if not _state:
        try:
            if importlib.util.find_spec("opentelemetry") is None or \
                    importlib.util.find_spec("opentelemetry.trace") is None:
                raise ModuleNotFoundError("opentelemetry")
            from opentelemetry import context, propagate, trace
            from opentelemetry.trace import status
        except ImportError:
            _state["none"] = True
        else:
            _state.update(trace=trace, propagate=propagate, context=context, status=status)
    return "none" not in _state


def enabled() -> bool:
    """True when spans would be recorded: the API is installed and a real tracer provider is set
    (by ``tenure``'s CLI from ``OTEL_*``, or by the application). Checked per call (a provider may
    be set after the first enqueue); without a provider this costs one ``isinstance``, and every
    tenure span is skipped instead of created as a no-op."""
    if not available():
        return False
    trace = _state["trace"]
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _tracer() -> Any:
    from tenure.core.version import __version__

    return _state["trace"].get_tracer(TRACER_NAME, __version__)


def _traceparent(span: Span) -> str | None:
    """The W3C traceparent of ``span``, or None when it is not sampled (nothing to link to)."""
    ctx = span.get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    carrier: dict[str, str] = {}
    _state["propagate"].inject(carrier, context=_state["trace"].set_span_in_context(span))
    return carrier.get("traceparent")


def _extract(traceparent: str | None) -> Any:
    """The OpenTelemetry context carried by ``traceparent`` (an empty one for None)."""
    if not traceparent:
        return _state["context"].Context()
    return _state["propagate"].extract({"traceparent": traceparent}, context=_state["context"].Context())


def _link(traceparent: str | None) -> list[Any]:
    if not traceparent:
        return []
    span_ctx = _state["trace"].get_current_span(_extract(traceparent)).get_span_context()
    return [_state["trace"].Link(span_ctx)] if span_ctx.is_valid else []


# -- enqueue ------------------------------------------------------------------------------------

class ProducerSpan:
    """One enqueue's PRODUCER span: :attr:`traceparent` goes into the job row, and
    :meth:`sent` names the job id once the insert returned it."""

    __slots__ = ("_span", "traceparent")

    def __init__(self, span: Span | None) -> None:
        self._span = span
        self.traceparent: str | None = _traceparent(span) if span is not None else None

    def sent(self, job_id: int, *, created: bool = True) -> None:
        if self._span is not None:
            self._span.set_attribute("messaging.message.id", str(job_id))
            if not created:
                self._span.set_attribute("tenure.deduplicated", True)

    def deduplicated(self) -> None:
        """The job was not inserted: its idempotency key names an existing job (batch enqueue)."""
        if self._span is not None:
            self._span.set_attribute("tenure.deduplicated", True)

    def failed(self, exc: BaseException) -> None:
        if self._span is not None:
            self._span.record_exception(exc)
            self._span.set_status(_state["status"].Status(_state["status"].StatusCode.ERROR, str(exc)))

    def end(self) -> None:
        if self._span is not None:
            self._span.end()


def start_producer(queue: str, task: str, *, parent: str | None = None) -> ProducerSpan:
    """Start the PRODUCER span of one enqueue, a child of ``parent`` (a W3C traceparent, as
    :func:`parse_traceparent` returns) when given, else of the caller's current span; the caller
    ends it (:meth:`ProducerSpan.end`)."""
    if not enabled():
        return ProducerSpan(None)
    span = _tracer().start_span(
        f"send {queue}", context=_extract(parent) if parent else None, kind=_state["trace"].SpanKind.PRODUCER,
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": queue,
                    "messaging.operation.type": "send", "messaging.operation.name": "send",
                    "tenure.task": task})
    return ProducerSpan(span)


@contextmanager
def producer(queue: str, task: str) -> Iterator[ProducerSpan]:
    """:func:`start_producer` as a context manager: an exception is recorded on the span."""
    span = start_producer(queue, task)
    try:
        yield span
    except BaseException as exc:
        span.failed(exc)
        raise
    finally:
        span.end()


# -- parents carried by a message (tenure sqs) ---------------------------------------------------

_HEX = frozenset("0123456789abcdef")


def _hex_id(value: str, length: int) -> bool:
    """``length`` lower-case hex digits, not all zero (W3C: an all-zero id is invalid)."""
    return len(value) == length and _HEX.issuperset(value) and value.strip("0") != ""


def parse_traceparent(value: object) -> str | None:
    """``value`` as a canonical W3C traceparent (``00-<trace id>-<span id>-<flags>``, only the
    sampled flag kept), or None when it is not one (wrong shape, version ``ff``, upper-case or
    all-zero ids). A later version's extra fields are ignored, as W3C Trace Context says."""
    if not isinstance(value, str):
        return None
    parts = value.strip().split("-")
    if len(parts) < 4:
        return None
    version, trace_id, span_id, flags = parts[:4]
    if len(version) != 2 or not _HEX.issuperset(version) or version == "ff" or (version == "00" and len(parts) != 4):
        return None
    if not _hex_id(trace_id, 32) or not _hex_id(span_id, 16) or len(flags) != 2 or not _HEX.issuperset(flags):
        return None
    return f"00-{trace_id}-{span_id}-{int(flags, 16) & 1:02x}"


def traceparent_from_xray(header: object) -> str | None:
    """An AWS X-Ray trace header (``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;
    Sampled=1``) as a W3C traceparent, or None when it is malformed or has no ``Parent``.

    The trace id is the Root's 8 hex digits of epoch and its 24 of unique id (32 in all), the
    span id the ``Parent``; sampled only with ``Sampled=1``: ``0``, ``?`` and no ``Sampled``
    give a parent that is not sampled, as OpenTelemetry's X-Ray propagator reads them. Other
    fields (``Self``, ``Lineage``, ...) are ignored."""
    if not isinstance(header, str):
        return None
    fields: dict[str, str] = {}
    for part in header.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    root = fields.get("Root", "").lower().split("-")
    if len(root) != 3 or root[0] != "1" or len(root[1]) != 8 or len(root[2]) != 24:
        return None
    trace_id, span_id = root[1] + root[2], fields.get("Parent", "").lower()
    if not _hex_id(trace_id, 32) or not _hex_id(span_id, 16):
        return None
    return f"00-{trace_id}-{span_id}-{'01' if fields.get('Sampled') == '1' else '00'}"


# -- attempts -----------------------------------------------------------------------------------

class AttemptSpan:
    """One attempt's CONSUMER span ``process <queue>``; a no-op without the API.

    Thread-safe as the SDK's spans are: the heartbeat and deadline threads add events while the
    handler runs.
    """

    __slots__ = ("_span", "_token", "traceparent")

    def __init__(self, span: Span | None) -> None:
        self._span = span
        self._token: object | None = None
        self.traceparent: str | None = _traceparent(span) if span is not None else None

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def event(self, name: str, attributes: Mapping[str, str | int | float | bool] | None = None) -> None:
        """A span event (``tenure.lease_lost``, ``tenure.cancel``, ``tenure.timeout``, ...)."""
        if self._span is not None:
            self._span.add_event(name, dict(attributes or {}))

    def activate(self) -> None:
        """Make this span current in the running thread or task (logs and effects see it)."""
        if self._span is not None and self._token is None:
            ctx = _state["trace"].set_span_in_context(self._span)
            self._token = _state["context"].attach(ctx)

    def finish(self, outcome: str, exc: BaseException | None = None) -> None:
        """End the span with the attempt's outcome: ``complete`` is OK, an exception is recorded
        (its event) and sets the status to ERROR."""
        span = self._span
        if span is None:
            return
        if self._token is not None:
            _state["context"].detach(self._token)
            self._token = None
        span.set_attribute("tenure.outcome", outcome)
        status = _state["status"]
        if exc is not None:
            span.record_exception(exc)
            span.set_status(status.Status(status.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        elif outcome == "complete":
            span.set_status(status.Status(status.StatusCode.OK))
        span.end()  # a release (deferred, lease lost without an error) leaves the status unset

    def stale_write(self, operation: str, *, queue: str, job_id: int, trace_context: str | None,
                    fence: int) -> None:
        """A write of this attempt was refused (its token no longer current): an event on the
        span while it is open, else a short ``tenure.stale_write`` span linked to it."""
        if self._span is None:
            return
        attributes: dict[str, str | int | float | bool] = {"tenure.operation": operation,
                                                           "tenure.fencing_token": fence}
        if self._span.is_recording():
            self._span.add_event("tenure.stale_write", attributes)
        else:
            record_outside("tenure.stale_write", queue=queue, job_id=job_id, trace_context=trace_context,
                           attempt_trace=self.traceparent, attributes=attributes)

    @contextmanager
    def effect(self, key: str) -> Iterator[EffectSpan]:
        """The child span ``tenure.effect`` of one ``ctx.effect(key)``."""
        if self._span is None:
            yield EffectSpan(None)
            return
        parent = _state["trace"].set_span_in_context(self._span)
        span = _tracer().start_span("tenure.effect", context=parent, kind=_state["trace"].SpanKind.INTERNAL,
                                    attributes={"tenure.effect.key": key})
        eff = EffectSpan(span)
        token = _state["context"].attach(_state["trace"].set_span_in_context(span))
        try:
            yield eff
        except BaseException as exc:
            span.record_exception(exc)
            status = _state["status"]
            span.set_status(status.Status(status.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            _state["context"].detach(token)
            span.end()


class EffectSpan:
    """A ``tenure.effect`` span; :meth:`outcome` records ``ran``, ``already_succeeded``,
    ``reconciled`` or ``in_doubt`` as ``tenure.effect.outcome``."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def outcome(self, value: str) -> None:
        if self._span is not None:
            self._span.set_attribute("tenure.effect.outcome", value)


NO_ATTEMPT = AttemptSpan(None)


def start_attempt(*, queue: str, task: str, job_id: int, attempt: int, fence: int,
                  trace_context: str | None, worker_id: str) -> AttemptSpan:
    """Start attempt ``attempt``'s CONSUMER span, a child of the enqueue span carried by
    ``trace_context`` (every attempt, retries included; see the module docstring)."""
    if not enabled():
        return NO_ATTEMPT
    span = _tracer().start_span(
        f"process {queue}", context=_extract(trace_context), kind=_state["trace"].SpanKind.CONSUMER,
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": queue,
                    "messaging.operation.type": "process", "messaging.operation.name": "process",
                    "messaging.message.id": str(job_id), "tenure.task": task, "tenure.attempt": attempt,
                    "tenure.fencing_token": fence, "tenure.worker_id": worker_id})
    return AttemptSpan(span)


def record_receive(*, queue: str, task: str, job_id: int, attempt: int, fence: int,
                   trace_context: str | None, worker_id: str, start_time: int | None = None) -> None:
    """The CONSUMER span ``receive <queue>`` of one message delivered by ReceiveMessage (its
    attempt ``attempt``), a child of the send span carried by ``trace_context``, like a worker's
    attempt; it covers the claim (from ``start_time``, ns since the epoch) and ends at once: what
    the SQS client then does with the message is its own to trace."""
    if not enabled():
        return
    span = _tracer().start_span(
        f"receive {queue}", context=_extract(trace_context), kind=_state["trace"].SpanKind.CONSUMER,
        start_time=start_time,
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": queue,
                    "messaging.operation.type": "receive", "messaging.operation.name": "receive",
                    "messaging.message.id": str(job_id), "tenure.task": task, "tenure.attempt": attempt,
                    "tenure.fencing_token": fence, "tenure.worker_id": worker_id})
    span.end()


# -- outside the attempt ------------------------------------------------------------------------

def record_outside(name: str, *, queue: str, job_id: int, trace_context: str | None,
                   attempt_trace: str | None, attributes: Mapping[str, str | int | float | bool]) -> None:
    """A short span ``name`` (``tenure.reap``, ``tenure.stale_write``) in the job's trace (a child
    of its enqueue span), linked to the attempt it concerns when that attempt's context is known."""
    if (not trace_context and not attempt_trace) or not enabled():
        return
    span = _tracer().start_span(
        name, context=_extract(trace_context or attempt_trace), kind=_state["trace"].SpanKind.INTERNAL,
        links=_link(attempt_trace),
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": queue,
                    "messaging.message.id": str(job_id), **attributes})
    span.end()


def current_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) in hex of the current span when it is sampled, for log lines; None
    without the API or outside a span. Imports nothing that is not already imported."""
    if "trace" not in _state:
        return None
    ctx = _state["trace"].get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")
