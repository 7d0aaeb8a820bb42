"""users.ui_language: the dashboard language each user chose (merges the 0005 branches)

Revision ID: 20261130_0006
Revises: 20261130_0005a, 20261130_0005b, 20261130_0005c, 20261130_0005d
Create Date: 2026-11-30 23:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0006"
down_revision = ("20261130_0005a", "20261130_0005b", "20261130_0005c", "20261130_0005d")
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("ui_language", sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("ui_language")
