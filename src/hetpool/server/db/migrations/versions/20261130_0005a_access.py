"""access: role bindings per user and tenant subtree, token use

Revision ID: 20261130_0005a
Revises: 20261130_0004
Create Date: 2026-11-30 18:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0005a"
down_revision = "20261130_0004"
branch_labels = None
depends_on = None

# Roles that existed as users.role before bindings and are global (no tenant).
_GLOBAL_ROLES = ("platform-admin", "auditor", "agent")


def upgrade() -> None:
    op.create_table(
        "role_bindings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "role", "tenant", name="uq_role_bindings_user_role_tenant"),
    )
    with op.batch_alter_table("role_bindings") as batch:
        batch.create_index("ix_role_bindings_user_id", ["user_id"], unique=False)
        batch.create_index("ix_role_bindings_tenant", ["tenant"], unique=False)
    op.create_table(
        "api_token_use",
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("audited_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_id"),
    )
    # Users made before bindings had one global role in users.role (the bootstrap admin):
    # give each the same role as a binding so nobody loses access on upgrade.
    users = sa.table("users", sa.column("id", sa.Integer), sa.column("role", sa.String), sa.column("created_at", sa.DateTime(timezone=True)))
    bindings = sa.table(
        "role_bindings",
        sa.column("user_id", sa.Integer),
        sa.column("role", sa.String),
        sa.column("tenant", sa.String),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("created_by", sa.String),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(users.c.id, users.c.role, users.c.created_at).where(users.c.role.in_(_GLOBAL_ROLES))).all()
    if rows:
        op.bulk_insert(bindings, [{"user_id": i, "role": r, "tenant": "", "created_at": ts, "created_by": "migration"} for i, r, ts in rows])


def downgrade() -> None:
    op.drop_table("api_token_use")
    with op.batch_alter_table("role_bindings") as batch:
        batch.drop_index("ix_role_bindings_tenant")
        batch.drop_index("ix_role_bindings_user_id")
    op.drop_table("role_bindings")
