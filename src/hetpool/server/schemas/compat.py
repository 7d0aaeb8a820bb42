"""Bodies of the compatibility tables' endpoints: check one device + stack + framework,
the matrices, and the rows themselves with their sources."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hetpool.core.inventory import SoftwareStack
from hetpool.core.tasks import FrameworkRequest
from hetpool.server.schemas.common import ApiModel, RequestModel


class CompatCheckQuery(RequestModel):
    device: str = Field(description="a device model of the catalog (built-in or applied)")
    stack: SoftwareStack | None = Field(default=None, description="the node's driver, runtime and installed frameworks")
    framework: FrameworkRequest
    has_image: bool = Field(default=True, description="the task brings its own image: any matching release may run; false: the stack's installed one")


class CompatCheckResponse(ApiModel):
    status: Literal["compatible", "incompatible", "unknown"]
    ok: bool = Field(description="whether a pool like this would be used (unknown: per the policy)")
    reason: str = Field(description="why not, as a reason code; empty when compatible")
    detail: str
    notes: list[str]
    rows: list[str] = Field(description="the table rows the verdict rests on, each with its source and date")
    nearest: list[str] = Field(description="for an unknown verdict: the nearest rows the tables do have")
    policy: Literal["block", "allow"] = Field(description="what an unknown verdict does on this server")
    kb_version: str = Field(description="the newest date any row was checked against its source")


class DeviceMatrixRow(ApiModel):
    runtime: str = Field(description="the runtime release, e.g. 'CUDA 12.4 (driver 550.54.14)', 'CANN 8.0.0'")
    supported: bool = Field(description="whether this release supports the device's generation")
    why_not: str = ""
    frameworks: dict[str, list[str]] = Field(description="framework -> versions that run ('*': any)")


class FrameworkMatrixRow(ApiModel):
    device: str
    runtime: str = Field(description="the device's runtime family")
    status: Literal["compatible", "incompatible", "unknown"]
    releases: list[str] = Field(description="runtime releases on which a matching version runs, oldest first")
    detail: str = ""


class CompatMatrixResponse(ApiModel):
    device: str | None = None
    framework: str | None = None
    by_runtime: list[DeviceMatrixRow] = []
    by_device: list[FrameworkMatrixRow] = []
    kb_version: str


class CompatRowResponse(ApiModel):
    table: str
    values: dict = Field(description="the row's columns")
    source: str
    checked: str
    verified: bool
    note: str = ""
    origin: str = Field(description="built-in, a table file, or 'CompatibilityRule NAME'")
    replaces: list[str] = Field(default=[], description="for an operator's row: the built-in rows with the same key it replaces")
