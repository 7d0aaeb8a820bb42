"""Property-based fuzzing of every endpoint of the OpenAPI document (schemathesis): no
answer is a 5xx, every 4xx is JSON with a `code` and a non-empty `message` saying
what is wrong, and every answer conforms to the schema: a documented status code, the
documented content type, a body valid against its response model. SQLite only and a few
examples per endpoint, to stay within seconds."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from schemathesis.checks import content_type_conformance, response_schema_conformance, status_code_conformance  # noqa: E402

from hetpool.core.clock import FixedClock  # noqa: E402
from hetpool.server.app import create_app  # noqa: E402
from hetpool.server.db.session import Database  # noqa: E402
from hetpool.server.services import auth  # noqa: E402
from hetpool.server.services.context import ServiceContext  # noqa: E402
from hetpool.server.settings import Settings  # noqa: E402


def _app():
    """One app for the whole module (schemathesis reads the schema at import): the demo
    inventory, an admin token, no background workers."""
    from fastapi.testclient import TestClient

    from hetpool.engines.local import LocalBackend
    from tests.conftest import demo_documents

    root = Path(tempfile.mkdtemp(prefix="hetpool-fuzz-"))
    cfg = Settings(data_dir=root / "data", database_url=f"sqlite:///{root / 'fuzz.db'}", run_workers=False)
    cfg.data_dir.mkdir(parents=True)
    db = Database(cfg.resolved_database_url())
    db.migrate()
    ctx = ServiceContext(settings=cfg, db=db, clock=FixedClock(), backends={"local": LocalBackend(cfg.backend_dir / "local")})
    with db.transaction() as session:
        token = auth.ensure_admin(session, ctx.clock.now())
    app = create_app(ctx=ctx)
    documents, sources = demo_documents()
    with TestClient(app) as client:
        applied = client.post("/api/v1/apply", json={"documents": documents, "sources": sources}, headers={"Authorization": f"Bearer {token}"})
        assert applied.status_code == 200, applied.text
    return app, token


APP, TOKEN = _app()
# The JSON API only: the dashboard's HTML pages and /metrics' text format have no {code, message} errors.
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).include(path_regex="^/(api/|healthz)")


@schema.parametrize()
@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same cases every run: a failure here is reproducible, never flaky
)
def test_no_5xx_and_every_4xx_says_what_is_wrong(case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    where = f"{case.method} {case.formatted_path} {case.query or ''} body={str(case.body)[:300]!r}"
    assert response.status_code < 500, f"{where} → {response.status_code} {response.text[:300]}"
    if 400 <= response.status_code < 500:
        body = response.json()
        assert isinstance(body, dict) and body.get("code") and str(body.get("message", "")).strip(), (
            f"{where} → {response.status_code} {response.text[:300]}"
        )
    case.validate_response(response, checks=[status_code_conformance, content_type_conformance, response_schema_conformance])
