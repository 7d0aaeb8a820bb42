"""ORM rows of the cost area: per-attempt accrual progress, the usage ledger, budget alerts.

The ledger has no foreign key to tasks: what was billed stays billed if a task row goes.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import BigInteger, Boolean, Date, Float, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base
from hetpool.server.db.types import UTCDateTime


class CostAccrualRow(Base):
    """How far one task attempt has been charged. `accrued_until` moves in the same
    transaction as the ledger rows it accounts for, so each instant is charged once."""

    __tablename__ = "cost_accruals"

    task_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster: Mapped[str | None] = mapped_column(String(64))
    backend: Mapped[str | None] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    accrued_until: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closed: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    # Every update checks and bumps it: of two passes that read the same row, the second
    # one's update matches nothing and its transaction (with its ledger rows) rolls back.
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    __mapper_args__ = {"version_id_col": version}


class CostLedgerRow(Base):
    """Usage of one worker of one attempt on one UTC day (in one currency). The open
    day's row grows as the attempt runs; a closed attempt's rows never change again."""

    __tablename__ = "cost_ledger"
    __table_args__ = (
        UniqueConstraint("task_id", "attempt", "rank", "day", "currency", name="uq_cost_ledger_worker_day"),
        Index("ix_cost_ledger_day_tenant", "day", "tenant"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(32), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    day: Mapped[date] = mapped_column(Date)
    interval_start: Mapped[datetime] = mapped_column(UTCDateTime())
    interval_end: Mapped[datetime] = mapped_column(UTCDateTime())
    tenant: Mapped[str] = mapped_column(String(200))
    org: Mapped[str] = mapped_column(String(200))
    team: Mapped[str] = mapped_column(String(200))
    project: Mapped[str] = mapped_column(String(200))
    env: Mapped[str] = mapped_column(String(16))
    task_type: Mapped[str] = mapped_column(String(32))
    pool: Mapped[str] = mapped_column(String(200))
    cluster: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(200))
    devices: Mapped[float] = mapped_column(Float)  # whole-device equivalents held
    cpu: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)
    device_hours: Mapped[float] = mapped_column(Float)
    cpu_core_hours: Mapped[float] = mapped_column(Float)
    memory_gib_hours: Mapped[float] = mapped_column(Float)
    cost_micros: Mapped[int] = mapped_column(BigInteger)  # 1e-6 of the currency: sums are exact
    currency: Mapped[str] = mapped_column(String(8))


class BudgetAlertRow(Base):
    """An alert raised for a budget in one period at one fraction of its amount (once)."""

    __tablename__ = "cost_budget_alerts"
    __table_args__ = (UniqueConstraint("budget", "period", "threshold", name="uq_cost_budget_alert"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    budget: Mapped[str] = mapped_column(String(200), index=True)
    tenant: Mapped[str] = mapped_column(String(200))
    period: Mapped[str] = mapped_column(String(16))
    threshold: Mapped[float] = mapped_column(Float)
    amount: Mapped[float] = mapped_column(Float)
    spent_micros: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(8))
    raised_at: Mapped[datetime] = mapped_column(UTCDateTime())
