"""leader_lease: one lease row per group of background loops (leader election, fencing)

Revision ID: 20261130_0007a
Revises: 20261130_0006
Create Date: 2026-11-30 23:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0007a"
down_revision = "20261130_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("group", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False, server_default=""),
        sa.Column("token", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("group"),
    )


def downgrade() -> None:
    op.drop_table("leader_lease")
