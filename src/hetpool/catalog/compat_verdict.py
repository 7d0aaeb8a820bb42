"""A compatibility verdict and its stable reasons (keys for rejection counts), shared by
the interpreter's modules (catalog/compat.py, compat_releases.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hetpool.core.compat_rows import Row

# Stable reasons (keys for rejection counts).
R_UNKNOWN_FRAMEWORK = "unknown framework"
R_NOT_ON_DEVICE = "framework not supported on device"
R_STACK_UNKNOWN = "software stack unknown"
R_STACK_MISMATCH = "software stack does not match device runtime"
R_NO_RELEASE = "no known framework release matches"
R_NO_TABLE = "no version table for this runtime"
R_DRIVER = "driver too old for framework"
R_DEVICE = "runtime release does not support the device"
R_CANN = "CANN version cannot run framework version"
R_RUNTIME = "runtime version cannot run framework version"
R_RUNTIME_UNKNOWN = "runtime version not in knowledge base"
R_NOT_INSTALLED = "framework not installed"
R_INSTALLED_MISMATCH = "installed framework version does not match"
R_BUILD_MISMATCH = "installed framework build does not match device"
R_EXTRA = "extra not supported"
R_EXTRA_NOT_INSTALLED = "extra not installed"
R_EXTRA_MISMATCH = "installed extra version does not match"


@dataclass(frozen=True)
class CompatVerdict:
    ok: bool
    reason: str = ""
    detail: str = ""
    notes: tuple[str, ...] = ()
    unknown: bool = False  # the tables do not cover this case (ok says whether the policy lets it through)
    rows: tuple[str, ...] = ()  # the rows the verdict rests on, each with its source
    nearest: tuple[str, ...] = ()  # for an unknown verdict: the nearest rows the tables do have

    @property
    def status(self) -> str:
        return "unknown" if self.unknown else "compatible" if self.ok else "incompatible"


def _fail(reason: str, detail: str, notes: Iterable[str] = ()) -> CompatVerdict:
    return CompatVerdict(False, reason, detail, tuple(notes))


def _unknown(reason: str, detail: str, nearest: Iterable[Row] = (), notes: Iterable[str] = ()) -> CompatVerdict:
    return CompatVerdict(False, reason, detail, tuple(notes), unknown=True, nearest=tuple(r.cite() for r in nearest))
