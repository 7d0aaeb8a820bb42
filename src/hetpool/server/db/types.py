"""Column types shared by the models.

`UTCDateTime` is the one timestamp column type. Every datetime the server writes is an
instant in UTC, and every one it reads back is an aware UTC datetime, on SQLite and
PostgreSQL alike — so services compare and subtract timestamps without converting them.

Why a type: SQLite has no time zone type. SQLAlchemy's DateTime stores the wall-clock
text without the offset and reads it back naive, while PostgreSQL's TIMESTAMPTZ reads it
back aware (in the session's zone). Writing UTC and tagging what comes back keeps both
the same. The column stays `DateTime(timezone=True)` in the schema: no migration.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime
from sqlalchemy.types import TypeDecorator

from hetpool.core.clock import as_utc


class UTCDateTime(TypeDecorator):
    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        return as_utc(value)  # a naive value is taken to be UTC already

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return as_utc(value)  # SQLite: naive; PostgreSQL: in the session's zone
