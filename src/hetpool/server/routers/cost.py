"""Placeholder router for the governance area 'cost' (filled in by its own work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1", tags=["cost"])
