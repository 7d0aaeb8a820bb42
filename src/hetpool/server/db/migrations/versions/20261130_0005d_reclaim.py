"""reclaim state per task attempt; the audit chain's head (detects truncation and appended rows)

Revision ID: 20261130_0005d
Revises: 20261130_0004
Create Date: 2026-11-30 18:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0005d"
down_revision = "20261130_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reclaim_state",
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notice_cause", sa.String(length=16), nullable=True),
        sa.Column("notice_reason", sa.Text(), nullable=True),
        sa.Column("notice_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("act_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=True),
        sa.Column("policy", sa.String(length=200), nullable=True),
        sa.Column("acted_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id", "attempt"),
    )
    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # An existing trail is anchored at its current end.
    op.execute("INSERT INTO audit_head (id, last_id, hash) SELECT 1, id, hash FROM audit_events ORDER BY id DESC LIMIT 1")


def downgrade() -> None:
    op.drop_table("audit_head")
    op.drop_table("reclaim_state")
