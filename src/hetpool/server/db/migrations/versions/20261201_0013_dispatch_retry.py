"""tasks.dispatch_*: the dispatcher's retry state for transient engine errors (issue 17)

Revision ID: 20261201_0013_dispatch_retry
Revises: 20261201_0012_audit_pending
Create Date: 2026-12-01 22:10:00

An admitted task whose engine could not be reached stays admitted and is tried again after
an exponential backoff with jitter (server/workers/dispatcher.py). The state lives on the
row, not in the process, so a restarted or newly elected dispatcher keeps the backoff
instead of hammering an engine that is down.
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0013_dispatch_retry"
down_revision = "20261201_0012_audit_pending"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("dispatch_failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("dispatch_unclassified", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("dispatch_retry_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("dispatch_retry_at")
        batch.drop_column("dispatch_unclassified")
        batch.drop_column("dispatch_failures")
