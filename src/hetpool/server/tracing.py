"""Optional OpenTelemetry tracing: one trace per task, from submit through admit, dispatch
and the engine call.

Why one trace per task, across processes and hours: a task is submitted by an API request,
admitted by the scheduler one pass later, dispatched by the dispatcher (perhaps on another
replica, after a restart) and then runs on an engine. Those steps share no call stack, so
the submit span's context is stored on the task row as a W3C `traceparent`
(`tasks.trace_parent`), and each later step starts its span as a child of that stored
context. An operator asking "why did task X take 40 s to start" then sees the whole path
as one trace.

Why it costs nothing when off: OpenTelemetry is an extra (`pip install 'hetpool[tracing]'`)
and `HETPOOL_TRACING` defaults to `off`. Until `configure` turns it on, `_tracer` is None
and every helper here is a `None` check (task_span still sets the log field `task_id`,
one contextvar). The SDK is imported only in `configure`, so a server without the extra
never imports it.

hetpool keeps its own TracerProvider rather than the process-global one: embedding the
server (tests, `hetpool up` inside another program) never fights over the global, and
tests install a provider with an in-memory exporter through `use_provider`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from hetpool.server.logging_setup import task_id_var

MODES = ("off", "console", "otlp")
INSTALL_HINT = "pip install 'hetpool[tracing]'"
TRACER_NAME = "hetpool"
TASK_ID = "hetpool.task.id"  # the attribute on every span of a task's trace
SPAN_SUBMIT = "task.submit"
SPAN_ADMIT = "scheduler.admit"
SPAN_DISPATCH = "dispatcher.dispatch"
SPAN_ENGINE_SUBMIT = "engine.submit"

log = logging.getLogger(__name__)
_tracer: Any = None  # an opentelemetry Tracer while tracing is on; None: every helper is a no-op
_provider: Any = None  # the provider `configure` made (flushed and shut down by `shutdown`)
_propagator: Any = None  # W3C trace-context (de)serialiser, set with the tracer


class TracingUnavailableError(RuntimeError):
    """Tracing was asked for, but OpenTelemetry (the `tracing` extra) is not installed."""


def configure(mode: str, service_name: str = "hetpool") -> None:
    """Turn tracing on (`console`: spans printed to stdout; `otlp`: sent to the collector named by
    the standard OTEL_EXPORTER_OTLP_* variables) or off. Raises TracingUnavailableError naming
    the extra when OpenTelemetry is missing."""
    if mode not in MODES:
        raise ValueError(f"tracing mode {mode!r}: allowed values are {', '.join(MODES)}")
    shutdown()
    if mode == "off":
        return
    try:  # optional third-party packages: imported only when tracing is asked for
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        if mode == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingUnavailableError(f"HETPOOL_TRACING={mode} needs OpenTelemetry ({exc.name} is missing): {INSTALL_HINT}") from None
    exporter = OTLPSpanExporter() if mode == "otlp" else ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))  # exports off the request / worker thread
    use_provider(provider)
    global _provider
    _provider = provider
    log.info("tracing on: %s exporter", mode)


def use_provider(provider: Any) -> None:
    """Trace through `provider` (an opentelemetry TracerProvider; tests pass one with an
    in-memory exporter); None turns tracing off."""
    global _tracer, _propagator
    if provider is None:
        _tracer = _propagator = None
        return
    # optional third-party package: present whenever a provider exists
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _tracer, _propagator = provider.get_tracer(TRACER_NAME), TraceContextTextMapPropagator()


def shutdown() -> None:
    """Flush what `configure` buffered and turn tracing off."""
    global _provider
    provider, _provider = _provider, None
    use_provider(None)
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the active span, to store with a task; None when not tracing."""
    if _propagator is None:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> Any:
    """The OpenTelemetry context a stored `traceparent` names (None: the current one)."""
    if not traceparent or _propagator is None:
        return None
    return _propagator.extract({"traceparent": traceparent})


class task_span:  # lower case: used like a function, `with task_span(...) as span:` (as contextlib.suppress)
    """Work on one task: logs inside carry `task_id`; with tracing on, a span `name` in the
    task's trace — a child of the stored `traceparent` if given, else of the current span
    (a span nested in another task_span). Keyword attributes are recorded as `hetpool.<key>`.
    Yields the span, or None when not tracing. A class, not a generator: off, it costs one
    contextvar set and reset."""

    __slots__ = ("_name", "_task_id", "_traceparent", "_attributes", "_token", "_span_cm")

    def __init__(self, name: str, task_id: str, traceparent: str | None = None, **attributes: Any) -> None:
        self._name, self._task_id, self._traceparent, self._attributes = name, task_id, traceparent, attributes
        self._span_cm = None

    def __enter__(self) -> Any:
        self._token = task_id_var.set(self._task_id)
        tracer = _tracer
        if tracer is None:
            return None
        attrs = {TASK_ID: self._task_id, **{f"hetpool.{k}": v for k, v in self._attributes.items() if v is not None}}
        self._span_cm = tracer.start_as_current_span(self._name, context=_context_of(self._traceparent), attributes=attrs)
        return self._span_cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._span_cm is not None:
                self._span_cm.__exit__(*exc)  # records the exception and an error status
        finally:
            task_id_var.reset(self._token)


def traced_submit(submit: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps the service that creates a task: the root span of the task's trace covers
    validation and the insert; the function stores `current_traceparent()` on the row and
    returns it, and the span gets the new task's id."""

    @functools.wraps(submit)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _tracer is None:
            return submit(*args, **kwargs)
        with _tracer.start_as_current_span(SPAN_SUBMIT) as span:
            row = submit(*args, **kwargs)
            span.set_attributes({TASK_ID: row.id, "hetpool.task.tenant": row.tenant, "hetpool.task.state": row.state})
            return row

    return wrapper
