"""Hostile input and HTTP hardening: size limits (also chunked), hostile YAML and JSON
specs, CORS closed by default, per-token rate limits, no token text in the logs."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hetpool.cli.files import read_documents
from hetpool.core.errors import SpecError
from hetpool.server.app import create_app
from hetpool.server.services.context import ServiceContext

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def _app(ctx: ServiceContext, token: str, **settings) -> TestClient:
    ctx.settings = ctx.settings.model_copy(update=settings)
    return TestClient(create_app(ctx=ctx), headers={"Authorization": f"Bearer {token}"})


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] and body["message"], body
    return body


def test_bodies_over_the_limit_are_refused_with_or_without_content_length(ctx: ServiceContext, admin_token: str) -> None:
    api = _app(ctx, admin_token, max_request_bytes=1000)
    big = b'{"documents": [' + b'{"kind": "Tenant", "name": "a"},' * 100 + b"{}]}"
    assert "over 1000 bytes" in _error(api.post("/api/v1/apply", content=big, headers={"Content-Type": "application/json"}), 413)["message"]

    def chunked():  # a generator body: httpx sends it chunked, without Content-Length
        for _ in range(100):
            yield b" " * 100

    refused = api.post("/api/v1/apply", content=chunked(), headers={"Content-Type": "application/json"})
    assert _error(refused, 413)["code"] == "too_large"
    small = api.post(
        "/api/v1/apply", content=iter([b'{"documents": ', b'[{"kind": "Tenant", "name": "chunky"}]}']), headers={"Content-Type": "application/json"}
    )
    assert small.status_code == 200, small.text  # a chunked body under the limit still arrives whole


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (BILLION_LAUGHS, "aliases"),
        ("kind: Tenant\nname: " + "[" * 5000 + "]" * 5000, "nested deeper"),
        ("kind: Tenant\nname: a\nn: " + "9" * 5000, "cannot be read"),
        ("- just\n- a list", "expected a mapping"),
    ],
    ids=["billion-laughs", "deep", "huge-number", "wrong-type"],
)
def test_hostile_yaml_files_are_refused_fast_with_a_clear_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(SpecError) as caught:
        read_documents([str(path)])
    assert says in caught.value.message and "evil.yaml" in caught.value.message
    assert time.monotonic() - started < 5  # generous: it is milliseconds, the danger is minutes


def test_hostile_json_through_apply_gets_a_4xx_naming_the_problem(api: TestClient) -> None:
    deep = '{"documents": [' + "[" * 100_000 + "]" * 100_000 + "]}"
    assert api.post("/api/v1/apply", content=deep, headers={"Content-Type": "application/json"}).status_code in (400, 422)
    huge = '{"documents": [{"kind": "Tenant", "name": "a", "display_name": ' + "9" * 5000 + "}]}"
    assert api.post("/api/v1/apply", content=huge, headers={"Content-Type": "application/json"}).status_code in (400, 422)
    wrong = _error(api.post("/api/v1/apply", json={"documents": [{"kind": "Pool", "name": "p", "nodes": 5}]}), 422)
    assert "nodes" in wrong["message"] or "nodes" in str(wrong.get("details"))
    unknown = _error(api.post("/api/v1/apply", json={"documents": [{"kind": "Reactor", "name": "r"}]}), 422)
    assert "kind" in unknown["message"] and "allowed: DeviceModel" in unknown["message"]  # the field and the allowed values
    assert _error(api.post("/api/v1/tasks", json={"name": "x", "workers": 10**30}), 422)


def test_cors_is_closed_by_default_and_open_only_to_configured_origins(ctx: ServiceContext, admin_token: str) -> None:
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    closed = _app(ctx, admin_token)
    answer = closed.options("/api/v1/tasks", headers=preflight)
    assert "access-control-allow-origin" not in answer.headers
    assert "access-control-allow-origin" not in closed.get("/api/v1/whoami", headers={"Origin": "https://evil.example"}).headers
    opened = _app(ctx, admin_token, cors_origins="https://dash.example.com, https://ops.example.com/")
    ok = opened.options("/api/v1/tasks", headers={**preflight, "Origin": "https://ops.example.com"})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://ops.example.com"
    assert "access-control-allow-origin" not in opened.options("/api/v1/tasks", headers=preflight).headers


def test_each_token_has_its_own_rate_limit_with_retry_after(ctx: ServiceContext, admin_token: str) -> None:
    # A slow refill (one token per 100 s): on a busy machine four requests may take seconds.
    api = _app(ctx, admin_token, rate_limit_per_s=0.01, rate_limit_burst=3)
    answers = [api.get("/api/v1/whoami").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    limited = api.get("/api/v1/whoami")
    assert _error(limited, 429)["code"] == "rate_limited" and int(limited.headers["Retry-After"]) >= 1
    other = TestClient(api.app, headers={"Authorization": "Bearer hp_someone-else"})
    assert other.get("/api/v1/whoami").status_code == 401  # another token has its own bucket
    assert api.get("/healthz").status_code == 200  # probes are never limited


def test_no_token_text_reaches_the_logs(ctx: ServiceContext, admin_token: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    guessed = "hp_" + "x" * 43
    with _app(ctx, admin_token) as api:
        assert api.get("/api/v1/whoami").status_code == 200
        created = api.post("/api/v1/tokens", json={"label": "laptop"}).json()["token"]
        assert TestClient(api.app, headers={"Authorization": f"Bearer {guessed}"}).get("/api/v1/tasks").status_code == 401
        assert TestClient(api.app, headers={"Authorization": f"Bearer {created}"}).get("/api/v1/tasks").status_code == 200
        assert api.delete("/api/v1/tokens/999999").status_code == 404
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert caplog.records, "expected some log records (access log, audit)"
    for secret in (admin_token, created, guessed, admin_token[3:]):
        assert secret not in logged
    with ctx.db.transaction() as session:
        from sqlalchemy import text

        trail = " ".join(str(row) for row in session.execute(text("SELECT * FROM audit_events")).all())
    assert "auth.failure" in trail and guessed not in trail and admin_token not in trail and created not in trail
