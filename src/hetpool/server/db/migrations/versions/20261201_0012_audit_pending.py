"""audit_pending: events committed by their request, waiting for the chainer (services/audit_chain.py)

Revision ID: 20261201_0012_audit_pending
Revises: 20261201_0011_inventory_revision
Create Date: 2026-12-01 22:00:00

Audited writes no longer take the chain's lock: they insert here, and one chainer at a
time links the rows into audit_events in batches (group commit).
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0012_audit_pending"
down_revision = "20261201_0011_inventory_revision"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_pending",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object_kind", sa.String(length=32), nullable=False),
        sa.Column("object_id", sa.String(length=200), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("nonce", sa.String(length=32), nullable=False, unique=True),
        sa.Column("key_id", sa.String(length=64), nullable=False, index=True),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("audit_pending")
