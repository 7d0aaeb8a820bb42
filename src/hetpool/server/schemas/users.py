"""Bodies of users, role bindings, API tokens and whoami (services/users.py)."""

from __future__ import annotations

from pydantic import Field

from hetpool.server.schemas.common import ApiModel, RequestModel


class BindingIn(RequestModel):
    role: str = Field(max_length=32, description="platform-admin, tenant-admin, member, viewer, auditor or agent")
    tenant: str | None = Field(
        default=None, max_length=200, description="tenant subtree; leave out for global roles (platform-admin, auditor, agent)"
    )


class UserCreate(RequestModel):
    # Checked by the users service (USER_NAME_RULE: 1-64 ASCII characters ...), so that a
    # too long or empty name gets the same 422 naming the rule; this bound only caps the body.
    name: str = Field(
        max_length=256, description="1-64 ASCII letters, digits, '.', '_', '@' or '-', starting with a letter or digit; unique ignoring case"
    )
    bindings: list[BindingIn] = Field(default=[], max_length=200)


class BindingsBody(RequestModel):
    bindings: list[BindingIn] = Field(max_length=200)


class TokenCreate(RequestModel):
    label: str = Field(default="", max_length=64)
    expires_in: str | None = Field(default=None, max_length=16, description="e.g. 30d, 12h; 'never'; default 90d")


class PreferencesBody(RequestModel):
    language: str = Field(description="Dashboard language: en or zh-CN")


class Binding(ApiModel):
    role: str
    tenant: str | None = Field(description="the subtree; null for a global role")


class UserResponse(ApiModel):
    name: str
    role: str = Field(description="summary of the bindings the caller may see")
    bindings: list[Binding]
    created_at: str | None


class TokenResponse(ApiModel):
    id: int
    user: str
    label: str
    state: str = Field(description="active, expired or revoked")
    created_at: str | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None


class NewTokenResponse(TokenResponse):
    token: str = Field(description="the secret: shown this once")


class TokenRef(ApiModel):
    id: int
    label: str
    expires_at: str | None


class WhoamiResponse(ApiModel):
    name: str
    role: str
    bindings: list[Binding]
    via: str = Field(description="how the caller signed in: token, session, …")
    actions: dict[str, str | list[str]] = Field(description='per allowed action: "*" (everywhere) or the tenant subtrees')
    language: str | None = Field(description="the remembered dashboard language")
    token: TokenRef | None = Field(default=None, description="only when calling with an API token: which one")


class LanguageResponse(ApiModel):
    name: str
    language: str


RoleTable = dict[str, list[str]]
