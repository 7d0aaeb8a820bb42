"""Tenants: an org → team → project tree, addressed by path ("ai-lab/nlp/llm-sft")."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from hetpool.core.base import ObjectSpec, ShortText
from hetpool.core.limits import bounded

_SEGMENT = r"[a-z0-9]([a-z0-9_-]{0,38}[a-z0-9])?"
TENANT_PATH_RE = re.compile(rf"^{_SEGMENT}(/{_SEGMENT}){{0,2}}$")
TENANT_LEVELS = ("org", "team", "project")


class Environment(StrEnum):
    DEV = "dev"
    TEST = "test"
    PROD = "prod"


def validate_tenant_path(value: str) -> str:
    value = value.strip().strip("/")
    if not TENANT_PATH_RE.match(value):
        raise ValueError("tenant must be a path 'org', 'org/team' or 'org/team/project' of lower-case letters, digits, '-' and '_'")
    return value


def tenant_ancestors(path: str) -> list[str]:
    """'a/b/c' -> ['a', 'a/b', 'a/b/c']."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def tenant_parent(path: str) -> str | None:
    return path.rsplit("/", 1)[0] if "/" in path else None


class TenantSpec(ObjectSpec):
    kind: Literal["Tenant"] = "Tenant"
    name: str = Field(description="path: org, org/team or org/team/project")
    display_name: ShortText = ""
    environments: list[Environment] = [Environment.DEV, Environment.TEST, Environment.PROD]
    weight: bounded(gt=0, le=1000) = Field(default=1.0, description="fair-share weight among siblings")

    @field_validator("name")
    @classmethod
    def _path(cls, value: str) -> str:
        return validate_tenant_path(value)

    @property
    def level(self) -> str:
        return TENANT_LEVELS[self.name.count("/")]

    @property
    def parent(self) -> str | None:
        return tenant_parent(self.name)
