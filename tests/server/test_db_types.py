"""UTCDateTime, the one timestamp column type: aware UTC in, aware UTC out, on SQLite and
PostgreSQL, with the schema the migrations create (no migration of its own)."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta, timezone

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import DateTime, select, text

from hetpool.server.db import (  # noqa: F401 - every models module registers its tables on Base
    models_access,
    models_approvals,
    models_audit,
    models_cost,
    models_idempotency,
    models_leader,
    models_reclaim,
    models_web,
)
from hetpool.server.db.models import Base
from hetpool.server.db.models_leader import LeaderLeaseRow
from hetpool.server.db.types import UTCDateTime
from hetpool.server.services.context import ServiceContext

BEIJING = timezone(timedelta(hours=8))


def test_every_timestamp_column_is_a_utc_datetime() -> None:
    plain = [
        f"{table.name}.{column.name}"
        for table in Base.metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, DateTime) and not isinstance(column.type, UTCDateTime)
    ]
    assert not plain, f"timestamp columns without UTCDateTime: {plain}"
    assert any(isinstance(c.type, UTCDateTime) for t in Base.metadata.tables.values() for c in t.columns)


def test_the_models_match_the_migrated_schema_types_included(ctx: ServiceContext) -> None:
    with ctx.db.engine.connect() as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLite cannot reflect the expression index on users
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diffs == []


def test_timestamps_are_stored_as_instants_and_read_back_aware_utc(ctx: ServiceContext) -> None:
    noon_utc = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with ctx.db.transaction() as session:
        session.add(
            LeaderLeaseRow(
                group="t-types",
                holder="h",
                token=1,
                acquired_at=noon_utc.replace(tzinfo=None),  # naive: taken as UTC
                renewed_at=noon_utc.astimezone(BEIJING),  # 20:00 in Beijing: the same instant
                expires_at=noon_utc + timedelta(minutes=1),
            )
        )
    with ctx.db.transaction() as session:
        if ctx.db.dialect == "postgresql":  # the session's zone must not leak into what is read
            session.execute(text("SET LOCAL TIME ZONE 'Asia/Shanghai'"))
        row = session.get(LeaderLeaseRow, "t-types")
        for value in (row.acquired_at, row.renewed_at):
            assert value == noon_utc and value.utcoffset() == timedelta(0) and value.tzinfo is UTC
        # A bound value in another zone compares as an instant, on SQLite's text too.
        half_past_eight_beijing = datetime(2026, 3, 1, 20, 0, 30, tzinfo=BEIJING)
        found = session.execute(select(LeaderLeaseRow.group).where(LeaderLeaseRow.expires_at > half_past_eight_beijing)).scalars().all()
        assert found == ["t-types"]
        missed = session.execute(select(LeaderLeaseRow.group).where(LeaderLeaseRow.expires_at > half_past_eight_beijing + timedelta(minutes=1)))
        assert missed.scalars().all() == []
