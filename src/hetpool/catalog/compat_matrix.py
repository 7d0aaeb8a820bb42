"""The tables people otherwise look up by hand, computed from the same rows the scheduler
checks against: what a device model can run per runtime release, and which device models
(on which runtime releases) can run a framework version.

A runtime release here is one the tables name: a CUDA toolkit (run on its minimum driver),
a CANN / ROCm / DTK / XRE / CNToolkit release.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.compat_runtime import FAMILY_LABEL, device_verdict, known_runtime_versions
from hetpool.catalog.versions import ints
from hetpool.core.inventory import DeviceModelSpec, RuntimeName, RuntimeVersion, SoftwareStack
from hetpool.core.tasks import FrameworkRequest


@dataclass(frozen=True)
class RuntimeRelease:
    family: str
    release: str  # CUDA toolkit X.Y, or the runtime's release
    stack: SoftwareStack | None

    @property
    def label(self) -> str:
        if self.family == "cuda":
            return f"CUDA {self.release} (driver {self.stack.driver})" if self.stack else f"CUDA {self.release}"
        return f"{FAMILY_LABEL.get(self.family, self.family)} {self.release}" if self.release else "any"


@dataclass
class DeviceRow:
    runtime: RuntimeRelease
    supported: bool
    why_not: str = ""
    frameworks: dict[str, list[str]] = field(default_factory=dict)


def runtime_releases(kb: CompatibilityKB, family: str) -> list[RuntimeRelease]:
    """Every release of `family` the tables name, oldest first, each as a node stack."""
    if family in ("none", "doca"):
        return [RuntimeRelease(family, "", None)]
    if family == "cuda":
        rows = sorted(kb.tables.rows("cuda-driver"), key=lambda r: ints(str(r.get("cuda"))))
        return [RuntimeRelease("cuda", str(r.get("cuda")), SoftwareStack(driver=str(r.get("min_driver")))) for r in rows]
    name = RuntimeName(family)
    return [RuntimeRelease(family, v, SoftwareStack(runtime=RuntimeVersion(name=name, version=v))) for v in known_runtime_versions(kb.tables, family)]


def device_matrix(kb: CompatibilityKB, model: DeviceModelSpec) -> list[DeviceRow]:
    """Per runtime release: whether it supports the device, and the framework versions it runs there."""
    out = []
    for rr in runtime_releases(kb, model.runtime.value):
        version = rr.stack.runtime.version if rr.stack and rr.stack.runtime else ""
        driver = rr.stack.driver if rr.stack else ""
        ok, why, _ = device_verdict(kb.tables, kb.cuda, rr.family, model.generation, version, driver)
        frameworks = {fw: vs for fw, vs in kb.supported_frameworks(model, rr.stack).items() if vs} if ok else {}
        out.append(DeviceRow(rr, ok, why, frameworks))
    return out


@dataclass
class FrameworkRow:
    model: str
    family: str
    releases: list[str]  # runtime releases on which some matching version runs, oldest first
    status: str  # compatible (on some release) / unknown / incompatible
    detail: str = ""


def framework_matrix(kb: CompatibilityKB, models: list[DeviceModelSpec], request: FrameworkRequest) -> list[FrameworkRow]:
    """Per device model: the runtime releases that run `request` (an image brings the framework)."""
    out = []
    for model in models:
        releases, verdicts = [], []
        for rr in runtime_releases(kb, model.runtime.value):
            verdict = kb.check(model, rr.stack, request, has_image=True)
            verdicts.append(verdict)
            if verdict.ok and not verdict.unknown:
                releases.append(rr.label)
        if releases:
            out.append(FrameworkRow(model.name, model.runtime.value, releases, "compatible"))
            continue
        last = verdicts[-1] if verdicts else None
        status = "unknown" if last is not None and last.unknown else "incompatible"
        out.append(FrameworkRow(model.name, model.runtime.value, [], status, last.detail if last else ""))
    return out


def parse_framework(text: str) -> FrameworkRequest:
    """`pytorch==2.8`, `pytorch>=2.3,<2.6`, `vllm==0.8.5`, `jax` → a request (the spec as written)."""
    text = text.strip()
    cut = next((i for i, ch in enumerate(text) if ch in "=<>!~ "), len(text))
    name, spec = text[:cut].strip(), text[cut:].strip()
    return FrameworkRequest(name=name, version=spec)


def parse_stack(parts: list[str]) -> SoftwareStack | None:
    """`driver=550.54.15`, `cann=8.0.RC2`, `rocm=6.2`, `torch=2.4.0` (installed) → a stack.
    Keys: driver, a runtime name (cuda, cann, rocm, dtk, neuware, xre, doca), or an installed package."""
    if not parts:
        return None
    values: dict[str, str] = {}
    for part in parts:
        for item in part.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"--stack: {item!r} is not key=value (driver=550.54.15, cann=8.0.RC2, rocm=6.2, torch=2.4.0)")
            values[key.strip().lower()] = value.strip()
    runtimes = {r.value for r in RuntimeName} - {"none"}
    driver = values.pop("driver", "")
    runtime = next(((k, values.pop(k)) for k in list(values) if k in runtimes), None)
    rt = RuntimeVersion(name=RuntimeName(runtime[0]), version=runtime[1]) if runtime else None
    return SoftwareStack(driver=driver, runtime=rt, frameworks=values)
