"""The dashboard's own routes (login, logout, language, static assets) and every page
router under `web/pages/`. `install(app)` wires them into the server."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from urllib.parse import urlparse

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from hetpool.server.schemas.users import WhoamiResponse
from hetpool.server.services import auth, web_sessions
from hetpool.web import pages as _pages_pkg
from hetpool.web.i18n import LANGUAGES
from hetpool.web.render import render
from hetpool.web.session import LANG_COOKIE, SESSION_COOKIE, Api, ApiError, LoginRequired, check_csrf, current_caller, viewer

router = APIRouter(include_in_schema=False)
STATIC_DIR = Path(__file__).parent / "static"
_YEAR = 365 * 86400


def _safe_next(next_path: str | None) -> str:
    """Only same-site paths: /login?next=https://evil.example must not redirect off-site."""
    if not next_path or not next_path.startswith("/") or next_path.startswith("//") or urlparse(next_path).netloc:
        return "/"
    return next_path


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "login.html", None, next=_safe_next(next), error="")


def _open_session(request: Request, token: str, previous: str) -> str | None:
    """Check `token` once more and open a session for its user (None if it just stopped
    working); a session this browser still had is ended first."""
    ctx = request.app.state.ctx
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        if previous:
            web_sessions.end(session, previous, now)
        try:
            principal = auth.resolve(session, token, now, ctx.settings, source=request.client.host if request.client else "")
        except auth.AuthFailure:
            return None
        not_after = web_sessions.jwt_expiry(token) if principal.via == "oidc" else None
        return web_sessions.start(session, principal, now, ctx.settings, not_after=not_after)


def _close_session(request: Request, session_id: str) -> None:
    ctx = request.app.state.ctx
    with ctx.db.transaction() as session:
        web_sessions.end(session, session_id, ctx.clock.now())


@router.post("/login")
async def login(request: Request, token: str = Form(""), next: str = Form("/")) -> Response:
    """Sign in with an API token: the token is checked (through the API, so failures are
    audited like any other) and then forgotten; the cookie gets a new random session id."""
    token = token.strip()
    try:
        me = await Api(request, token=token).get_as(WhoamiResponse, "/api/v1/whoami")
    except ApiError as exc:
        return render(request, "login.html", None, status_code=401, next=_safe_next(next), error=exc.message)
    session_id = await run_in_threadpool(_open_session, request, token, request.cookies.get(SESSION_COOKIE, ""))
    if session_id is None:
        return render(request, "login.html", None, status_code=401, next=_safe_next(next), error=auth.UNAUTHORIZED_MESSAGE)
    response = RedirectResponse(_safe_next(next), status_code=303)
    max_age = int(request.app.state.ctx.settings.web_session_max_s)
    response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="strict", secure=_secure(request), max_age=max_age)
    if me.language in LANGUAGES:
        response.set_cookie(LANG_COOKIE, me.language, max_age=_YEAR, samesite="lax")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign out: the session is deleted on the server, so a copy of the cookie is useless.
    The form carries the session's CSRF value (a cross-site form cannot sign anyone out)."""
    try:
        user = await viewer(request)
    except LoginRequired:
        user = None  # the session had already ended: only the cookie is left to clear
    if user is not None:
        await check_csrf(request, user)
        await run_in_threadpool(_close_session, request, user.session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=_secure(request))
    return response


@router.get("/lang/{language}")
async def switch_language(request: Request, language: str, next: str = "/") -> Response:
    """Switch the dashboard language and remember it for this user (and this browser)."""
    if language not in LANGUAGES:
        return Response(f"language: must be one of {', '.join(LANGUAGES)}", status_code=422)
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(LANG_COOKIE, language, max_age=_YEAR, samesite="lax")
    caller = await current_caller(request)
    if caller is not None:
        try:
            await Api(request, caller).put("/api/v1/whoami/preferences", {"language": language})
        except ApiError:
            pass  # a user without a stored profile: the cookie still remembers it
    return response


def _include_pages(target: APIRouter) -> None:
    for info in sorted(pkgutil.iter_modules(_pages_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{_pages_pkg.__name__}.{info.name}")
        target.include_router(module.router)


_include_pages(router)


def install(app: FastAPI) -> None:
    """Mount the dashboard on the server: pages, static assets, login redirects, errors."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, exc: LoginRequired) -> Response:
        if request.headers.get("hx-request"):  # a live fragment: send the whole page to the login form
            response = Response(status_code=204, headers={"HX-Redirect": exc.location})
        else:
            response = RedirectResponse(exc.location, status_code=303)
        if SESSION_COOKIE in request.cookies:  # its session has ended: drop the dead id
            response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=_secure(request))
        return response

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        user = None
        try:
            user = await viewer(request)
        except (LoginRequired, ApiError):
            pass
        return render(request, "error.html", user, status_code=exc.status, error=exc)

    app.include_router(router)
