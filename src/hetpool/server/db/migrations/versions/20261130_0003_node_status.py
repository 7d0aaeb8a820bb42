"""node status: heartbeats from host agents, node liveness and device health

Revision ID: 20261130_0003
Revises: 20261130_0002
Create Date: 2026-11-30 16:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0003"
down_revision = "20261130_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_status",
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_version", sa.String(length=32), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("node"),
    )


def downgrade() -> None:
    op.drop_table("node_status")
