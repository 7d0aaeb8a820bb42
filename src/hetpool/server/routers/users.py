"""Users, role bindings, API tokens and whoami (rules: hetpool.server.services.users)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from hetpool.governance.access import role_table
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.params import TokenId
from hetpool.server.services import users as user_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["users"])


class BindingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(max_length=32, description="platform-admin, tenant-admin, member, viewer, auditor or agent")
    tenant: str | None = Field(
        default=None, max_length=200, description="tenant subtree; leave out for global roles (platform-admin, auditor, agent)"
    )


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Checked by the users service (USER_NAME_RULE: 1-64 ASCII characters ...), so that a
    # too long or empty name gets the same 422 naming the rule; this bound only caps the body.
    name: str = Field(
        max_length=256, description="1-64 ASCII letters, digits, '.', '_', '@' or '-', starting with a letter or digit; unique ignoring case"
    )
    bindings: list[BindingIn] = Field(default=[], max_length=200)


class BindingsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bindings: list[BindingIn] = Field(max_length=200)


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field(default="", max_length=64)
    expires_in: str | None = Field(default=None, max_length=16, description="e.g. 30d, 12h; 'never'; default 90d")


def _dicts(items: list[BindingIn]) -> list[dict]:
    return [b.model_dump() for b in items]


@router.get("/whoami", summary="The calling user, its role bindings and what it may do where")
def whoami(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.whoami(ctx, session, user)


class PreferencesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: str = Field(description="Dashboard language: en or zh-CN")


@router.put("/whoami/preferences", summary="Remember the caller's dashboard language (en | zh-CN)")
def put_preferences(body: PreferencesBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.set_language(session, user, body.language)


@router.get("/roles", summary="Roles and the actions each allows")
def roles(user: Principal = Depends(get_principal)) -> dict:
    return role_table()


@router.post("/users", status_code=201, summary="Create a user with role bindings (platform-admin; tenant-admin within its subtree)")
def create_user(body: UserCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_user(ctx, session, user, body.name, _dicts(body.bindings))


@router.get("/users", summary="Users the caller administers")
def list_users(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_users(session, user)


@router.get("/users/{name}", summary="One user and its bindings")
def get_user(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.get_user(session, user, name)


@router.put("/users/{name}/bindings", summary="Replace the bindings the caller may grant (others' grants stay)")
def put_bindings(name: str, body: BindingsBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.change_bindings(ctx, session, user, name, replace=_dicts(body.bindings))


@router.post("/users/{name}/bindings", summary="Add bindings")
def add_bindings(name: str, body: BindingsBody, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.change_bindings(ctx, session, user, name, add=_dicts(body.bindings))


@router.delete("/users/{name}/bindings", summary="Remove one binding")
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


@router.post("/users/{name}/tokens", status_code=201, summary="Create a token for a user; the secret is returned once")
def create_user_token(name: str, body: TokenCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_token(ctx, session, user, name, body.label, body.expires_in)


@router.get("/users/{name}/tokens", summary="A user's tokens (never their secrets)")
def list_user_tokens(name: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_tokens(ctx, session, user, name)


@router.post("/tokens", status_code=201, summary="Create a token for yourself; the secret is returned once")
def create_own_token(body: TokenCreate, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.create_token(ctx, session, user, None, body.label, body.expires_in)


@router.get("/tokens", summary="Your tokens (never their secrets)")
def list_own_tokens(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        return user_service.list_tokens(ctx, session, user, None)


@router.delete("/tokens/{token_id}", summary="Revoke a token (yours, or of a user you administer)")
def revoke_token(token_id: TokenId, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return user_service.revoke_token(ctx, session, user, token_id)
