"""The API's documentation pages, /docs (Swagger UI) and /redoc (ReDoc), with their
scripts and styles served by the app itself (server/static_docs/, vendored from npm)
instead of FastAPI's default CDN links: an air-gapped or offline installation would
otherwise get blank pages. The app is created with docs_url=None and redoc_url=None and
calls `install`."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_DIR = Path(__file__).resolve().parents[1] / "static_docs"
ASSETS_URL = "/docs/assets"


def install(app: FastAPI) -> None:
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    favicon = f"{ASSETS_URL}/favicon-32x32.png"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} — API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=favicon,
            # No call to the public validator service (validator.swagger.io) either.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} — API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=favicon,
            with_google_fonts=False,
        )
