"""Version arithmetic the compatibility KB needs: PEP 440 versions and their release
series, CANN's own scheme (8.0.RC1 < 8.0.0), and the build a wheel's local label names
('2.4.1+cu121'). Pure functions, shared with the agent's framework probe."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def parse_version(text: str) -> Version | None:
    try:
        return Version(text.strip())
    except (InvalidVersion, AttributeError):
        return None


def public(v: Version) -> Version:
    return Version(v.public)


def prefix_match(key: str, version: str) -> bool:
    """'2.4' matches 2.4.1; '8.5' matches 8.5.0 (component boundary, not string prefix)."""
    k, v = ints(key), ints(version)
    return bool(k) and v[: len(k)] == k


def find_row(rows: Mapping[str, Any], version: str) -> tuple[str, Mapping[str, Any]] | None:
    """The release row for a concrete version: listed in `releases`, else longest key prefix."""
    v = parse_version(version)
    for key, row in rows.items():
        if v is not None and any(parse_version(r) == public(v) for r in row.get("releases", [])):
            return key, row
    for key in sorted(rows, key=lambda k: -len(ints(k))):
        if prefix_match(key, version):
            return key, rows[key]
    return None


_CANN_RE = re.compile(r"^(\d+)\.(\d+)\.(?:rc(\d+)|(\d+))(?:\.(.*))?$", re.IGNORECASE)


def cann_version_key(s: str) -> tuple:
    """Sort key for CANN versions: 8.0.RC1 < 8.0.RC2 < 8.0.RC3 < 8.0.0 < 8.0.1 < 8.1.RC1.

    Builds like "8.0.RC2.alpha002" / "8.0.0.beta1" sort just before their base version.
    """
    m = _CANN_RE.match(s.strip())
    if not m:
        nums = (*ints(s), 0, 0)
        return (_cann_major(nums[0]), nums[1], 1, nums[2] if len(nums) > 2 else 0, (1, 0, 0))
    major, minor, rc, patch, tail = m.groups()
    stage, n = (0, int(rc)) if rc is not None else (1, int(patch))
    if not tail:
        tail_key = (1, 0, 0)
    elif tail.isdigit():
        tail_key = (2, int(tail), 0)
    else:
        t = tail.lower()
        kind = 0 if t.startswith("alpha") else 1 if t.startswith("beta") else 2
        tail_key = (0, kind, (ints(t) or (0,))[0])
    return (_cann_major(int(major)), int(minor), stage, n, tail_key)


def _cann_major(major: int) -> int:
    # CANN's 2020 releases were numbered 20.0–20.2; 3.x followed them. Sort 20.x as 2.x.
    return 2 if major == 20 else major


def cann_base(key: tuple) -> tuple:
    return (*key[:4], (1, 0, 0))


def cann_matches(entry: str, node: str) -> bool:
    if len(ints(entry)) == 2 and "rc" not in entry.lower():
        return prefix_match(entry, node)
    return cann_base(cann_version_key(entry)) == cann_base(cann_version_key(node))


def local_build(version: str) -> tuple[str, str] | None:
    """The build a local label names: '2.4.1+cu121' -> ('cuda', '12.1'), '+rocm6.1', '+cpu'."""
    v = parse_version(version)
    if v is None or not v.local:
        return None
    local = v.local.lower()
    if m := re.fullmatch(r"cu(\d\d)(\d+)", local):
        return "cuda", f"{int(m.group(1))}.{int(m.group(2))}"
    if m := re.fullmatch(r"rocm(\d+(?:\.\d+)*)", local):
        return "rocm", m.group(1)
    if local == "cpu":
        return "none", ""
    return None


def build_fits(build_family: str, family: str) -> bool:
    # Stock CPU wheels are what torch_npu / torch_mlu / the XPU plugin run on top of.
    if build_family == "none":
        return family not in ("cuda", "rocm", "dtk")
    return build_family == family or (build_family == "rocm" and family == "dtk")
