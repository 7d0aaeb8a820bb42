"""Users, their role bindings and their API tokens; every change is audited.

Who may do what here: a platform-admin manages everyone. A tenant-admin grants and
removes scoped roles (tenant-admin, member, viewer) within its subtrees — on any existing
user, so a person can be added to a second team — and sees, issues tokens for and deletes
only users all of whose bindings it could have granted (else it could act as someone
with more rights than itself). Everyone may read itself and create, list and revoke its
own tokens.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.errors import ConflictError, NotFoundError, PermissionDeniedError, SpecError
from hetpool.core.units import parse_duration
from hetpool.governance import access as rules
from hetpool.governance.access import Binding
from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.db.models_access import RoleBindingRow
from hetpool.server.services import audit, auth
from hetpool.server.services.access import require
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

# ASCII only, so that "differs only in case" means the same in Python, SQLite and
# PostgreSQL (lower() of non-ASCII depends on the database's collation) and no look-alike
# letters from other scripts pass for a colleague's name. Matched with fullmatch: `$` alone
# would let a trailing newline through.
USER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
USER_NAME_RULE = "1-64 ASCII letters, digits, '.', '_', '@' or '-', starting with a letter or digit; not anonymous or system"
RESERVED_NAMES = {"anonymous", "system"}  # audit actors that are not users
DEFAULT_TOKEN_LIFETIME = "90d"
MAX_TOKEN_LIFETIME = timedelta(days=3650)


# --------------------------------------------------------------------------- helpers
def _user(session: Session, name: str) -> UserRow:
    # Exact match: a name keeps the case it was created with (`Admin` does not find
    # `admin`); no two names differ only in case (create_user, and a unique index).
    row = session.execute(select(UserRow).where(UserRow.name == name)).scalar_one_or_none()
    if row is None:
        raise NotFoundError(f"user {name!r} not found")
    return row


def _is_platform_admin(actor: Principal) -> bool:
    return any(b.role == "platform-admin" for b in actor.bindings)


def _manages(actor: Principal, bindings: tuple[Binding, ...]) -> bool:
    """May `actor` act for a user holding `bindings` (every one within its authority)?"""
    if _is_platform_admin(actor):
        return True
    return bool(bindings) and all(rules.can_grant(actor.bindings, b) for b in bindings)


def _sees(actor: Principal, user: UserRow, bindings: tuple[Binding, ...]) -> bool:
    return actor.user_id == user.id or _is_platform_admin(actor) or any(rules.can_grant(actor.bindings, b) for b in bindings)


def _visible_user(session: Session, actor: Principal, name: str) -> tuple[UserRow, tuple[Binding, ...]]:
    user = _user(session, name)
    bindings = auth.load_bindings(session, user.id)
    if not _sees(actor, user, bindings):
        raise NotFoundError(f"user {name!r} not found")
    return user, bindings


def parse_bindings(raw: list, *, field: str = "bindings") -> list[Binding]:
    """{role, tenant} entries → Bindings, or one SpecError listing every bad field."""
    out, problems = [], []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, dict):
            problems.append({"loc": where, "msg": "expected {role, tenant}"})
            continue
        try:
            out.append(rules.validate_binding(item.get("role"), item.get("tenant"), where=where))
        except ValueError as exc:
            loc, _, msg = str(exc).partition(": ")
            problems.append({"loc": loc, "msg": msg})
    _raise(problems)
    return out


def _raise(problems: list[dict]) -> None:
    if problems:
        first = problems[0]
        raise SpecError(f"{first['loc']}: {first['msg']}", details=problems)


def check_bindings(ctx: ServiceContext, session: Session, actor: Principal, raw: list, *, field: str = "bindings") -> list[Binding]:
    """Bindings to grant: valid, and on tenants that exist (a typo would grant nothing).
    The known tenants offered are those the actor may grant on, not every team's."""
    out = parse_bindings(raw, field=field)
    tenants = load_inventory(ctx, session).tenants if any(b.tenant for b in out) else {}
    known = ", ".join(sorted(t for t in tenants if rules.can_grant(actor.bindings, Binding("viewer", t)))) or "none"
    _raise(
        [
            {"loc": f"{field}[{i}].tenant", "msg": f"unknown tenant {b.tenant!r}; known: {known}"}
            for i, b in enumerate(out)
            if b.tenant and b.tenant not in tenants
        ]
    )
    return sorted(set(out))


def _require_grant(actor: Principal, bindings: list[Binding]) -> None:
    for b in bindings:
        if not rules.can_grant(actor.bindings, b):
            scope = "only a platform-admin grants global roles" if b.tenant is None else f"you are not tenant-admin of {b.tenant!r} or above"
            raise PermissionDeniedError(f"permission denied: cannot grant {b}: {scope}", details=[{"loc": "bindings", "msg": str(b)}])


def _guard_last_admin(session: Session, user: UserRow, remaining: set[Binding]) -> None:
    if Binding("platform-admin") in remaining:
        return
    others = session.execute(
        select(func.count(RoleBindingRow.id)).where(
            RoleBindingRow.role == "platform-admin", RoleBindingRow.tenant == "", RoleBindingRow.user_id != user.id
        )
    ).scalar_one()
    holds = session.execute(
        select(RoleBindingRow.id).where(RoleBindingRow.user_id == user.id, RoleBindingRow.role == "platform-admin", RoleBindingRow.tenant == "")
    ).first()
    if holds is not None and not others:
        raise ConflictError(f"user {user.name!r} is the last platform-admin; make someone else platform-admin first")


def _write_bindings(session: Session, user: UserRow, target: set[Binding], actor: str, now: datetime) -> None:
    current = set(auth.load_bindings(session, user.id))
    for b in current - target:
        session.execute(
            delete(RoleBindingRow).where(RoleBindingRow.user_id == user.id, RoleBindingRow.role == b.role, RoleBindingRow.tenant == (b.tenant or ""))
        )
    for b in sorted(target - current):
        session.add(RoleBindingRow(user_id=user.id, role=b.role, tenant=b.tenant or "", created_at=now, created_by=actor))
    user.role = rules.summary_role(target)
    session.flush()


def _visible_bindings(actor: Principal, user: UserRow, bindings: tuple[Binding, ...]) -> tuple[Binding, ...]:
    """What `actor` may know of `user`'s roles: all of them for itself and a platform-admin,
    else only those it could have granted (other teams' grants are theirs)."""
    if actor.user_id == user.id or _is_platform_admin(actor):
        return bindings
    return tuple(b for b in bindings if rules.can_grant(actor.bindings, b))


def user_dict(session: Session, user: UserRow, actor: Principal | None = None, bindings: tuple[Binding, ...] | None = None) -> dict:
    bindings = auth.load_bindings(session, user.id) if bindings is None else bindings
    role = user.role
    if actor is not None:
        shown = _visible_bindings(actor, user, bindings)
        role = role if shown == bindings else rules.summary_role(shown)  # the stored summary may name a role held elsewhere
        bindings = shown
    return {"name": user.name, "role": role, "bindings": [b.to_dict() for b in bindings], "created_at": iso_utc(user.created_at)}


# ----------------------------------------------------------------------------- users
def create_user(ctx: ServiceContext, session: Session, actor: Principal, name: str, raw_bindings: list) -> dict:
    require(actor, "user.admin")
    if not isinstance(name, str) or not USER_NAME_RE.fullmatch(name) or name.lower() in RESERVED_NAMES:
        raise SpecError(f"name: invalid user name {name!r}: {USER_NAME_RULE}", details=[{"loc": "name", "msg": USER_NAME_RULE}])
    bindings = check_bindings(ctx, session, actor, raw_bindings)
    if not bindings and not _is_platform_admin(actor):
        raise SpecError("bindings: give at least one role on a tenant you administer", details=[{"loc": "bindings", "msg": "empty"}])
    _require_grant(actor, bindings)
    # Unique ignoring case (the index on lower(name) enforces it too): `Admin` beside
    # `admin` would be a look-alike of the platform-admin in every audit record and inbox.
    taken = session.execute(select(UserRow.name).where(func.lower(UserRow.name) == name.lower())).scalar_one_or_none()
    if taken == name:
        raise ConflictError(f"user {name!r} already exists; change its roles with PUT /api/v1/users/{name}/bindings (hetpool users bind)")
    if taken is not None:
        raise ConflictError(
            f"name: user {taken!r} already exists and user names are unique ignoring case; choose another name than {name!r}",
            details=[{"loc": "name", "msg": f"conflicts with existing user {taken!r}"}],
        )
    now = ctx.clock.now()
    user = UserRow(name=name, role=rules.summary_role(bindings), created_at=now, created_by=actor.name)  # separation of duties reads it
    session.add(user)
    session.flush()
    _write_bindings(session, user, set(bindings), actor.name, now)
    audit.record(
        session,
        actor=actor.name,
        action="user.create",
        object_kind="User",
        object_id=name,
        after={"bindings": [b.to_dict() for b in bindings]},
        ts=now,
    )
    return user_dict(session, user, actor)


def list_users(session: Session, actor: Principal) -> list[dict]:
    require(actor, "user.admin")
    out = []
    for user in session.execute(select(UserRow).order_by(UserRow.name)).scalars():
        bindings = auth.load_bindings(session, user.id)
        if _sees(actor, user, bindings):
            out.append(user_dict(session, user, actor, bindings))
    return out


def get_user(session: Session, actor: Principal, name: str) -> dict:
    user, bindings = _visible_user(session, actor, name)
    return user_dict(session, user, actor, bindings)


def change_bindings(
    ctx: ServiceContext,
    session: Session,
    actor: Principal,
    name: str,
    *,
    replace: list | None = None,
    add: list | None = None,
    remove: list | None = None,
) -> dict:
    """PUT (replace what the actor may grant; grants of others stay), add or remove bindings."""
    require(actor, "user.admin")
    user = _user(session, name)
    current = set(auth.load_bindings(session, user.id))
    if replace is not None:
        wanted = check_bindings(ctx, session, actor, replace)
        _require_grant(actor, wanted)
        target = {b for b in current if not rules.can_grant(actor.bindings, b)} | set(wanted)
    elif add is not None:
        wanted = check_bindings(ctx, session, actor, add)
        _require_grant(actor, wanted)
        target = current | set(wanted)
    else:
        gone = parse_bindings(remove or [])  # no tenant check: a binding on a deleted tenant can still go
        _require_grant(actor, gone)
        missing = [str(b) for b in gone if b not in current]
        if missing:
            # Name only what the actor may know: the roles it could have granted.
            shown = _visible_bindings(actor, user, tuple(sorted(current)))
            raise NotFoundError(
                f"user {name!r} does not hold {', '.join(missing)}; of the roles you administer it holds {', '.join(map(str, shown)) or 'none'}"
            )
        target = current - set(gone)
    if target != current:
        _guard_last_admin(session, user, target)
        now = ctx.clock.now()
        _write_bindings(session, user, target, actor.name, now)
        audit.record(
            session,
            actor=actor.name,
            action="user.bindings",
            object_kind="User",
            object_id=name,
            before={"bindings": [b.to_dict() for b in sorted(current)]},
            after={"bindings": [b.to_dict() for b in sorted(target)]},
            ts=now,
        )
    return user_dict(session, user, actor)


def delete_user(ctx: ServiceContext, session: Session, actor: Principal, name: str) -> None:
    user, bindings = _visible_user(session, actor, name)
    require(actor, "user.admin")
    if not _manages(actor, bindings):
        raise PermissionDeniedError(
            f"permission denied: deleting user {name!r} needs authority over every role it holds; you may change only the roles you administer"
        )
    _guard_last_admin(session, user, set())
    now = ctx.clock.now()
    tokens = session.execute(select(ApiTokenRow).where(ApiTokenRow.user_id == user.id)).scalars().all()
    revoked = [t.id for t in tokens if t.revoked_at is None]
    for t in tokens:  # revoked first, so the audit event says which were live
        t.revoked_at = t.revoked_at or now
    session.execute(delete(RoleBindingRow).where(RoleBindingRow.user_id == user.id))
    session.flush()
    before = {"bindings": [b.to_dict() for b in bindings], "revoked_tokens": revoked}
    session.execute(delete(ApiTokenRow).where(ApiTokenRow.user_id == user.id))
    session.delete(user)
    session.flush()
    audit.record(session, actor=actor.name, action="user.delete", object_kind="User", object_id=name, before=before, ts=now)


# ---------------------------------------------------------------------------- tokens
def _token_owner(session: Session, actor: Principal, name: str | None) -> UserRow:
    """The user whose tokens `actor` manages: itself, or one it fully administers."""
    if name is None or name == actor.name:
        return _user(session, actor.name)
    user, bindings = _visible_user(session, actor, name)
    if not _manages(actor, bindings):
        raise PermissionDeniedError(f"permission denied: tokens of {name!r} are its own (it holds roles outside what you administer)")
    return user


def parse_lifetime(value: str | None, now: datetime) -> datetime | None:
    """'30d', '12h' … → expiry time; 'never' → None."""
    text = (value or DEFAULT_TOKEN_LIFETIME).strip().lower()
    if text == "never":
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise SpecError(f"expires_in: {exc} (or 'never')", details=[{"loc": "expires_in", "msg": str(exc)}]) from None
    if seconds <= 0 or timedelta(seconds=seconds) > MAX_TOKEN_LIFETIME:
        raise SpecError("expires_in: must be more than 0 and at most 3650d (or 'never')", details=[{"loc": "expires_in", "msg": "out of range"}])
    return now + timedelta(seconds=seconds)


def token_dict(row: ApiTokenRow, user: str, now: datetime, used: datetime | None = None) -> dict:
    expires = row.expires_at
    state = "revoked" if row.revoked_at else "expired" if expires and expires <= now else "active"
    return {
        "id": row.id,
        "user": user,
        "label": row.label,
        "state": state,
        "created_at": iso_utc(row.created_at),
        "expires_at": iso_utc(expires),
        "revoked_at": iso_utc(row.revoked_at),
        "last_used_at": iso_utc(used),
    }


def create_token(ctx: ServiceContext, session: Session, actor: Principal, name: str | None, label: str, expires_in: str | None) -> dict:
    user = _token_owner(session, actor, name)
    now = ctx.clock.now()
    expires_at = parse_lifetime(expires_in, now)
    token, row = auth.issue_token_row(session, user, label=label, now=now, expires_at=expires_at)
    row.created_by = actor.name  # whoever issues a token can act as its user (separation of duties)
    after = {"user": user.name, "label": label, "expires_at": iso_utc(expires_at)}
    audit.record(session, actor=actor.name, action="token.create", object_kind="ApiToken", object_id=str(row.id), after=after, ts=now)
    return {**token_dict(row, user.name, now), "token": token}


def list_tokens(ctx: ServiceContext, session: Session, actor: Principal, name: str | None) -> list[dict]:
    user = _token_owner(session, actor, name)
    rows = session.execute(select(ApiTokenRow).where(ApiTokenRow.user_id == user.id).order_by(ApiTokenRow.id)).scalars().all()
    used = auth.last_used(session, [r.id for r in rows])
    now = ctx.clock.now()
    return [token_dict(r, user.name, now, used.get(r.id)) for r in rows]


def revoke_token(ctx: ServiceContext, session: Session, actor: Principal, token_id: int) -> dict:
    row = session.get(ApiTokenRow, token_id)
    owner = session.get(UserRow, row.user_id) if row is not None else None
    if row is None or owner is None:
        raise NotFoundError(f"token {token_id} not found")
    try:
        _token_owner(session, actor, owner.name)
    except (NotFoundError, PermissionDeniedError):
        raise NotFoundError(f"token {token_id} not found") from None  # others' token ids are not confirmed
    now = ctx.clock.now()
    if row.revoked_at is None:
        row.revoked_at = now
        session.flush()
        after = {"user": owner.name, "label": row.label}
        audit.record(session, actor=actor.name, action="token.revoke", object_kind="ApiToken", object_id=str(row.id), after=after, ts=now)
    return token_dict(row, owner.name, now, auth.last_used(session, [row.id]).get(row.id))


# ---------------------------------------------------------------------------- whoami
def whoami(ctx: ServiceContext, session: Session, principal: Principal) -> dict:
    body = {
        "name": principal.name,
        "role": principal.role,
        "bindings": [b.to_dict() for b in principal.bindings],
        "via": principal.via,
        # Per action: "*" (everywhere), the tenant subtrees, or absent (not allowed).
        "actions": {
            action: ("*" if scopes is None else scopes)
            for action in rules.ACTIONS
            if (scopes := rules.scopes_for(principal.bindings, action)) is None or scopes
        },
    }
    user_row = session.get(UserRow, principal.user_id) if principal.user_id else None
    body["language"] = user_row.ui_language if user_row is not None else None
    if principal.token_id is not None:
        row = session.get(ApiTokenRow, principal.token_id)
        body["token"] = {"id": row.id, "label": row.label, "expires_at": iso_utc(row.expires_at)} if row else None
    return body


UI_LANGUAGES = ("en", "zh-CN")


def set_language(session: Session, principal: Principal, language: str) -> dict:
    """Remember the dashboard language of the calling user (any role may set its own)."""
    if language not in UI_LANGUAGES:
        raise SpecError(
            f"language: must be one of {', '.join(UI_LANGUAGES)}, got {language!r}",
            details=[{"loc": "language", "msg": f"allowed: {', '.join(UI_LANGUAGES)}"}],
        )
    row = session.get(UserRow, principal.user_id) if principal.user_id else None
    if row is None:
        raise NotFoundError(f"user {principal.name!r} has no stored profile to keep a preference in")
    row.ui_language = language
    return {"name": row.name, "language": language}
