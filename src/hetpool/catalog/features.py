"""Effective features of a device *with* its software stack.

The catalog says what a chip can do (devices.yaml `features`); operators.yaml says which
of those need the right runtime and framework versions to be usable. A pool's effective
features are what a task's `features:` requirement is checked against, and the features
its chip has but its stack does not enable are reported with the reason (`hetpool
describe pool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from hetpool.core.inventory import DeviceModelSpec, SoftwareStack

# Framework names as stacks spell them; `pytorch` is installed as `torch`.
_FRAMEWORK_KEYS = {"pytorch": ("pytorch", "torch"), "torch_npu": ("torch_npu", "torch-npu"), "vllm": ("vllm", "vllm-ascend", "vllm_ascend")}


@dataclass(frozen=True)
class FeatureReport:
    features: frozenset[str]
    missing: dict[str, str] = field(default_factory=dict)  # feature -> why the stack does not enable it
    notes: dict[str, str] = field(default_factory=dict)  # feature -> how it is provided / why it was not judged


def _version(text: str) -> Version | None:
    try:
        return Version(text.split("+")[0].replace(".RC", "rc").replace(".rc", "rc"))
    except InvalidVersion:
        return None


def _meets(installed: str, wanted: str) -> bool | None:
    """True / False, or None when either side cannot be read as a version."""
    version = _version(installed)
    try:
        spec = SpecifierSet(wanted)
    except InvalidSpecifier:
        return None
    return None if version is None else spec.contains(version, prereleases=True)


@lru_cache(maxsize=1)
def builtin_operators() -> dict:
    text = resources.files("hetpool.catalog").joinpath("data/operators.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["operators"]


def effective_features(model: DeviceModelSpec, stack: SoftwareStack | None, operators: dict | None = None) -> FeatureReport:
    operators = builtin_operators() if operators is None else operators
    have = set(model.features)
    missing: dict[str, str] = {}
    notes: dict[str, str] = {}
    family = model.runtime.value
    for feature, rule in operators.items():
        on_chip = feature in have
        if rule.get("needs_device_feature", True) and not on_chip:
            continue
        need = (rule.get("runtimes") or {}).get(family)
        if need is None:
            if on_chip:
                have.discard(feature)
                missing[feature] = f"no {family} software stack provides {feature} in the operator table"
            continue
        problem, unknown = _check(need, stack)
        if problem:
            have.discard(feature)
            missing[feature] = problem
        elif unknown:
            if on_chip:
                notes[feature] = f"kept from the chip; {unknown}"
        else:
            have.add(feature)
            notes[feature] = need.get("note", "")
    return FeatureReport(frozenset(have), missing, notes)


def _check(need: dict, stack: SoftwareStack | None) -> tuple[str, str]:
    """(why the stack fails `need`, or "") and (what could not be judged, or "")."""
    if stack is None:
        return "", "the pool declares no software stack"
    unknown = []
    wanted_runtime = need.get("runtime")
    if wanted_runtime:
        if stack.runtime is None:
            unknown.append("the stack names no runtime")
        else:
            ok = _meets(stack.runtime.version, wanted_runtime)
            if ok is False:
                return f"{stack.runtime.name.value} {stack.runtime.version} installed; needs {wanted_runtime}", ""
            if ok is None:
                unknown.append(f"cannot compare runtime version {stack.runtime.version!r}")
    for framework, wanted in (need.get("frameworks") or {}).items():
        if not stack.frameworks:
            unknown.append("the stack lists no frameworks")
            continue
        installed = next((stack.frameworks[k] for k in _FRAMEWORK_KEYS.get(framework, (framework,)) if k in stack.frameworks), None)
        if installed is None:
            return f"{framework} is not installed; needs {framework} {wanted}", ""
        ok = _meets(installed, wanted)
        if ok is False:
            return f"{framework} {installed} installed; needs {wanted}", ""
        if ok is None:
            unknown.append(f"cannot compare {framework} version {installed!r}")
    return "", "; ".join(unknown)
