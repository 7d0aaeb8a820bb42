"""Request dependencies: the service context and the calling principal (every failed
authentication is audited, without the token, and answered with one 401 whatever the
reason)."""

from __future__ import annotations

import threading
import time

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hetpool.server.services import access, audit, auth, web_sessions
from hetpool.server.services.context import ServiceContext

_bearer = HTTPBearer(auto_error=False, description="API token (hp_…) or, when configured, an OIDC ID/access token")


class AuthError(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class FailureLimiter:
    """At most `burst` auth.failure events per source and reason per `window_s`; the rest
    are counted and the count goes into the next recorded event, so a scanner hammering
    the API cannot flood the audit chain but its attempts are not lost either."""

    def __init__(self, burst: int = 20, window_s: float = 60.0) -> None:
        self.burst = burst
        self.window_s = window_s
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], list[float]] = {}  # key → [window start, recorded, suppressed]

    def admit(self, key: tuple[str, str]) -> int | None:
        """None: suppress this event; else record it, carrying this many suppressed ones."""
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 10_000:  # forget old sources rather than grow without bound
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.window_s:
                suppressed = int(entry[2]) if entry else 0
                self._seen[key] = [now, 1, 0]
                return suppressed
            if entry[1] < self.burst:
                entry[1] += 1
                return 0
            entry[2] += 1
            return None


def get_ctx(request: Request) -> ServiceContext:
    return request.app.state.ctx


def _limiter(request: Request) -> FailureLimiter:
    state = request.app.state
    if getattr(state, "auth_failure_limiter", None) is None:  # one per app: tests and servers do not share counts
        state.auth_failure_limiter = FailureLimiter()
    return state.auth_failure_limiter


def _source(request: Request) -> str:
    return request.client.host if request.client else ""


def get_principal(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ctx: ServiceContext = Depends(get_ctx),
) -> auth.Principal:
    caller = request.scope.get(web_sessions.SCOPE_KEY)
    if caller is not None and credentials is None:
        return caller.principal  # a dashboard page's in-process call: its session was resolved by the page
    token = credentials.credentials if credentials else ""
    source = _source(request)
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        try:
            return auth.resolve(session, token, now, ctx.settings, source=source)
        except auth.AuthFailure as exc:
            suppressed = _limiter(request).admit((source, exc.reason))
            if suppressed is not None:
                after = {"reason": exc.reason, "detail": exc.message, "path": request.url.path, "source": source}
                after.update({k: v for k, v in (("token_id", exc.token_id), ("user", exc.user), ("suppressed", suppressed)) if v})
                audit.record(session, actor="anonymous", action="auth.failure", object_kind="Auth", object_id=exc.reason, after=after, ts=now)
    raise AuthError(auth.UNAUTHORIZED_MESSAGE)  # one text for every reason; the audit event keeps it


def requires(action: str):
    """A dependency allowing only principals that may do `action` somewhere, e.g. a whole
    router: APIRouter(..., dependencies=[Depends(requires("audit.read"))])."""

    def _check(principal: auth.Principal = Depends(get_principal)) -> auth.Principal:
        access.require(principal, action)
        return principal

    return _check
