"""Shared fixtures: a service context on SQLite and (when available) PostgreSQL, an API
client with an admin token, and the demo inventory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from hetpool.core.clock import FixedClock
from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.session import Database
from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings

# pytest-xdist workers start with COLUMNS=80, and Rich fixes a console's width from it at
# import: CLI tables would wrap where the tests (which pass COLUMNS=200 per call) expect one line.
os.environ.pop("COLUMNS", None)
# Every server the tests start refuses an engine call made inside a database transaction
# (server/engine_guard.py): a path that does it fails its test instead of only logging.
os.environ.setdefault("HETPOOL_NETWORK_IN_TRANSACTION", "raise")

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / "examples" / "demo"
TASKS_DIR = REPO / "examples" / "tasks"
POSTGRES_URL = os.environ.get("HETPOOL_TEST_POSTGRES_URL", "")
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


# Tests that drive the one Slurm cluster and Ray head `make test` starts (draining nodes,
# adding raylets): pytest-xdist runs them all on one worker, one after another.
SHARED_ENGINE_MODULES = {
    "test_ray_compute.py",
    "test_checkpoint_engines.py",
    "test_slurm_compute.py",
    "test_slurm_runas.py",
    "test_ray_runas.py",
    "test_demo_full.py",
    "test_slurm_e2e.py",
    "test_ray_inventory.py",
    "test_slurm_inventory.py",
    "test_ray_sync.py",
    "test_engine_faults.py",  # stops slurmctld and the Ray head
}


# tryfirst: xdist's worker hook turns the mark into the `@group` node-id suffix that
# --dist loadgroup schedules by, so the mark must be on the item before that hook runs.
# pytest 9.2 moved the node id to `_id`, which xdist 3.8 does not set: pyproject pins
# pytest < 9.2 and test_xdist_grouping.py fails if the suffix goes missing again.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if Path(str(item.fspath)).name in SHARED_ENGINE_MODULES:
            item.add_marker(pytest.mark.xdist_group("shared-engines"))


_CREATED_DATABASES: list[str] = []  # this process's test databases, dropped when its session ends


def _fresh_postgres_database() -> str:
    """A new empty database on the test server (dropped at the end of the session)."""
    name = "t_" + uuid.uuid4().hex[:12]
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    _CREATED_DATABASES.append(name)
    return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name


def pytest_sessionfinish(session, exitstatus) -> None:
    """Drop this process's test databases (each xdist worker drops its own). They were
    never dropped: ~450 of ~9 MB a run, and the test server's directory, kept between
    runs, had grown to 78 GB and filled the disk mid-run."""
    if not _CREATED_DATABASES or not POSTGRES_URL:
        return
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in _CREATED_DATABASES:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    except Exception as exc:  # a test server already gone has nothing left to drop
        print(f"test databases not dropped: {exc}")
    finally:
        admin.dispose()


def database_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'hetpool.db'}"
    if not POSTGRES_URL:
        pytest.skip("HETPOOL_TEST_POSTGRES_URL not set (make test starts PostgreSQL)")
    return _fresh_postgres_database()


@pytest.fixture(params=DATABASES)
def db_kind(request) -> str:
    return request.param


@pytest.fixture
def ctx(db_kind: str, tmp_path: Path) -> Iterator[ServiceContext]:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url(db_kind, tmp_path), run_workers=False)
    settings.data_dir.mkdir(parents=True)
    db = Database(settings.resolved_database_url())
    db.migrate()
    context = ServiceContext(settings=settings, db=db, clock=FixedClock(), backends={"local": LocalBackend(settings.backend_dir / "local")})
    yield context
    db.dispose()


@pytest.fixture
def admin_token(ctx: ServiceContext) -> str:
    with ctx.db.transaction() as session:
        token = auth.ensure_admin(session, ctx.clock.now())
    assert token
    return token


@pytest.fixture
def api(ctx: ServiceContext, admin_token: str) -> Iterator[TestClient]:
    app = create_app(ctx=ctx)
    with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as client:
        yield client


def demo_documents() -> tuple[list[dict], list[str]]:
    from hetpool.cli.files import read_documents

    return read_documents([str(DEMO_DIR)])


@pytest.fixture
def demo(api: TestClient) -> TestClient:
    documents, sources = demo_documents()
    response = api.post("/api/v1/apply", json={"documents": documents, "sources": sources})
    assert response.status_code == 200, response.text
    return api
