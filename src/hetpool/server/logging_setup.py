"""Server logs: text or JSON lines, with the HTTP request id and the task id on every record.

A log collector (journald, Loki, Elasticsearch) needs one object per line with stable
keys: ts, level, logger, message, request_id (when logged while serving a request),
task_id (when logged while a worker handles one task: `task_context`, or `extra=`) and,
for an exception, exc_type and exc. The request id comes from the caller's X-Request-ID
(so a proxy's id follows the request through) or is made here, and is echoed back.
Headers, query strings and bodies are never logged: they may carry tokens.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

request_id_var: ContextVar[str | None] = ContextVar("hetpool_request_id", default=None)
# Set by the workers around the work on one task (server/tracing.py's task_span sets it too).
task_id_var: ContextVar[str | None] = ContextVar("hetpool_task_id", default=None)
access_log = logging.getLogger("hetpool.access")
REQUEST_ID_HEADER = "x-request-id"
# An incoming id is reused only if it is short and plain: it ends up in every log line.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_HANDLER_MARK = "_hetpool_handler"
# Attributes every LogRecord has; anything else was passed with extra= and is kept.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "request_id", "task_id"}


@contextmanager
def task_context(task_id: str) -> Iterator[None]:
    """Every record logged inside carries `task_id` (a contextvar: per thread, per asyncio task)."""
    token = task_id_var.set(task_id)
    try:
        yield
    finally:
        task_id_var.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds the request id and the task id in scope, unless the call passed its own with extra=."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        if not hasattr(record, "task_id"):
            record.task_id = task_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        task_id = getattr(record, "task_id", None)
        if task_id:
            entry["task_id"] = task_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rid)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.rid = f" [{request_id}]" if request_id else ""
        return super().format(record)


def make_handler(fmt: str, stream=None) -> logging.Handler:
    if fmt not in ("text", "json"):
        raise ValueError(f"log format {fmt!r}: allowed values are json, text")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    setattr(handler, _HANDLER_MARK, True)
    return handler


def configure_logging(fmt: str = "text", level: str = "info", stream=None) -> logging.Handler:
    """Route every logger (uvicorn's too) through one handler on the root; idempotent."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    handler = make_handler(fmt, stream)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # Their own handlers would print a second, unstructured line.
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # uvicorn's access line repeats ours without the request id; alembic says "Context impl
    # SQLiteImpl" on every readiness check that reads the schema revision.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    if root.level > logging.DEBUG:
        logging.getLogger("alembic").setLevel(logging.WARNING)
    return handler


class RequestIdMiddleware:
    """Pure ASGI (cheaper than BaseHTTPMiddleware): sets the request id, echoes it, logs the request."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"x-request-id"), "")
        request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            # Logged here, with the request id; Starlette's outer handler then answers 500.
            logging.getLogger("hetpool.server").exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            raise
        finally:
            if access_log.isEnabledFor(logging.INFO):
                method, path = scope.get("method"), scope.get("path")
                duration_ms = round((time.perf_counter() - started) * 1000, 2)
                fields = {"method": method, "path": path, "status": status, "duration_ms": duration_ms}
                access_log.info("%s %s %s", method, path, status, extra=fields)
            request_id_var.reset(token)


def install_request_logging(app) -> None:
    app.add_middleware(RequestIdMiddleware)
