"""Who is looking at the dashboard, and how pages read the API.

The dashboard is a client of the REST API, called in-process: every page reads and
writes through `/api/v1/...` as the signed-in user, so it follows exactly the same
authentication, role and tenant rules as `curl` or the CLI — there is no second
authorisation path to keep in step.

Sessions live on the server (hetpool.server.services.web_sessions): sign-in checks the API
token once, then the HttpOnly, SameSite=Strict cookie (Secure over https) holds only a
random session id. Each page resolves it to the user, and its in-process API calls carry
that user in the ASGI scope, never a token. Forms that change something carry a CSRF value
derived from the session id, so each session has its own.

Answers a page reads as data come back parsed into the API's own response models
(`Api.get_as`, hetpool.server.schemas): a route whose answer drifts from its model breaks
a test here, not a page. Templates read them as before (Jinja falls back from
`task["state"]` to the attribute)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from fastapi import Request
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from hetpool.server.schemas.users import WhoamiResponse
from hetpool.server.services import web_sessions
from hetpool.server.services.web_sessions import WebCaller

SESSION_COOKIE = "hetpool_session"
LANG_COOKIE = "hetpool_lang"
_INTERNAL_BASE = "http://hetpool.internal"
Model = TypeVar("Model")


class LoginRequired(Exception):
    """No valid session: the page answers with a redirect to /login."""

    def __init__(self, next_path: str) -> None:
        self.next_path = next_path

    @property
    def location(self) -> str:
        return "/login?next=" + quote(self.next_path, safe="/")


class ApiError(Exception):
    """The API refused a call the page made; `status` and the API's own `message`."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        super().__init__(self.message)

    @property
    def code(self) -> str:
        return str(self.body.get("code", ""))

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.body.get("detail") or f"HTTP {self.status}")


def csrf_token(session_id: str) -> str:
    """A per-session value forms echo back; a cross-site form cannot know it."""
    return hmac.new(session_id.encode(), b"hetpool-dashboard-csrf", hashlib.sha256).hexdigest()[:32]


@dataclass
class Api:
    """In-process calls to the REST API as the session's user (`caller`), or, only to
    check a token at sign-in, with that `token`."""

    request: Request
    caller: WebCaller | None = None
    token: str = ""

    def _app(self):
        app, caller = self.request.app, self.caller
        if caller is None:
            return app

        async def as_caller(scope, receive, send) -> None:
            # The scope is built here, in-process: a network client can never put this key in it.
            await app({**scope, web_sessions.SCOPE_KEY: caller}, receive, send)

        return as_caller

    async def call(self, method: str, path: str, *, params: dict | None = None, json: Any = None, raw: bool = False) -> Any:
        transport = httpx.ASGITransport(app=self._app(), client=(self.request.client.host if self.request.client else "127.0.0.1", 0))
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        async with httpx.AsyncClient(transport=transport, base_url=_INTERNAL_BASE) as client:
            clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
            response = await client.request(method, path, params=clean, json=json, headers=headers)
        if raw:
            return response
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"message": response.text}
            raise ApiError(response.status_code, body)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    async def get(self, path: str, **params: Any) -> Any:
        return await self.call("GET", path, params=params)

    async def post(self, path: str, json: Any = None, **params: Any) -> Any:
        return await self.call("POST", path, json=json, params=params)

    async def put(self, path: str, json: Any = None) -> Any:
        return await self.call("PUT", path, json=json)

    async def get_as(self, model: type[Model], path: str, /, **params: Any) -> Model:
        """GET parsed into `model` (a response model, or e.g. list[TaskResponse]); positional
        only, so a query parameter may be called `model` (the resource tree's filter)."""
        return _parsed(model, path, await self.get(path, **params))

    async def post_as(self, model: type[Model], path: str, /, json: Any = None, **params: Any) -> Model:
        return _parsed(model, path, await self.post(path, json=json, **params))


def _parsed(model: type[Model], path: str, body: Any) -> Model:
    """`body` as `model`; an answer that breaks its contract is the error page (502), never
    a page half rendered from what happened to be there."""
    try:
        return TypeAdapter(model).validate_python(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(body)'}: {e['msg']}" for e in exc.errors()[:3])
        raise ApiError(502, {"code": "bad_api_answer", "message": f"the API's answer to {path} does not match its model ({problems})"}) from exc


@dataclass
class Viewer:
    """The logged-in user as the API describes it (GET /api/v1/whoami)."""

    api: Api
    name: str
    role: str
    language: str | None
    actions: dict[str, Any] = field(default_factory=dict)
    session_id: str = field(default="", repr=False)  # the raw id from the cookie: only for the CSRF value

    def may(self, action: str) -> bool:
        """Whether the user may do `action` somewhere (the API still decides per object)."""
        return action in self.actions

    @property
    def csrf(self) -> str:
        return csrf_token(self.session_id)


def _resolve(request: Request, session_id: str) -> WebCaller | None:
    ctx = request.app.state.ctx
    with ctx.db.transaction() as session:
        return web_sessions.resolve(session, session_id, ctx.clock.now(), ctx.settings)


async def current_caller(request: Request) -> WebCaller | None:
    """The live session's caller, or None (no cookie, or the session has ended)."""
    session_id = request.cookies.get(SESSION_COOKIE, "")
    return await run_in_threadpool(_resolve, request, session_id) if session_id else None


async def viewer(request: Request) -> Viewer:
    """The page's user, or LoginRequired (answered with a redirect to the login form)."""
    next_path = request.url.path + (("?" + request.url.query) if request.url.query else "")
    caller = await current_caller(request)
    if caller is None:
        raise LoginRequired(next_path)
    api = Api(request, caller)
    me = await api.get_as(WhoamiResponse, "/api/v1/whoami")
    return Viewer(
        api=api,
        name=me.name,
        role=me.role,
        language=me.language,
        actions=me.actions,
        session_id=request.cookies.get(SESSION_COOKIE, ""),
    )


async def check_csrf(request: Request, user: Viewer) -> dict[str, str]:
    """The submitted form, after checking its CSRF field; ApiError 403 if it is wrong."""
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    if not hmac.compare_digest(form.get("csrf", ""), user.csrf):
        raise ApiError(403, {"code": "csrf", "message": "the form is stale or came from another site; reload the page and try again"})
    return form
