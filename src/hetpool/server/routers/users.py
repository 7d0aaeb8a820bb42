"""Users, role bindings, API tokens and whoami (rules: hetpool.server.services.users)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from hetpool.governance.access import role_table
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.routers.params import TokenId
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.users import (
    BindingIn,
    BindingsBody,
    LanguageResponse,
    NewTokenResponse,
    PreferencesBody,
    RoleTable,
    TokenCreate,
    TokenResponse,
    UserCreate,
    UserResponse,
    WhoamiResponse,
)
from hetpool.server.services import users as user_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["users"], responses=ERROR_RESPONSES)


def _dicts(items: list[BindingIn]) -> list[dict]:
    return [b.model_dump() for b in items]


@router.get(
    "/whoami",
    response_model=WhoamiResponse,
    response_model_exclude_unset=True,  # `token` only when the caller used one
    summary="The calling user, its role bindings and what it may do where",
)
def whoami(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.whoami(ctx, session, user)


@router.put("/whoami/preferences", response_model=LanguageResponse, summary="Remember the caller's dashboard language (en | zh-CN)")
def put_preferences(body: PreferencesBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.set_language(session, user, body.language)


@router.get("/roles", response_model=RoleTable, summary="Roles and the actions each allows")
def roles(user: Principal = Depends(get_principal)) -> dict:
    return role_table()


@router.post(
    "/users",
    status_code=201,
    response_model=UserResponse,
    summary="Create a user with role bindings (platform-admin; tenant-admin within its subtree)",
)
def create_user(body: UserCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_user(ctx, session, user, body.name, _dicts(body.bindings))


@router.get("/users", response_model=list[UserResponse], summary="Users the caller administers")
def list_users(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_users(session, user)


@router.get("/users/{name}", response_model=UserResponse, summary="One user and its bindings")
def get_user(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.get_user(session, user, name)


@router.put("/users/{name}/bindings", response_model=UserResponse, summary="Replace the bindings the caller may grant (others' grants stay)")
def put_bindings(name: str, body: BindingsBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.change_bindings(ctx, session, user, name, replace=_dicts(body.bindings))


@router.post("/users/{name}/bindings", response_model=UserResponse, summary="Add bindings")
def add_bindings(name: str, body: BindingsBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.change_bindings(ctx, session, user, name, add=_dicts(body.bindings))


@router.delete("/users/{name}/bindings", response_model=UserResponse, summary="Remove one binding")
def remove_binding(
    name: str,
    role: str = Query(max_length=32),
    tenant: str | None = Query(default=None, max_length=200),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    with ctx.db.transaction() as session:
        return user_service.change_bindings(ctx, session, user, name, remove=[{"role": role, "tenant": tenant}])


@router.delete("/users/{name}", status_code=204, summary="Delete a user; its tokens stop working")
def delete_user(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> Response:
    with ctx.db.transaction() as session:
        user_service.delete_user(ctx, session, user, name)
    return Response(status_code=204)


@router.post(
    "/users/{name}/tokens", status_code=201, response_model=NewTokenResponse, summary="Create a token for a user; the secret is returned once"
)
def create_user_token(name: str, body: TokenCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_token(ctx, session, user, name, body.label, body.expires_in)


@router.get("/users/{name}/tokens", response_model=list[TokenResponse], summary="A user's tokens (never their secrets)")
def list_user_tokens(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_tokens(ctx, session, user, name)


@router.post("/tokens", status_code=201, response_model=NewTokenResponse, summary="Create a token for yourself; the secret is returned once")
def create_own_token(body: TokenCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_token(ctx, session, user, None, body.label, body.expires_in)


@router.get("/tokens", response_model=list[TokenResponse], summary="Your tokens (never their secrets)")
def list_own_tokens(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_tokens(ctx, session, user, None)


@router.delete("/tokens/{token_id}", response_model=TokenResponse, summary="Revoke a token (yours, or of a user you administer)")
def revoke_token(token_id: TokenId, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.revoke_token(ctx, session, user, token_id)
