"""idempotency_keys (Idempotency-Key of POST /tasks) and scheduler_epoch (one cycle applies at a time)

Revision ID: 20261130_0007b
Revises: 20261130_0006
Create Date: 2026-11-30 23:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0007b"
down_revision = "20261130_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("task_id", sa.String(length=32), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "key"),
    )
    op.create_index("ix_idempotency_keys_user_created", "idempotency_keys", ["user_id", "created_at"])
    epoch = op.create_table(
        "scheduler_epoch",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"),
    )
    op.bulk_insert(epoch, [{"id": 1, "epoch": 0}])


def downgrade() -> None:
    op.drop_table("scheduler_epoch")
    op.drop_index("ix_idempotency_keys_user_created", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
