"""Request dependencies: the service context, a session-free principal check."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext

_bearer = HTTPBearer(auto_error=False, description="API token (hp_…)")


class AuthError(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def get_ctx(request: Request) -> ServiceContext:
    return request.app.state.ctx


def get_principal(
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ctx: ServiceContext = Depends(get_ctx),
) -> auth.Principal:
    if credentials is None or not credentials.credentials:
        raise AuthError("missing bearer token: send 'Authorization: Bearer <token>'")
    with ctx.db.transaction() as session:
        principal = auth.authenticate(session, credentials.credentials, ctx.clock.now())
    if principal is None:
        raise AuthError("invalid, expired or revoked token")
    return principal
