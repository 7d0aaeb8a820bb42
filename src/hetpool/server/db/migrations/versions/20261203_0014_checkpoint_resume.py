"""tasks: graceful stop and resume of checkpointable tasks (core/checkpoint.py)

Revision ID: 20261203_0014_checkpoint_resume
Revises: 20261201_0013_dispatch_retry
Create Date: 2026-12-03 11:20:00

`stop_signalled_at`: when the reconciler sent a checkpointable task's stop signal; the job
is killed once its grace has passed since then. The moment lives on the row, so a
restarted or newly elected reconciler keeps the grace instead of signalling again or
killing at once. `resume_from`: the attempt the next one resumes from (NULL: starts
afresh). `progress_s`: seconds run by earlier attempts that checkpointed, counted as done.
"""

import sqlalchemy as sa
from alembic import op

revision = "20261203_0014_checkpoint_resume"
down_revision = "20261201_0013_dispatch_retry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("stop_signalled_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("resume_from", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("progress_s", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("progress_s")
        batch.drop_column("resume_from")
        batch.drop_column("stop_signalled_at")
