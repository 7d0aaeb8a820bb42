"""separation of duties: who created each user and issued each token; held deletes

users.created_by and api_tokens.created_by record who made a user or issued a token (the
approvals area refuses a decider linked to the requester that way); approval_requests
gets `operation` (apply | delete) so that deleting a governed object can wait for
approval like changing it.

Backfill, oldest first: the audit trail's user.create / token.create events name their
actor; a user without one takes the granter of its earliest role binding; what neither
records stays '' (unknown: no link is assumed).

Revision ID: 20261201_0008b
Revises: 20261130_0007a, 20261130_0007b
Create Date: 2026-12-01 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0008b"
down_revision = ("20261130_0007a", "20261130_0007b")
branch_labels = None
depends_on = None

_users = sa.table("users", sa.column("id", sa.Integer), sa.column("name", sa.String), sa.column("created_by", sa.String))
_tokens = sa.table("api_tokens", sa.column("id", sa.Integer), sa.column("created_by", sa.String))
_bindings = sa.table("role_bindings", sa.column("user_id", sa.Integer), sa.column("created_at", sa.DateTime), sa.column("created_by", sa.String))
_audit = sa.table(
    "audit_events", sa.column("id", sa.Integer), sa.column("action", sa.String), sa.column("object_id", sa.String), sa.column("actor", sa.String)
)


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("created_by", sa.String(length=64), nullable=False, server_default=""))
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("created_by", sa.String(length=64), nullable=False, server_default=""))
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("operation", sa.String(length=16), nullable=False, server_default="apply"))
    _backfill(op.get_bind())


def _creators(conn, action: str) -> dict[str, str]:
    """object_id -> actor of the first `action` event (a re-created user keeps its latest)."""
    rows = conn.execute(sa.select(_audit.c.object_id, _audit.c.actor).where(_audit.c.action == action).order_by(_audit.c.id)).all()
    return {object_id: actor for object_id, actor in rows}


def _backfill(conn) -> None:
    user_creators = _creators(conn, "user.create")
    earliest_granter: dict[int, str] = {}
    for user_id, granter in conn.execute(sa.select(_bindings.c.user_id, _bindings.c.created_by).order_by(_bindings.c.created_at.desc())).all():
        earliest_granter[user_id] = granter or ""
    for user_id, name in conn.execute(sa.select(_users.c.id, _users.c.name)).all():
        creator = user_creators.get(name) or earliest_granter.get(user_id, "")
        if creator and creator != name:
            conn.execute(_users.update().where(_users.c.id == user_id).values(created_by=creator[:64]))
    for token_id, issuer in _creators(conn, "token.create").items():
        if str(token_id).isdigit():
            conn.execute(_tokens.update().where(_tokens.c.id == int(token_id)).values(created_by=issuer[:64]))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("operation")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("created_by")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("created_by")
