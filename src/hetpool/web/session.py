"""Who is looking at the dashboard, and how pages read the API.

The dashboard is a client of the REST API, called in-process: every page reads and
writes through `/api/v1/...` with the user's own token, so it follows exactly the same
authentication, role and tenant rules as `curl` or the CLI — there is no second
authorisation path to keep in step. The token lives in an HttpOnly, SameSite=Strict
cookie set by the login form; forms that change something also carry a CSRF token
derived from it."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import Request

SESSION_COOKIE = "hetpool_session"
LANG_COOKIE = "hetpool_lang"
_INTERNAL_BASE = "http://hetpool.internal"


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


def csrf_token(token: str) -> str:
    """A per-session value forms echo back; a cross-site form cannot know it."""
    return hmac.new(token.encode(), b"hetpool-dashboard-csrf", hashlib.sha256).hexdigest()[:32]


@dataclass
class Api:
    """In-process calls to the REST API with one user's token."""

    request: Request
    token: str

    async def call(self, method: str, path: str, *, params: dict | None = None, json: Any = None, raw: bool = False) -> Any:
        transport = httpx.ASGITransport(app=self.request.app, client=(self.request.client.host if self.request.client else "127.0.0.1", 0))
        async with httpx.AsyncClient(transport=transport, base_url=_INTERNAL_BASE) as client:
            clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
            response = await client.request(method, path, params=clean, json=json, headers={"Authorization": f"Bearer {self.token}"})
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


@dataclass
class Viewer:
    """The logged-in user as the API describes it (GET /api/v1/whoami)."""

    api: Api
    name: str
    role: str
    language: str | None
    actions: dict[str, Any] = field(default_factory=dict)

    def may(self, action: str) -> bool:
        """Whether the user may do `action` somewhere (the API still decides per object)."""
        return action in self.actions

    @property
    def csrf(self) -> str:
        return csrf_token(self.api.token)


async def viewer(request: Request) -> Viewer:
    """The page's user, or LoginRequired (answered with a redirect to the login form)."""
    token = request.cookies.get(SESSION_COOKIE, "")
    next_path = request.url.path + (("?" + request.url.query) if request.url.query else "")
    if not token:
        raise LoginRequired(next_path)
    api = Api(request, token)
    try:
        me = await api.get("/api/v1/whoami")
    except ApiError as exc:
        if exc.status == 401:
            raise LoginRequired(next_path) from exc
        raise
    return Viewer(api=api, name=me["name"], role=me["role"], language=me.get("language"), actions=me.get("actions", {}))


async def check_csrf(request: Request, user: Viewer) -> dict[str, str]:
    """The submitted form, after checking its CSRF field; ApiError 403 if it is wrong."""
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    if not hmac.compare_digest(form.get("csrf", ""), user.csrf):
        raise ApiError(403, {"code": "csrf", "message": "the form is stale or came from another site; reload the page and try again"})
    return form
