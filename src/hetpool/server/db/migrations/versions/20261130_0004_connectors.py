"""connectors: node status from Slurm / Kubernetes / Ray syncs, last sync per cluster

Revision ID: 20261130_0004
Revises: 20261130_0003
Create Date: 2026-11-30 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0004"
down_revision = "20261130_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_status") as batch:
        batch.add_column(sa.Column("source", sa.String(length=16), nullable=False, server_default="agent"))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("used", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("taints", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("partitions", sa.JSON(), nullable=True))
    op.create_table(
        "connector_sync",
        sa.Column("cluster", sa.String(length=200), nullable=False),
        sa.Column("connector", sa.String(length=16), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("cluster"),
    )


def downgrade() -> None:
    op.drop_table("connector_sync")
    with op.batch_alter_table("node_status") as batch:
        for column in ("partitions", "taints", "labels", "used", "reason", "source"):
            batch.drop_column(column)
