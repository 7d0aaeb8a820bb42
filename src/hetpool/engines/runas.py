"""The tenant → run-as account mapping shared by the engines that run tasks as Unix accounts
(local and Slurm): backend_config `run_as_tenants: "ai-lab=hp-ai-lab,infra/data=hp-etl"`,
where the longest tenant-path prefix (whole path segments) wins, else `run_as_user`.

Each engine validates the account part its own way (local: an existing user; Slurm:
`user[:group]`, resolved again at submit), so this module only splits and matches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def split_tenant_map(text: str) -> list[tuple[str, str, str]]:
    """(entry, tenant prefix, account) per comma-separated `prefix=account` entry, each part
    stripped; prefix or account is "" when the entry is malformed (the caller names the error)."""
    entries = []
    for item in filter(None, (p.strip() for p in str(text or "").split(","))):
        prefix, sep, account = (s.strip() for s in item.partition("="))
        entries.append((item, prefix if sep else "", account if sep else ""))
    return entries


def covers(prefix: str, tenant: str) -> bool:
    """Whether tenant path `prefix` is `tenant` or one of its ancestors (whole segments)."""
    return tenant == prefix or tenant.startswith(prefix + "/")


def account_for_tenant(pairs: Iterable[tuple[str, T]], tenant: str) -> T | None:
    """The value of the longest prefix that covers `tenant` (the first of equal length), else None."""
    best: tuple[str, T] | None = None
    for prefix, value in pairs:
        if covers(prefix, tenant) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, value)
    return best[1] if best else None
