"""ORM rows. Real columns for what is filtered or aggregated; JSON text for spec payloads."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hetpool.server.db.types import UTCDateTime


class Base(DeclarativeBase):
    pass


class InventoryObjectRow(Base):
    """One applied inventory object (DeviceModel, Cluster, Node, Pool, Tenant, TaskTemplate)."""

    __tablename__ = "inventory_objects"
    __table_args__ = (UniqueConstraint("kind", "name", name="uq_inventory_kind_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(200))
    cluster: Mapped[str | None] = mapped_column(String(64), index=True)
    model: Mapped[str | None] = mapped_column(String(64))
    spec: Mapped[dict] = mapped_column(JSON)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Nodes only: the agent user that may report for it (the user named by spec.agent,
    # pinned by id so a later user of the same name inherits nothing; migration 0008c).
    agent_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True, index=True)


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_state_priority", "state", "priority_rank"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    tenant: Mapped[str] = mapped_column(String(200), index=True)
    env: Mapped[str] = mapped_column(String(16))
    task_type: Mapped[str] = mapped_column(String(32))
    template: Mapped[str | None] = mapped_column(String(64))
    priority: Mapped[str] = mapped_column(String(16))
    priority_rank: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), index=True)
    spec: Mapped[dict] = mapped_column(JSON)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    admitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    backend: Mapped[str | None] = mapped_column(String(32))
    cluster: Mapped[str | None] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(200))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text, default="")
    fallback_used: Mapped[bool] = mapped_column(Boolean, default=False)
    pending_explanation: Mapped[dict | None] = mapped_column(JSON)
    placement_attempts: Mapped[list | None] = mapped_column(JSON)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Set when a higher-priority task needs this one's devices; the reconciler stops the
    # backend job and requeues the task.
    preempt_reason: Mapped[str | None] = mapped_column(Text)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    # W3C traceparent of the submit span (server/tracing.py): later steps join the task's trace.
    trace_parent: Mapped[str | None] = mapped_column(String(64))
    # Transient engine errors of this admission's dispatch (server/workers/dispatcher.py): tries
    # failed in a row, how many of those in a row were unclassified, and the earliest next try.
    dispatch_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dispatch_unclassified: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dispatch_retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Graceful stop of a checkpointable task (core/checkpoint.py, workers/reconciler.py): when
    # its stop signal went out, the attempt the next one resumes from, and the seconds run by
    # earlier attempts that checkpointed (counted as done work by the scheduler).
    stop_signalled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    resume_from: Mapped[int | None] = mapped_column(Integer)
    progress_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class PlacementRow(Base):
    """One worker of one attempt of a task: where it runs and what it holds."""

    __tablename__ = "placements"
    __table_args__ = (UniqueConstraint("task_id", "attempt", "rank", name="uq_placement_worker"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(200), index=True)
    pool: Mapped[str] = mapped_column(String(200), index=True)
    model: Mapped[str] = mapped_column(String(64))
    device_indices: Mapped[list] = mapped_column(JSON)
    device_fraction: Mapped[float] = mapped_column(Float)
    cpu: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    price_per_hour: Mapped[float] = mapped_column(Float, default=0.0)


class AuditEventRow(Base):
    """Append-only, hash-chained record of every change."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(64), index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    object_kind: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(200), index=True)
    before: Mapped[dict | None] = mapped_column(JSON)
    after: Mapped[dict | None] = mapped_column(JSON)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # Names are unique ignoring case (migration 20261201_0008e): `Admin` is not a second `admin`.
    __table_args__ = (Index("uq_users_name_lower", text("lower(name)"), unique=True),)
    role: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ui_language: Mapped[str | None] = mapped_column(String(8), nullable=True)  # the dashboard language the user chose
    # Who created the user ('' unknown or the system): approvals refuse a decider linked to the requester this way.
    created_by: Mapped[str] = mapped_column(String(64), default="", server_default="")


class ApiTokenRow(Base):
    """An API token, stored only as its SHA-256 (tokens are random, high-entropy)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Who issued it: someone who issued a user's token could act as that user (approvals).
    created_by: Mapped[str] = mapped_column(String(64), default="", server_default="")


class NodeStatusRow(Base):
    """What a node's agent last reported: liveness and per-device health and use."""

    __tablename__ = "node_status"

    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # ready | offline
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    agent_version: Mapped[str] = mapped_column(String(32))
    devices: Mapped[list] = mapped_column(JSON)  # [{index, model, health, utilisation_pct, memory_used_mib}]
    # Who reports on the node: "agent" (heartbeats) or a connector ("slurm", "kubernetes", "ray").
    source: Mapped[str] = mapped_column(String(16), default="agent", server_default="agent")
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")  # why not ready (Slurm Reason, k8s condition)
    # Accelerators in use by the engine's own workloads, per catalog model (connectors only).
    used: Mapped[dict | None] = mapped_column(JSON, default=dict)
    labels: Mapped[dict | None] = mapped_column(JSON, default=dict)  # normalised hetpool.io/... labels and engine labels
    taints: Mapped[list | None] = mapped_column(JSON, default=list)
    partitions: Mapped[list | None] = mapped_column(JSON, default=list)


class ConnectorSyncRow(Base):
    """The last inventory sync of a cluster whose backend has a connector."""

    __tablename__ = "connector_sync"

    cluster: Mapped[str] = mapped_column(String(200), primary_key=True)
    connector: Mapped[str] = mapped_column(String(16))
    last_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    ok: Mapped[bool] = mapped_column(default=False)
    error: Mapped[str] = mapped_column(Text, default="")
    summary: Mapped[dict] = mapped_column(JSON, default=dict)  # counts, sees, warnings
