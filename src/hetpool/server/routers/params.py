"""Integer query and path parameters, bounded so the database never sees a value its
column cannot hold: PostgreSQL answers "integer out of range" (a 500) for an id over
2**31 - 1 in an INTEGER column, and Python's drivers refuse anything over 2**63 - 1 on
either database. Out of range is a 422 naming the parameter and the limit."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

MAX_ROW_ID = 2**31 - 1  # the id columns are INTEGER (32-bit on PostgreSQL)
# Row offsets (SQL OFFSET) and byte offsets into a task's log: far beyond any real table
# or log, and within what every file system seeks to (ext4 refuses offsets past 16 TiB).
MAX_OFFSET = 2**40

AfterId = Annotated[int, Query(ge=0, le=MAX_ROW_ID, description="only events with a larger id")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
TokenId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
