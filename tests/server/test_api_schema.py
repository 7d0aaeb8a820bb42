"""The typed API contract: every 2xx JSON answer is described by a model in /openapi.json,
errors share one model, the schemas import nothing of the server, and /docs and /redoc
work offline (their scripts and styles come from the app itself)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from hetpool.server.schemas.common import ErrorResponse

SCHEMAS = Path(__file__).resolve().parents[2] / "src" / "hetpool" / "server" / "schemas"


def _non_json(route: APIRoute) -> bool:
    """Routes that answer with something else than a JSON body (a stream, text, 204)."""
    cls = route.response_class
    name = getattr(cls, "__name__", "")
    return route.status_code == 204 or name in ("StreamingResponse", "PlainTextResponse", "HTMLResponse", "Response") or (route.path in ("/metrics",))


def _untyped(schema: dict) -> bool:
    """What FastAPI writes for an undeclared `-> dict` / `-> list[dict]`: an object that
    says nothing about its fields (titles and descriptions aside)."""
    schema = {k: v for k, v in schema.items() if k not in ("title", "description")}
    if schema.get("type") == "array":
        return _untyped(schema.get("items", {}))
    return schema in ({}, {"type": "object"}, {"type": "object", "additionalProperties": True})


def _api_routes(routes, prefix: str = "") -> list[tuple[str, APIRoute]]:
    """Every APIRoute with its full path, also inside included routers (FastAPI keeps
    them nested in app.routes)."""
    out = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append((prefix + route.path_format, route))
        elif hasattr(route, "original_router") and route.include_context.include_in_schema:
            out += _api_routes(route.original_router.routes, prefix + route.include_context.prefix)
    return out


def test_every_2xx_json_response_has_a_schema(api: TestClient) -> None:
    spec = api.get("/openapi.json").json()
    missing = []
    routes = _api_routes(api.app.routes)
    assert len(routes) > 50, [path for path, _ in routes]  # the walk reaches the routers' routes
    for path, route in routes:
        if not route.include_in_schema or _non_json(route):
            continue
        for method in route.methods:
            operation = spec["paths"][path][method.lower()]
            for status, response in operation["responses"].items():
                if not status.startswith("2"):
                    continue
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if schema is None or _untyped(schema):
                    missing.append(f"{method} {path} {status}")
    assert not missing, "responses without a schema:\n" + "\n".join(sorted(missing))


def test_errors_are_declared_with_the_one_error_model(api: TestClient) -> None:
    spec = api.get("/openapi.json").json()
    assert spec["components"]["schemas"]["ErrorResponse"]["required"] == ["code", "message"]
    for path, operations in spec["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, operation in operations.items():
            for status in ("401", "403", "404", "422"):
                ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorResponse"), (method, path, status)


def test_error_bodies_parse_as_the_error_model(api: TestClient) -> None:
    answers = [
        api.get("/api/v1/tasks/t-missing"),  # a service's HetpoolError
        api.post("/api/v1/apply", json={"documents": []}),  # request validation
        api.get("/api/v1/whoami", headers={"Authorization": "Bearer wrong"}),  # authentication
        api.get("/api/v1/no-such-route"),  # the security middleware's JSON 404
    ]
    for response in answers:
        assert response.status_code >= 400
        ErrorResponse.model_validate(response.json())


def test_schemas_import_only_pydantic_stdlib_and_core() -> None:
    """The client, CLI and dashboard import these modules: they must not pull in the server."""
    stdlib = {"__future__", "typing", "datetime", "enum", "collections", "dataclasses"}
    bad = []
    for module in sorted(SCHEMAS.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                if top in stdlib or top == "pydantic" or name.startswith(("hetpool.core", "hetpool.server.schemas")):
                    continue
                bad.append(f"{module.name}: {name}")
    assert not bad, bad


_URL = re.compile(r"""(?:src|href|url)\s*[=:(]\s*['"]?([^'")\s>]+)""")


def test_docs_and_redoc_use_only_local_assets(api: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        response = api.get(page)
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        html = response.text
        assert "cdn.jsdelivr.net" not in html and "fonts.googleapis.com" not in html and "fastapi.tiangolo.com" not in html
        urls = set(_URL.findall(html)) | set(re.findall(r"['\"](/[^'\"]+\.(?:js|css|png))['\"]", html))
        assert urls, html
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
            if url.endswith((".js", ".css", ".png")):
                asset = api.get(url)
                assert asset.status_code == 200 and len(asset.content) > 500, url
        assert "/openapi.json" in html


def test_doc_assets_keep_their_licences() -> None:
    assets = SCHEMAS.parent / "static_docs"
    for name in ("swagger-ui.LICENSE", "redoc.LICENSE", "swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        assert (assets / name).stat().st_size > 500, name
