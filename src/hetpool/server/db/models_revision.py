"""The inventory revision (migration 20261201_0011)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer
from sqlalchemy.orm import Mapped, mapped_column

from hetpool.server.db.models import Base


class InventoryRevisionRow(Base):
    """One row (id 1): bumped by database triggers on every write to inventory_objects,
    so it names one state of the inventory and never repeats a value."""

    __tablename__ = "inventory_revision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger, default=0)
