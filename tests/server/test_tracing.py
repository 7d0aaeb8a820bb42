"""Tracing (server/tracing.py): one OpenTelemetry trace per task, from the submit request
through the scheduler's admit, the dispatcher and the engine call; nothing when off; the
task id as a JSON log field; a clear error naming the extra when OpenTelemetry is missing."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hetpool.engines.base import PermanentEngineError
from hetpool.server import tracing
from hetpool.server.db.models import TaskRow
from hetpool.server.logging_setup import configure_logging
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings
from tests.server.helpers import drive_until, example_task, run_to_end, task_state

SQLITE = pytest.mark.parametrize("db_kind", ["sqlite"])  # the trace path does not depend on the database
PATH = [tracing.SPAN_SUBMIT, tracing.SPAN_ADMIT, tracing.SPAN_DISPATCH, tracing.SPAN_ENGINE_SUBMIT]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory (synchronous export: spans are there when the call returns)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use_provider(provider)
    yield memory
    tracing.use_provider(None)
    provider.shutdown()


def submit(api: TestClient, name: str = "data-prep.yaml") -> str:
    response = api.post("/api/v1/tasks", json=example_task(name))
    assert response.status_code == 201, response.text
    return response.json()["id"]


@SQLITE
def test_one_trace_spans_submit_admit_dispatch_and_the_engine_call(ctx: ServiceContext, demo: TestClient, exporter: InMemorySpanExporter) -> None:
    task_id = submit(demo)
    assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(tracing.TASK_ID) == task_id]
    by_name = {s.name: s for s in spans}
    assert set(PATH) <= set(by_name), [s.name for s in spans]
    assert len({s.context.trace_id for s in spans}) == 1  # one trace for the task's whole path
    root = by_name[tracing.SPAN_SUBMIT]
    assert root.parent is None and root.attributes["hetpool.task.tenant"]
    # admit and dispatch are children of the stored submit context, the engine call of dispatch
    assert by_name[tracing.SPAN_ADMIT].parent.span_id == root.context.span_id
    assert by_name[tracing.SPAN_DISPATCH].parent.span_id == root.context.span_id
    assert by_name[tracing.SPAN_ENGINE_SUBMIT].parent.span_id == by_name[tracing.SPAN_DISPATCH].context.span_id
    assert by_name[tracing.SPAN_ADMIT].attributes["hetpool.attempt"] == 1 and by_name[tracing.SPAN_ADMIT].attributes["hetpool.pool"]
    assert by_name[tracing.SPAN_DISPATCH].attributes["hetpool.backend"] == "local"
    assert by_name[tracing.SPAN_ENGINE_SUBMIT].attributes["hetpool.job_id"]
    # The context is stored with the task as a W3C traceparent naming that trace.
    with ctx.db.transaction() as session:
        stored = session.get(TaskRow, task_id).trace_parent
    assert stored.split("-")[1] == format(root.context.trace_id, "032x")
    # Two tasks, two traces.
    other = submit(demo)
    drive_until(ctx, lambda: task_state(demo, other) not in ("queued", "admitted"))
    other_traces = {s.context.trace_id for s in exporter.get_finished_spans() if s.attributes.get(tracing.TASK_ID) == other}
    assert len(other_traces) == 1 and other_traces != {root.context.trace_id}


@SQLITE
def test_an_engine_error_is_recorded_on_the_span_and_logged_with_the_task_id(
    ctx: ServiceContext, demo: TestClient, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    class RefusingEngine:
        def submit(self, request):
            raise PermanentEngineError("engine says no")

    monkeypatch.setattr(ctx, "backend_for", lambda kind, cluster=None: RefusingEngine())
    stream = io.StringIO()
    root = logging.getLogger()
    saved_level = root.level
    handler = configure_logging("json", "info", stream=stream)
    try:
        task_id = submit(demo)
        assert run_to_end(ctx, demo, task_id)["state"] == "failed"
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
    entries = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    failure = next(e for e in entries if e["message"] == f"dispatch of {task_id} to local failed (permanent): engine says no")
    assert failure["task_id"] == task_id and failure["exc_type"] == "PermanentEngineError"
    engine = next(s for s in exporter.get_finished_spans() if s.name == tracing.SPAN_ENGINE_SUBMIT and s.attributes[tracing.TASK_ID] == task_id)
    assert not engine.status.is_ok and any(e.name == "exception" for e in engine.events)
    # Outside per-task work no record carries a task id.
    assert all("task_id" not in e for e in entries if e["logger"] == "hetpool.access")


@SQLITE
def test_with_tracing_off_nothing_is_exported_and_nothing_is_stored(ctx: ServiceContext, demo: TestClient) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))  # exists, but hetpool was never told to use it
    tracing.configure("off")
    assert not tracing.enabled() and tracing.current_traceparent() is None
    task_id = submit(demo)
    assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
    assert memory.get_finished_spans() == ()
    with ctx.db.transaction() as session:
        assert session.get(TaskRow, task_id).trace_parent is None
    with tracing.task_span(tracing.SPAN_DISPATCH, task_id) as span:
        assert span is None


def test_the_setting_and_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().tracing == "off"
    monkeypatch.setenv("HETPOOL_TRACING", "console")
    assert Settings().tracing == "console"
    with pytest.raises(ValueError, match="allowed values are off, console, otlp"):
        tracing.configure("jaeger")
    # Without OpenTelemetry installed (simulated: the import fails) the error names the extra.
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(tracing.TracingUnavailableError, match=r"pip install 'hetpool\[tracing\]'"):
        tracing.configure("otlp")
    assert not tracing.enabled()


def test_console_and_otlp_modes_configure_and_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens; nothing is sent before shutdown
    try:
        for mode in ("console", "otlp"):
            tracing.configure(mode)
            assert tracing.enabled()
    finally:
        tracing.shutdown()
    assert not tracing.enabled()


def test_task_context_puts_the_task_id_on_json_log_lines() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved_level = root.level
    handler = configure_logging("json", "info", stream=stream)
    logger = logging.getLogger("hetpool.test")
    try:
        with tracing.task_span(tracing.SPAN_ADMIT, "t-0123456789"):  # tracing off: only the log field
            logger.info("inside")
        logger.info("outside")
        logger.info("explicit", extra={"task_id": "t-explicit"})
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
    inside, outside, explicit = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert inside["task_id"] == "t-0123456789" and "task_id" not in outside and explicit["task_id"] == "t-explicit"
