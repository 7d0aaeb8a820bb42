"""Names users type for catalog things, and what they mean: package names for frameworks
and extras (`torch_npu`, `vllm-ascend`), device models and pools in a task's candidates,
and the close matches offered when a name is unknown.

A misspelt name must be an error, not a silent "no such candidate" found later in a
pending task's attempts: these helpers let the server refuse it at plan / submit with
the field named and the likely intended names listed.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable

# Package names people install, as the compatibility KB knows them: name (a package_key)
# -> (the KB's name, the one runtime family the package implies, or None). Targets the KB
# does not know are ignored (an operator's override may drop a framework).
FRAMEWORK_PACKAGES: dict[str, tuple[str, str | None]] = {
    "torch": ("pytorch", None),
    "torch-npu": ("pytorch", "cann"),  # PyTorch on Ascend is torch + torch_npu
    "paddlepaddle": ("paddle", None),
    "paddlepaddle-gpu": ("paddle", None),
    "mindspore": ("mindspore", None),
    "jaxlib": ("jax", None),
    "tensorflow-gpu": ("tensorflow", None),
    "tensorflow-cpu": ("tensorflow", None),
}
EXTRA_PACKAGES: dict[str, tuple[str, str | None]] = {
    "vllm-ascend": ("vllm", "cann"),  # the vLLM plugin for Ascend NPUs (the KB's `vllm` rows under `cann`)
}
# Runtime families in words, for "runs only on …".
FAMILY_WORDS = {"cuda": "NVIDIA GPUs", "rocm": "AMD GPUs", "dtk": "Hygon DCUs", "cann": "Ascend NPUs"}
FAMILY_WORDS |= {"neuware": "Cambricon MLUs", "xre": "Kunlunxin XPUs", "doca": "BlueField DPUs", "none": "CPUs"}


@functools.lru_cache(maxsize=4096)  # asked many times per task on the submit and scheduling paths
def package_key(name: str) -> str:
    """A package name as pip compares them (PEP 503): case, '-', '_' and '.' alike."""
    return re.sub(r"[-_.]+", "-", name.strip().lower())


def close_matches(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to `name` (compared as package keys), best first."""
    by_key: dict[str, str] = {}
    for k in sorted(known):
        by_key.setdefault(package_key(k), k)
    return [by_key[k] for k in difflib.get_close_matches(package_key(name), list(by_key), n=n, cutoff=0.6)]


def unknown_name(loc: str, what: str, name: str, known: Iterable[str]) -> dict:
    """One error detail for an unknown name: the field, the problem, the close matches."""
    matches = close_matches(name, known)
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; no close match"
    return {"loc": loc, "msg": f"unknown {what} {name!r}{hint}", "close_matches": matches}


def candidate_problems(spec, models: Iterable[str], pools: Iterable[str]) -> list[dict]:
    """Unknown names among a task's (or a template's defaults') device candidates:
    `per_worker.devices.models` name device models; `fallback` and `any_of` entries name a
    device model or a pool (as assign.candidate_groups reads them)."""
    models, pools = set(models), set(pools)
    problems = []
    demand = spec.per_worker.devices if spec.per_worker is not None else None
    for i, model in enumerate(demand.models if demand is not None else []):
        if model not in models:
            problems.append(unknown_name(f"per_worker.devices.models[{i}]", "device model", model, models))
    for field in ("fallback", "any_of"):
        for i, entry in enumerate(getattr(spec, field) or []):
            if entry not in models and entry not in pools:
                problems.append(unknown_name(f"{field}[{i}]", "device model or pool", entry, models | pools))
    return problems
