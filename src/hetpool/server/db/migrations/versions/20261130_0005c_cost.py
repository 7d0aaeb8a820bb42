"""cost: per-attempt accrual progress, the usage ledger, budget alerts

Revision ID: 20261130_0005c
Revises: 20261130_0004
Create Date: 2026-11-30 18:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261130_0005c"
down_revision = "20261130_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cost_accruals",
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("cluster", sa.String(length=64), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("accrued_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "attempt"),
    )
    op.create_index("ix_cost_accruals_closed", "cost_accruals", ["closed"])
    op.create_table(
        "cost_ledger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("interval_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("interval_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("org", sa.String(length=200), nullable=False),
        sa.Column("team", sa.String(length=200), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("env", sa.String(length=16), nullable=False),
        sa.Column("task_type", sa.String(length=32), nullable=False),
        sa.Column("pool", sa.String(length=200), nullable=False),
        sa.Column("cluster", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("devices", sa.Float(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("device_hours", sa.Float(), nullable=False),
        sa.Column("cpu_core_hours", sa.Float(), nullable=False),
        sa.Column("memory_gib_hours", sa.Float(), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "attempt", "rank", "day", "currency", name="uq_cost_ledger_worker_day"),
    )
    op.create_index("ix_cost_ledger_task_id", "cost_ledger", ["task_id"])
    op.create_index("ix_cost_ledger_day_tenant", "cost_ledger", ["day", "tenant"])
    op.create_table(
        "cost_budget_alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("budget", sa.String(length=200), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.Column("spent_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("budget", "period", "threshold", name="uq_cost_budget_alert"),
    )
    op.create_index("ix_cost_budget_alerts_budget", "cost_budget_alerts", ["budget"])


def downgrade() -> None:
    op.drop_table("cost_budget_alerts")
    op.drop_table("cost_ledger")
    op.drop_table("cost_accruals")
