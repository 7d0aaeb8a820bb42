"""Bodies of the catalog's compatibility check and of its table of open models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hetpool.core.tasks import FrameworkRequest
from hetpool.server.schemas.common import ApiModel, RequestModel


class CompatQuery(RequestModel):
    pool: str
    framework: FrameworkRequest
    has_image: bool = False


class CompatResponse(ApiModel):
    status: Literal["compatible", "incompatible", "unknown"] = Field(description="unknown: the compatibility tables do not cover the case")
    ok: bool = Field(description="whether the pool would be used (an unknown verdict: per the server's compat_unknown policy)")
    reason: str | None = Field(description="why not, as a reason code")
    detail: str | None
    notes: list[str]
    rows: list[str] = Field(default=[], description="the table rows the verdict rests on, each with its source")
    nearest: list[str] = Field(default=[], description="for an unknown verdict: the nearest rows the tables do have")
    kb_version: str = Field(description="version of the compatibility knowledge base that answered")


class OpenModelResponse(ApiModel):
    """A model of the built-in table (catalog/data/models.yaml) that goal.model may name."""

    name: str = Field(description="the id goal.model takes, e.g. llama3.1-8b")
    display_name: str = Field(description="as the publisher writes it")
    params_b: float = Field(description="total parameters, billions")
    architecture: Literal["decoder", "encoder", "cnn"]
