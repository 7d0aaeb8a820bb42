"""Slurm GRES text and how a GRES maps onto a catalog device model — one reading for the
inventory (what a node has) and for the job script (what a worker asks for)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import unknown_model

# GRES that share a GPU already counted under gpu (MPS percentages, shards), never devices.
SHARED_GRES = {"mps", "shard"}
NULL = {"", "(null)", "N/A", "none", "(none)"}
_COUNT_RE = re.compile(r"^(\d+)([KMGTP]?)$", re.IGNORECASE)
_MULTIPLIER = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(frozen=True)
class GresEntry:
    name: str  # gpu, npu, mps …
    type: str  # a100, 910b3 … ("" when the site does not type its GRES)
    count: int


def split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: `gpu:a100:2(S:0,2),npu:8` -> two entries."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _parse_count(text: str) -> int | None:
    match = _COUNT_RE.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)) * _MULTIPLIER[match.group(2).upper()]


def parse_gres(text: str) -> list[GresEntry]:
    """Slurm's Gres / GresUsed text -> entries.

    `gpu:a100:4,npu:910b:8(S:0-1)` (socket suffix), `gpu:a100:2(IDX:0-1),npu:0` (GresUsed
    with indices; untyped zero entries for the other GRES names), `gpu:4` (no type), `gpu`
    (count 1), `gpu:a100:no_consume:2`, `mps:400`, `(null)`. Counts may carry K/M/G (x1024).
    """
    text = (text or "").strip()
    if text in NULL:
        return []
    entries: list[GresEntry] = []
    for item in split_top_level(text):
        item = re.sub(r"\(.*\)$", "", item).strip()  # (S:0-1), (IDX:0-1), (IDX:N/A)
        parts = [p for p in item.split(":") if p and p.lower() != "no_consume"]
        if not parts:
            continue
        name, rest = parts[0], parts[1:]
        count = _parse_count(rest[-1]) if rest else None
        if count is None:
            count = 1  # "gpu" or "gpu:a100": one of them
        else:
            rest = rest[:-1]
        entries.append(GresEntry(name=name, type=rest[0] if rest else "", count=count))
    return entries


def model_for_gres(gres_name: str, gres_type: str, catalog: DeviceCatalog, overrides: dict[str, str] | None = None) -> str | None:
    """Catalog model for Slurm GRES `gpu:a100` (name `gpu`, type `a100`), or None.

    `overrides` ("gpu:a100" -> "nvidia-a100-80g") wins; then a model whose `slurm_gres`
    equals "name:type" (the first in catalog order when several share it, e.g. the 40 GB
    and 80 GB A100); then a product-name match of the type ("910B3" -> ascend-910b3).
    """
    key = f"{gres_name}:{gres_type}".lower()
    if overrides and key in overrides:
        return overrides[key]
    if not gres_type:
        return None
    by_product = catalog.match_product(gres_type)
    sharing = [m for m in catalog.all() if m.slurm_gres.lower() == key]
    if by_product is not None and (not sharing or by_product in sharing or by_product.slurm_gres.split(":")[0] == gres_name.lower()):
        return by_product.name
    return sharing[0].name if sharing else None


def gres_model(name: str, gres_type: str, catalog: DeviceCatalog, overrides: dict[str, str]) -> str:
    """The model the inventory reports for GRES `name:type`: the catalog's, else the
    `unknown-<name>-<type>` placeholder (never dropped)."""
    return model_for_gres(name, gres_type, catalog, overrides) or unknown_model(name, gres_type)
