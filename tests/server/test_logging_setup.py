"""Structured logs (logging_setup.py): one JSON object per line with ts, level, logger, message
and the HTTP request id; X-Request-ID is echoed or made; exceptions are serialised."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from hetpool.server.logging_setup import configure_logging, install_request_logging


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Root logging to a buffer in JSON; the previous root configuration is restored afterwards."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    stream = io.StringIO()
    handler = configure_logging("json", "info", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.setLevel(saved[0])


def records(stream: io.StringIO) -> list[dict]:
    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line must be one JSON object


@pytest.mark.parametrize("db_kind", ["sqlite"])
def test_a_request_logs_a_json_line_with_its_request_id(api: TestClient, json_lines: io.StringIO) -> None:
    response = api.get("/healthz", headers={"X-Request-ID": "req-42.abc"})
    assert response.status_code == 200 and response.headers["x-request-id"] == "req-42.abc"
    access = [r for r in records(json_lines) if r["logger"] == "hetpool.access"]
    assert len(access) == 1
    entry = access[0]
    assert {"ts", "level", "logger", "message", "request_id"} <= set(entry)
    assert entry["request_id"] == "req-42.abc" and entry["level"] == "INFO" and entry["status"] == 200 and entry["path"] == "/healthz"
    assert entry["ts"].endswith("Z") and entry["message"] == "GET /healthz 200"

    made = api.get("/healthz", headers={"X-Request-ID": "bad id with spaces; rm -rf"})  # unsafe ids are replaced
    assert len(made.headers["x-request-id"]) == 32 and " " not in made.headers["x-request-id"]
    # The token sent in Authorization never appears in the logs.
    token = api.headers["authorization"].split()[1]
    assert token not in json_lines.getvalue()


def test_an_exception_is_serialised_with_the_request_id(json_lines: io.StringIO) -> None:
    app = FastAPI()

    @app.get("/boom")
    def boom() -> None:
        logging.getLogger("hetpool.test").warning("about to fail", extra={"task": "t-1"})
        raise RuntimeError("disk on fire")

    install_request_logging(app)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/boom", headers={"X-Request-ID": "r-boom"}).status_code == 500
    entries = records(json_lines)
    warning = next(r for r in entries if r["logger"] == "hetpool.test")
    assert warning["request_id"] == "r-boom" and warning["task"] == "t-1" and warning["level"] == "WARNING"
    error = next(r for r in entries if r.get("exc_type") == "RuntimeError")
    assert error["level"] == "ERROR" and error["request_id"] == "r-boom" and "disk on fire" in error["exc"] and "Traceback" in error["exc"]
    assert error["message"] == "unhandled error in GET /boom"

    logging.getLogger("hetpool.test").info("outside a request")
    assert "request_id" not in records(json_lines)[-1]


def test_text_format_and_bad_format() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handler = configure_logging("text", "info", stream=stream)
    try:
        logging.getLogger("hetpool.test").info("plain")
        assert stream.getvalue().rstrip().endswith("INFO hetpool.test: plain")
    finally:
        root.removeHandler(handler)
    with pytest.raises(ValueError, match="log format 'xml': allowed values are json, text"):
        configure_logging("xml")
