"""The FastAPI application: routes, error shapes, start-up (migrations, admin, workers)."""

from __future__ import annotations

import logging
import os
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from hetpool import __version__
from hetpool.core.errors import HetpoolError
from hetpool.core.specs import format_loc
from hetpool.engines.local import LocalBackend
from hetpool.server import leader, metrics
from hetpool.server.db.session import Database
from hetpool.server.deps import AuthError
from hetpool.server.logging_setup import install_request_logging
from hetpool.server.routers import (
    agent,
    approvals,
    audit,
    capacity,
    catalog,
    compat,
    connectors,
    cost,
    governance_view,
    inventory,
    quotas,
    resources_view,
    sim,
    stats,
    tasks,
    users,
)
from hetpool.server.routers import leader as leader_routes
from hetpool.server.routers.docs import install as install_api_docs
from hetpool.server.schemas.common import ErrorResponse
from hetpool.server.schemas.meta import HealthResponse
from hetpool.server.security import install as install_security
from hetpool.server.services import audit_chain, submit_batch
from hetpool.server.services.connector_sync import sync_due
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings
from hetpool.server.workers.audit_checkpoint import final_checkpoint
from hetpool.server.workers.loop import WorkerLoop, WorkerPipelines
from hetpool.web.routes import install as install_dashboard

log = logging.getLogger(__name__)

DATABASE_UNAVAILABLE = (
    "the database cannot be reached; retry in a moment. The request may or may not have been applied: "
    "a submit retried with the same Idempotency-Key never makes a second task"
)
_STATUS = {
    "invalid_spec": 422,
    "unschedulable": 422,
    "exceeds_quota": 422,
    "not_found": 404,
    "conflict": 409,
    "invalid_transition": 409,
    "permission_denied": 403,
    "node_not_owned": 403,  # an agent reporting for a node that is not its own (services/agent_nodes.py)
    "pool_not_open": 403,
    "separation_of_duties": 403,
    "backend_unavailable": 502,
    "budget_exceeded": 403,
}


def _keep_private(path: Path, mode: int) -> None:
    # The data dir holds the database, the audit key and every task's output and request:
    # tasks run as other users (backends/local) and must not read any of it.
    try:
        if path.exists() and path.stat().st_mode & 0o777 != mode:
            os.chmod(path, mode)
    except PermissionError:
        log.warning("%s has mode %o and is not ours to change: other users may read it", path, path.stat().st_mode & 0o777)


def make_context(settings: Settings) -> ServiceContext:
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _keep_private(settings.data_dir, 0o700)
    db = Database(settings.resolved_database_url())
    db.migrate()
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        for suffix in ("", "-wal", "-shm"):
            _keep_private(Path(url.removeprefix("sqlite:///") + suffix), 0o600)
    ctx = ServiceContext(settings=settings, db=db, backends={"local": LocalBackend(settings.backend_dir / "local")})
    ctx.audit_anchor.key  # noqa: B018 -- made at first start; an unsafe key file refuses the start (AuditKeyError)
    return ctx


def create_app(settings: Settings | None = None, ctx: ServiceContext | None = None) -> FastAPI:
    settings = settings or (ctx.settings if ctx else Settings())
    ctx = ctx or make_context(settings)
    ctx.audit_anchor.key  # noqa: B018 -- as in make_context, for a context built elsewhere
    # Audited writes append through the group-committing chainer; what a crash left pending is linked now.
    audit_chain.attach(ctx.db, ctx.audit_anchor.key)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loops = []
        if settings.run_workers:
            # Every replica runs the pipelines; they run only on the holder of the "workers" lease.
            loops.append(WorkerPipelines(ctx, group=leader.WORKERS))
            if settings.run_connector_sync:
                # Its own thread: reading an engine can take seconds and must not delay scheduling.
                interval = min(1.0, settings.connector_sync_interval_s)
                loops.append(WorkerLoop(ctx, interval, steps=(sync_due,), name="hetpool-connectors", group=leader.CONNECTORS))
        app.state.worker_loops = loops
        for loop in loops:
            loop.start()
        try:
            yield
        finally:
            leading = bool(loops) and loops[0].is_leader()  # read before stop() hands the lease over
            submit_batch.submitter(ctx).close()  # answers the submits it holds
            for loop in loops:
                loop.stop()
            if leading:
                final_checkpoint(ctx)  # the events since the last periodic checkpoint

    app = FastAPI(
        title="hetpool",
        version=__version__,
        description="Unified scheduling and governance of heterogeneous compute (异构算力统一调度).",
        lifespan=lifespan,
        docs_url=None,  # served with local assets: routers/docs.py
        redoc_url=None,
    )
    app.state.ctx = ctx

    install_security(app, settings)  # body size limit (chunked too), rate limits, CORS, JSON 404/405

    @app.exception_handler(HetpoolError)
    async def _domain_error(_request: Request, exc: HetpoolError) -> JSONResponse:
        return JSONResponse(status_code=_STATUS.get(exc.code, 400), content=exc.to_dict())

    @app.exception_handler(AuthError)
    async def _auth_error(_request: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse(status_code=401, content={"code": "unauthorized", "message": exc.message}, headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(OperationalError)
    async def _database_unavailable(request: Request, exc: OperationalError) -> JSONResponse:
        # The database is down or restarting (a lost connection, refused connections): say so
        # and when to retry, rather than a bare 500. The pool reconnects by itself.
        log.warning("database unavailable in %s %s: %s", request.method, request.url.path, str(exc.orig).strip().splitlines()[0][:300])
        content = {"code": "database_unavailable", "message": DATABASE_UNAVAILABLE}
        return JSONResponse(status_code=503, content=content, headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [{"loc": format_loc(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        first = details[0] if details else {"loc": "", "msg": "invalid request"}
        return JSONResponse(status_code=422, content={"code": "invalid_request", "message": f"{first['loc']}: {first['msg']}", "details": details})

    @app.get("/healthz", tags=["meta"], summary="Liveness", response_model=HealthResponse, responses={429: {"model": ErrorResponse}})
    def healthz() -> dict:
        return {"ok": True, "version": __version__, "database": ctx.db.dialect}

    for module in (
        inventory,
        tasks,
        audit,
        catalog,
        compat,
        sim,
        agent,
        connectors,
        users,
        approvals,
        cost,
        quotas,
        governance_view,
        capacity,
        resources_view,
        stats,
        metrics,
        leader_routes,
    ):
        app.include_router(module.router)
    install_api_docs(app)
    install_dashboard(app)
    install_request_logging(app)  # X-Request-ID on every response, access log
    return app
