"""preemption: a task may be asked to give its devices back

Revision ID: 20261130_0002
Revises: 20261130_0001
Create Date: 2026-11-30 14:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0002"
down_revision = "20261130_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.add_column(sa.Column("preempt_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.drop_column("preemptions")
        batch_op.drop_column("preempt_reason")
