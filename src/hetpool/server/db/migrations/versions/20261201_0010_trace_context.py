"""tasks.trace_parent: the W3C traceparent of the span that submitted the task (server/tracing.py)

Revision ID: 20261201_0010_trace_context
Revises: 20261201_0009
Create Date: 2026-12-01 20:00:00

The scheduler's admit, the dispatcher's dispatch and the engine call start their spans as
children of this context, so one task's path forms one trace. Empty while tracing is off
and for tasks submitted before it was turned on.
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0010_trace_context"
down_revision = "20261201_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        # 55 characters (version-traceid-spanid-flags); room for a future version's longer form.
        batch.add_column(sa.Column("trace_parent", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("trace_parent")
