"""approvals: approval requests for tasks and held quota changes

Revision ID: 20261130_0005b
Revises: 20261130_0004
Create Date: 2026-11-30 18:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0005b"
down_revision = "20261130_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approval_requests",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=True),
        sa.Column("document", sa.JSON(), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("policies", sa.JSON(), nullable=False),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("requested_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expire_after", sa.String(length=32), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_approval_requests_state", "approval_requests", ["state"])
    op.create_index("ix_approval_requests_tenant", "approval_requests", ["tenant"])
    op.create_index("ix_approval_requests_task_id", "approval_requests", ["task_id"])
    op.create_index("ix_approval_requests_requested_by", "approval_requests", ["requested_by"])
    op.create_index("ix_approval_requests_state_expires", "approval_requests", ["state", "expires_at"])


def downgrade() -> None:
    op.drop_table("approval_requests")
