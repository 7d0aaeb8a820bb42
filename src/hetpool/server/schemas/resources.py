"""Bodies of the Resources view (services/resources_view.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel


class ResourceTree(ApiModel):
    filters: dict[str, str | None] = Field(description="the filters applied: class, model, cluster, status, framework")
    framework: dict[str, Any] | None = Field(description="the parsed framework filter")
    totals: dict[str, int] = Field(description="devices per status, clusters and nodes shown")
    clusters: list[dict[str, Any]] = Field(description="clusters → nodes → devices, each with its profile and status")
    options: dict[str, list[str]] = Field(description="values each filter may take")
