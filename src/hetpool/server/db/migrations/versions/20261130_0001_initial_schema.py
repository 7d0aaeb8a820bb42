"""initial schema

Revision ID: 20261130_0001
Revises:
Create Date: 2026-11-30 14:03:06.923153
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One function per table (or pair), in the order the foreign keys need.
    _create_audit_events()
    _create_inventory_objects()
    _create_tasks()
    _create_users_and_tokens()
    _create_placements()


def _create_audit_events() -> None:
    """The hash-chained audit trail."""
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object_kind", sa.String(length=32), nullable=False),
        sa.Column("object_id", sa.String(length=200), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_action"), ["action"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_actor"), ["actor"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_object_id"), ["object_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_ts"), ["ts"], unique=False)


def _create_inventory_objects() -> None:
    """Declarative inventory specs (clusters, nodes, pools …)."""
    op.create_table(
        "inventory_objects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("cluster", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=64), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "name", name="uq_inventory_kind_name"),
    )
    with op.batch_alter_table("inventory_objects", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_inventory_objects_cluster"), ["cluster"], unique=False)
        batch_op.create_index(batch_op.f("ix_inventory_objects_kind"), ["kind"], unique=False)


def _create_tasks() -> None:
    """Tasks and their state."""
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("env", sa.String(length=16), nullable=False),
        sa.Column("task_type", sa.String(length=32), nullable=False),
        sa.Column("template", sa.String(length=64), nullable=True),
        sa.Column("priority", sa.String(length=16), nullable=False),
        sa.Column("priority_rank", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("cluster", sa.String(length=64), nullable=True),
        sa.Column("job_id", sa.String(length=200), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("fallback_used", sa.Boolean(), nullable=False),
        sa.Column("pending_explanation", sa.JSON(), nullable=True),
        sa.Column("placement_attempts", sa.JSON(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_name"), ["name"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_state"), ["state"], unique=False)
        batch_op.create_index("ix_tasks_state_priority", ["state", "priority_rank"], unique=False)
        batch_op.create_index(batch_op.f("ix_tasks_tenant"), ["tenant"], unique=False)


def _create_users_and_tokens() -> None:
    """Users and their API tokens."""
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)


def _create_placements() -> None:
    """Where each admitted task's workers run."""
    op.create_table(
        "placements",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("pool", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("device_indices", sa.JSON(), nullable=False),
        sa.Column("device_fraction", sa.Float(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "attempt", "rank", name="uq_placement_worker"),
    )
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_placements_node"), ["node"], unique=False)
        batch_op.create_index(batch_op.f("ix_placements_pool"), ["pool"], unique=False)
        batch_op.create_index(batch_op.f("ix_placements_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    # ### commands auto generated by Alembic - please adjust! ###
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_placements_task_id"))
        batch_op.drop_index(batch_op.f("ix_placements_pool"))
        batch_op.drop_index(batch_op.f("ix_placements_node"))

    op.drop_table("placements")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    op.drop_table("users")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tasks_tenant"))
        batch_op.drop_index("ix_tasks_state_priority")
        batch_op.drop_index(batch_op.f("ix_tasks_state"))
        batch_op.drop_index(batch_op.f("ix_tasks_name"))

    op.drop_table("tasks")
    with op.batch_alter_table("inventory_objects", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_inventory_objects_kind"))
        batch_op.drop_index(batch_op.f("ix_inventory_objects_cluster"))

    op.drop_table("inventory_objects")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_ts"))
        batch_op.drop_index(batch_op.f("ix_audit_events_object_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_actor"))
        batch_op.drop_index(batch_op.f("ix_audit_events_action"))

    op.drop_table("audit_events")
    # ### end Alembic commands ###
