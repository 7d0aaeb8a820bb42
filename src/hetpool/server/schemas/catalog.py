"""Bodies of the catalog's compatibility check."""

from __future__ import annotations

from pydantic import Field

from hetpool.core.tasks import FrameworkRequest
from hetpool.server.schemas.common import ApiModel, RequestModel


class CompatQuery(RequestModel):
    pool: str
    framework: FrameworkRequest
    has_image: bool = False


class CompatResponse(ApiModel):
    ok: bool
    reason: str | None = Field(description="why not, as a reason code")
    detail: str | None
    notes: list[str]
    kb_version: str = Field(description="version of the compatibility knowledge base that answered")
