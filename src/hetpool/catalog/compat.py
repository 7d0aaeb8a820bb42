"""Software compatibility: can this device model, with this node's software stack, run
the framework (and extras) a task asks for?

The facts live in `data/compat.yaml` (versioned, operator-overridable); this module only
interprets them. Verdicts carry a short stable `reason` (used as a key when counting why
pools were rejected) and a specific `detail` sentence for the user.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from packaging.version import Version

from hetpool.catalog.names import EXTRA_PACKAGES, FAMILY_WORDS, FRAMEWORK_PACKAGES, package_key
from hetpool.catalog.versions import build_fits, cann_base, cann_matches, cann_version_key, find_row, ints, local_build, parse_version, public
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec, RuntimeName, SoftwareStack
from hetpool.core.tasks import FrameworkRequest, parse_version_spec

# Stable reasons (keys for rejection counts).
R_UNKNOWN_FRAMEWORK = "unknown framework"
R_NOT_ON_DEVICE = "framework not supported on device"
R_STACK_UNKNOWN = "software stack unknown"
R_STACK_MISMATCH = "software stack does not match device runtime"
R_NO_RELEASE = "no known framework release matches"
R_DRIVER = "driver too old for framework"
R_CANN = "CANN version cannot run framework version"
R_RUNTIME = "runtime version cannot run framework version"
R_RUNTIME_UNKNOWN = "runtime version not in knowledge base"
R_NOT_INSTALLED = "framework not installed"
R_INSTALLED_MISMATCH = "installed framework version does not match"
R_BUILD_MISMATCH = "installed framework build does not match device"
R_EXTRA = "extra not supported"
R_EXTRA_NOT_INSTALLED = "extra not installed"
R_EXTRA_MISMATCH = "installed extra version does not match"

CHECKS = {"cuda-builds", "rocm-builds", "cann-torch-npu", "cann-table", "any"}
_RUNTIME_REASON = {"cuda": R_DRIVER, "cann": R_CANN}
_DISPLAY = {"pytorch": "PyTorch", "mindspore": "MindSpore", "paddle": "PaddlePaddle", "tensorflow": "TensorFlow", "jax": "JAX", "vllm": "vLLM"}


@dataclass(frozen=True)
class CompatVerdict:
    ok: bool
    reason: str = ""
    detail: str = ""
    notes: tuple[str, ...] = ()


def _fail(reason: str, detail: str, notes: list[str] | tuple[str, ...] = ()) -> CompatVerdict:
    return CompatVerdict(False, reason, detail, tuple(notes))


def _reject_floats(obj: Any, where: str) -> None:
    # YAML reads an unquoted 2.10 as the float 2.1: every version must be a quoted string.
    if isinstance(obj, float):
        raise SpecError(f"compatibility KB: {where or '(root)'}: {obj!r} is a number; quote version numbers")
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        _reject_floats(key, where)
        _reject_floats(value, f"{where}.{key}" if where else str(key))


def _deep_merge(base: dict, override: Mapping) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class _Runtime:
    """What the node offers, normalised: the family and its version facts."""

    family: str
    driver: str = ""
    version: str = ""  # CANN / ROCm (or ROCm-equivalent of DTK) version
    notes: tuple[str, ...] = ()


class CompatibilityKB:
    """The compatibility knowledge base (an immutable view over compat.yaml data)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = copy.deepcopy(dict(data))
        self._validate()
        # Names as package keys (case, '-', '_' alike) -> (the KB's name, implied runtime).
        self._aliases: dict[str, str] = {}
        self._packages: dict[str, tuple[str, str | None]] = {}
        for name, entry in self._data.get("frameworks", {}).items():
            for alias in [name, *entry.get("aliases", [])]:
                self._aliases[package_key(str(alias))] = name
        for alias, (target, family) in FRAMEWORK_PACKAGES.items():
            if target in self._data.get("frameworks", {}):
                self._packages[alias] = (target, family)
        self._packages |= {alias: (name, None) for alias, name in self._aliases.items()}
        self._extras = {package_key(name): (name, None) for name in self._data.get("extras", {})}
        self._extras |= {alias: t for alias, t in EXTRA_PACKAGES.items() if t[0] in self._data.get("extras", {})}

    # -- construction -----------------------------------------------------------------

    @classmethod
    def builtin(cls) -> CompatibilityKB:
        return _builtin_kb()

    @classmethod
    def from_yaml(cls, text: str, source: str = "<compat>") -> CompatibilityKB:
        return cls(_load_mapping(text, source))

    def with_overrides(self, overrides: str | Mapping[str, Any]) -> CompatibilityKB:
        """A new KB with operator entries merged in (mappings deep-merge; lists replace)."""
        data = _load_mapping(overrides, "compat overrides") if isinstance(overrides, str) else overrides
        return CompatibilityKB(_deep_merge(self._data, data))

    def _validate(self) -> None:
        def bad(msg: str) -> SpecError:
            return SpecError(f"compatibility KB: {msg}")

        if not isinstance(self._data.get("version"), str):
            raise bad("'version' is required and must be a quoted string")
        _reject_floats(self._data, "")
        runtimes = {r.value for r in RuntimeName}
        for name, entry in self._data.get("frameworks", {}).items():
            if not isinstance(entry, Mapping) or not isinstance(entry.get("runtimes"), Mapping):
                raise bad(f"frameworks.{name}.runtimes must be a mapping")
            for family, rule in entry["runtimes"].items():
                if family not in runtimes:
                    raise bad(f"frameworks.{name}.runtimes.{family}: unknown runtime (allowed: {sorted(runtimes)})")
                if not isinstance(rule, Mapping) or rule.get("check") not in CHECKS:
                    raise bad(f"frameworks.{name}.runtimes.{family}.check must be one of {sorted(CHECKS)}")
        for branch in self._data.get("cuda", {}).get("driver_branches", {}):
            if not str(branch).isdigit():
                raise bad(f"cuda.driver_branches: {branch!r} is not a driver major version")

    @property
    def version(self) -> str:
        return str(self._data["version"])

    @property
    def data(self) -> dict[str, Any]:
        return copy.deepcopy(self._data)

    def frameworks(self) -> list[str]:
        return sorted(self._data.get("frameworks", {}))

    def canonical_framework(self, name: str) -> str | None:
        """The KB's name for a framework as users spell it (`torch`, `Torch_NPU`), or None."""
        found = self._packages.get(package_key(name))
        return found[0] if found else None

    def framework_names(self) -> list[str]:
        """Every framework name a task may give: the KB's names, their aliases, package
        names, `none`, and the extras that stand for a framework (`vllm`, `vllm-ascend`)."""
        return sorted({*self._packages, *self._extras, "none"})

    def as_request(self, request: FrameworkRequest) -> FrameworkRequest:
        """`framework: {name: vllm-ascend, version: X}` means PyTorch with the extra
        vllm-ascend X: an extra named as the framework becomes one, under the framework the
        KB says it needs. Anything else is returned as it is."""
        if package_key(request.name) in self._packages or package_key(request.name) not in self._extras:
            return request
        needs = self._data["extras"][self._extras[package_key(request.name)][0]].get("framework")
        if not needs:
            return request
        extras = {request.name: request.version, **request.extras}
        return FrameworkRequest(name=needs, extras=extras)

    def _implied_family(self, name: str, table: dict[str, tuple[str, str | None]], family: str) -> str | None:
        """Why a package name cannot run on `family` (`torch_npu` on a GPU), or None."""
        found = table.get(package_key(name))
        if found is None or found[1] is None or found[1] == family:
            return None
        return f"{name} runs only on {FAMILY_WORDS.get(found[1], found[1])}"

    # -- CUDA -------------------------------------------------------------------------

    def max_cuda_for_driver(self, driver: str) -> str | None:
        """Highest CUDA the driver supports natively (by driver branch), or None."""
        nums = ints(driver)
        if not nums:
            return None
        branches = {int(k): str(v) for k, v in self._data.get("cuda", {}).get("driver_branches", {}).items()}
        eligible = [b for b in branches if b <= nums[0]]
        return branches[max(eligible)] if eligible else None

    def _cuda_build_runs(self, build: str, driver: str) -> tuple[bool, str]:
        native = self.max_cuda_for_driver(driver)
        if native and ints(build)[:2] <= ints(native)[:2]:
            return True, ""
        rule = self._data.get("cuda", {}).get("minor_version_compat", {}).get(str(ints(build)[0]))
        if rule and ints(driver)[:1] >= ints(str(rule["min_driver"]))[:1]:
            return True, (f"CUDA {build} build runs on driver {driver} through CUDA minor-version compatibility (limited feature set)")
        return False, ""

    def _cuda_summary(self, driver: str) -> str:
        native = self.max_cuda_for_driver(driver) or "none"
        majors = [
            m for m, r in self._data.get("cuda", {}).get("minor_version_compat", {}).items() if ints(driver)[:1] >= ints(str(r["min_driver"]))[:1]
        ]
        compat = f", and {'/'.join(m + '.x' for m in sorted(majors, key=int))} builds via minor-version compatibility" if majors else ""
        return f"driver {driver} runs CUDA up to {native} natively{compat}"

    # -- the node ---------------------------------------------------------------------

    def _node_runtime(self, family: str, stack: SoftwareStack | None) -> _Runtime | CompatVerdict:
        if family in ("none", "doca"):
            return _Runtime(family)
        if stack is None:
            return _fail(R_STACK_UNKNOWN, f"no software stack is declared for this {family} node")
        rt = stack.runtime
        if rt is not None and rt.name.value != family and {rt.name.value, family} != {"rocm", "dtk"}:
            return _fail(R_STACK_MISMATCH, f"the device needs the {family} runtime but the stack declares {rt.name.value}")
        if family == "cuda":
            if not ints(stack.driver):
                return _fail(R_STACK_UNKNOWN, "the stack declares no NVIDIA driver version")
            notes = (f"node reports CUDA runtime {rt.version}; informational, the driver decides",) if rt else ()
            return _Runtime(family, driver=stack.driver, notes=notes)
        if rt is None:
            return _fail(R_STACK_UNKNOWN, f"the stack declares no {family} runtime version")
        version, notes = rt.version, ()
        if family == "dtk" and rt.name.value == "dtk":
            equivalent = self._data.get("dtk", {}).get("rocm_equivalent", {}).get(rt.version)
            if equivalent:
                version, notes = str(equivalent), (f"DTK {rt.version} treated as ROCm {equivalent} (approximation)",)
            elif (ints(rt.version) or (0,))[0] >= 20:
                version, notes = "", (f"DTK {rt.version} has no ROCm equivalent in the KB; ROCm builds allowed (approximation)",)
            else:
                notes = (f"DTK {rt.version} compared as a ROCm version (approximation)",)
        return _Runtime(family, driver=stack.driver, version=version, notes=notes)

    # -- can one concrete version run? --------------------------------------------------

    def _cann_entry(self, cann: str) -> tuple[str, Mapping[str, Any]] | None:
        releases = self._data.get("cann", {}).get("releases", {})
        key = cann_version_key(cann)
        for name, entry in releases.items():
            if cann_version_key(name) == key:
                return name, entry
        for name, entry in releases.items():
            if cann_base(cann_version_key(name)) == cann_base(key):
                return name, entry
        return None

    def _cann_torch_versions(self, cann: str) -> list[str] | None:
        found = self._cann_entry(cann)
        if found is None:
            return None
        return [Version(v).base_version for v in found[1].get("torch_npu", [])]

    def _can_run(self, fw: str, rule: Mapping[str, Any], node: _Runtime, version: str) -> tuple[bool, list[str]]:
        check = rule["check"]
        notes = [rule["note"]] if rule.get("note") else []
        build = local_build(version)
        if build and not build_fits(build[0], node.family):
            return False, [f"installed build '+{parse_version(version).local}' is not for {node.family}"]
        if check == "any":
            return True, notes
        v = parse_version(version)
        if v is None:
            return False, []
        base = v.base_version
        rows = self._data["frameworks"][fw].get("releases", {})
        if check == "cann-torch-npu":
            supported = self._cann_torch_versions(node.version) or []
            return (Version(base) in {Version(s) for s in supported}), notes
        found = find_row(rows, base)
        if found is None:
            return False, []
        row = found[1]
        if row.get("verified") is False:
            notes.append(f"{_DISPLAY.get(fw, fw)} {found[0]} compatibility data is not verified")
        if check == "cann-table":
            return any(cann_matches(str(c), node.version) for c in row.get("cann", [])), notes
        if check == "cuda-builds":
            builds = [(str(b), False) for b in row.get("cuda", [])] + [(str(b), True) for b in row.get("cuda_experimental", [])]
            if build:
                builds = [(b, exp) for b, exp in builds if ints(b)[:2] == ints(build[1])[:2]] or [(build[1], False)]
            results = [(self._cuda_build_runs(b, node.driver), b, exp) for b, exp in builds]
            # Prefer a build the driver runs natively, then a stable one.
            results.sort(key=lambda r: (bool(r[0][1]), r[2]))
            for (ok, note), b, exp in results:
                if ok:
                    extra = [note] if note else []
                    if exp:
                        extra.append(f"uses the experimental CUDA {b} build")
                    return True, notes + extra
            return False, notes
        if check == "rocm-builds":
            if not node.version:  # unmapped DTK: allow, a note already says so
                return bool(row.get("rocm")), notes
            node_v = ints(node.version)[:2]
            builds = [str(b) for b in row.get("rocm", [])]
            if build:
                builds = [b for b in builds if ints(b)[:2] == ints(build[1])[:2]] or [build[1]]
            return any(ints(b)[0] == node_v[0] and ints(b)[:2] <= node_v for b in builds), notes
        return False, []

    def _known_versions(self, fw: str, rule: Mapping[str, Any], node: _Runtime) -> list[str]:
        versions = {r for row in self._data["frameworks"][fw].get("releases", {}).values() for r in row.get("releases", [])}
        if rule["check"] == "cann-torch-npu":
            versions |= set(self._cann_torch_versions(node.version) or [])
        return sorted(versions, key=Version, reverse=True)

    def _builds(self, fw: str, versions: list[str], key: str) -> str:
        """' (CUDA builds 2.8: 12.6, 12.8, 12.9)' for the release series among `versions`."""
        rows = self._data["frameworks"][fw].get("releases", {})
        found = dict(f for f in (find_row(rows, v) for v in versions) if f)
        parts = [
            f"{k}: {', '.join(str(b) for b in r.get(key, []) + r.get(key + '_experimental', [])) or 'none'}"
            for k, r in sorted(found.items(), key=lambda kv: ints(kv[0]))
        ]
        return f" ({'CUDA' if key == 'cuda' else 'ROCm'} builds {'; '.join(parts)})" if parts else ""

    def _runtime_failure(self, fw: str, node: _Runtime, wanted: str, versions: list[str]) -> CompatVerdict:
        name = _DISPLAY.get(fw, fw)
        notes = list(node.notes)
        if node.family == "cuda":
            builds = self._builds(fw, versions, "cuda")
            return _fail(R_DRIVER, f"{self._cuda_summary(node.driver)}; no {name} {wanted} build can run there{builds}", notes)
        if node.family == "cann" and fw == "pytorch":
            torch = self._cann_torch_versions(node.version)
            if torch is None:
                return self._cann_unknown(node.version, notes)
            listed = ", ".join(torch) or "nothing"
            return _fail(R_CANN, f"CANN {node.version} supports torch_npu for PyTorch {listed}; the task needs {wanted}", notes)
        if node.family == "cann":
            return _fail(R_CANN, f"CANN {node.version} is not listed for {name} {wanted}", notes)
        label = {"rocm": "ROCm", "dtk": "DTK (as ROCm)"}.get(node.family, node.family)
        builds = self._builds(fw, versions, "rocm") if node.family in ("rocm", "dtk") else ""
        return _fail(_RUNTIME_REASON.get(node.family, R_RUNTIME), f"{label} {node.version or '?'} cannot run {name} {wanted}{builds}", notes)

    def _cann_unknown(self, cann: str, notes: list[str]) -> CompatVerdict:
        known = sorted(self._data.get("cann", {}).get("releases", {}), key=cann_version_key)
        return _fail(
            R_RUNTIME_UNKNOWN, f"CANN {cann} is not in the compatibility KB (known: {', '.join(known)}); add it with HETPOOL_COMPAT_OVERRIDES", notes
        )

    # -- public checks ----------------------------------------------------------------

    def check(
        self, model: DeviceModelSpec, stack: SoftwareStack | None, request: FrameworkRequest | None, *, has_image: bool = False
    ) -> CompatVerdict:
        """Can `model` with `stack` run `request`? With `has_image`, the task brings its own
        container image, so it is enough that *some* matching version runs on the node;
        otherwise the version installed on the node (stack.frameworks) is what runs."""
        if request is None or request.name == "none":
            return CompatVerdict(True)
        request = self.as_request(request)
        fw = self.canonical_framework(request.name)
        if fw is None:
            return _fail(R_UNKNOWN_FRAMEWORK, f"framework {request.name!r} is not in the compatibility KB (known: {', '.join(self.frameworks())})")
        family = model.runtime.value
        name = _DISPLAY.get(fw, fw)
        rule = self._data["frameworks"][fw]["runtimes"].get(family)
        if only := self._implied_family(request.name, self._packages, family):
            return _fail(R_NOT_ON_DEVICE, f"{only}; {model.name} is a {model.device_class.value.upper()} ({family})")
        if rule is None:
            families = [FAMILY_WORDS.get(f, f) for f in self._data["frameworks"][fw]["runtimes"]]
            where = ", ".join(families[:-1]) + " and " + families[-1] if len(families) > 1 else families[0]
            cls = model.device_class.value.upper()
            return _fail(R_NOT_ON_DEVICE, f"{name} runs only on {where}; {model.name} is a {cls} ({family})")
        node = self._node_runtime(family, stack)
        if isinstance(node, CompatVerdict):
            return node
        notes = list(node.notes)
        if rule["check"] == "cann-torch-npu" and self._cann_torch_versions(node.version) is None:
            return self._cann_unknown(node.version, notes)
        if rule["check"] == "cann-table" and self._cann_entry(node.version) is None and not self._cann_listed(fw, node):
            return self._cann_unknown(node.version, notes)
        spec = parse_version_spec(request.version)
        wanted = request.version or "any version"
        installed_map = stack.frameworks if (stack and not has_image) else {}
        if installed_map:
            installed = self._installed(fw, installed_map)
            if installed is None:
                return _fail(R_NOT_INSTALLED, f"{name} is not installed on the node and the task has no image", notes)
            v = parse_version(installed)
            if v is None or not spec.contains(public(v), prereleases=True):
                return _fail(R_INSTALLED_MISMATCH, f"the node has {name} {installed}; the task needs {wanted}", notes)
            ok, run_notes = self._can_run(fw, rule, node, installed)
            if not ok:
                if run_notes and run_notes[-1].startswith("installed build"):
                    return _fail(R_BUILD_MISMATCH, f"{name} {installed}: {run_notes[-1]}", notes)
                return self._runtime_failure(fw, node, installed, [installed])
            notes += run_notes
        elif rule["check"] == "any":
            notes += [rule["note"]] if rule.get("note") else []
        else:
            candidates = [c for c in self._known_versions(fw, rule, node) if spec.contains(c, prereleases=True)]
            if not candidates:
                return _fail(
                    R_NO_RELEASE, f"no {name} release known to the KB matches {wanted}; add newer releases with HETPOOL_COMPAT_OVERRIDES", notes
                )
            runs = [n for ok, n in (self._can_run(fw, rule, node, c) for c in candidates) if ok]
            if not runs:
                return self._runtime_failure(fw, node, wanted, candidates)
            # Report the caveats of the cleanest option (e.g. a native CUDA build if any).
            notes += min(runs, key=len)
        for extra, extra_spec in request.extras.items():
            verdict = self._check_extra(fw, extra, extra_spec, request, node, installed_map)
            if not verdict.ok:
                return _fail(verdict.reason, verdict.detail, notes + list(verdict.notes))
            notes += verdict.notes
        return CompatVerdict(True, notes=tuple(dict.fromkeys(notes)))

    def _cann_listed(self, fw: str, node: _Runtime) -> bool:
        rows = self._data["frameworks"][fw].get("releases", {}).values()
        return any(cann_matches(str(c), node.version) for row in rows for c in row.get("cann", []))

    def installed_framework(self, name: str) -> str | None:
        """The framework an installed distribution `name` (a node's stack) is a version of:
        the KB's names and aliases only — a node's `torch_npu` version is not PyTorch's."""
        return self._aliases.get(package_key(name))

    def _installed(self, fw: str, installed: Mapping[str, str]) -> str | None:
        return next((value for key, value in installed.items() if self.installed_framework(key) == fw), None)

    def _check_extra(
        self, fw: str, extra: str, spec_text: str, request: FrameworkRequest, node: _Runtime, installed_map: Mapping[str, str]
    ) -> CompatVerdict:
        spec = parse_version_spec(spec_text)
        label = _DISPLAY.get(extra, extra)
        if only := self._implied_family(extra, self._extras, node.family):
            return _fail(R_EXTRA, f"{only}; this device uses {node.family}")
        known = self._extras.get(package_key(extra))
        extra = known[0] if known else extra
        installed = None
        if installed_map:
            installed = next((v for k, v in installed_map.items() if self._extras.get(package_key(k), (k,))[0] == extra), None)
            if installed is None:
                return _fail(R_EXTRA_NOT_INSTALLED, f"{label} is not installed on the node and the task has no image")
            v = parse_version(installed)
            if v is None or not spec.contains(public(v), prereleases=True):
                return _fail(R_EXTRA_MISMATCH, f"the node has {label} {installed}; the task needs {spec_text or 'any'}")
        entry = self._data.get("extras", {}).get(extra)
        if entry is None:
            return CompatVerdict(True, notes=(f"extra {extra!r} is not in the compatibility KB; not checked",))
        if entry.get("framework") and entry["framework"] != fw:
            return _fail(R_EXTRA, f"{label} needs {_DISPLAY.get(entry['framework'], entry['framework'])}, the task uses {_DISPLAY.get(fw, fw)}")
        if node.family not in entry.get("runtimes", []):
            return _fail(R_EXTRA, f"{label} runs on {', '.join(entry.get('runtimes', []))}; this device uses {node.family}")
        on_cann = node.family == "cann"
        rows = entry.get("cann" if on_cann else "releases", {})
        versions = (
            [installed]
            if installed
            else sorted(
                {r for row in rows.values() for r in row.get("releases", []) if spec.contains(r, prereleases=True)}, key=Version, reverse=True
            )
        )
        fw_spec = parse_version_spec(request.version)
        fw_rule = self._data["frameworks"][fw]["runtimes"][node.family]
        for version in versions:
            found = find_row(rows, str(version))
            if found is None:
                continue
            key, row = found
            torch = str(row.get("torch", ""))
            if not installed and torch and not fw_spec.contains(torch, prereleases=True):
                continue
            if on_cann:
                if not any(cann_matches(str(c), node.version) for c in row.get("cann", [])):
                    continue
            elif torch and not self._can_run(fw, fw_rule, node, torch)[0]:
                continue
            notes = [f"{label} {version} is built against torch {torch}"] if torch else []
            if on_cann:
                notes.insert(0, f"on Ascend {label} means vllm-ascend {key} (CANN {', '.join(row.get('cann', []))})")
            if row.get("verified") is False:
                notes.append(f"{label} {key} compatibility data is not verified")
            return CompatVerdict(True, notes=tuple(notes))
        where = (
            f"CANN {node.version} (vllm-ascend matrix)"
            if on_cann
            else (f"this node ({self._cuda_summary(node.driver)})" if node.family == "cuda" else f"{node.family} {node.version}")
        )
        wanted = installed or spec_text or "any version"
        return _fail(
            R_EXTRA,
            f"no {label} release for {wanted} runs on {where}" + (f" with {_DISPLAY.get(fw, fw)} {request.version}" if request.version else ""),
        )

    def supported_frameworks(self, model: DeviceModelSpec, stack: SoftwareStack | None) -> dict[str, list[str]]:
        """framework -> versions this model+stack can run ("*" where the KB has no table).
        Frameworks the device family cannot run at all are left out."""
        family = model.runtime.value
        out: dict[str, list[str]] = {}
        for fw, entry in self._data.get("frameworks", {}).items():
            rule = entry["runtimes"].get(family)
            if rule is None:
                continue
            if rule["check"] == "any":
                out[fw] = ["*"]
                continue
            node = self._node_runtime(family, stack)
            if isinstance(node, CompatVerdict):
                out[fw] = []
                continue
            out[fw] = [v for v in self._known_versions(fw, rule, node) if self._can_run(fw, rule, node, v)[0]]
        return out


def _load_mapping(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level")
    return data


@lru_cache(maxsize=1)
def _builtin_kb() -> CompatibilityKB:
    text = resources.files("hetpool.catalog").joinpath("data/compat.yaml").read_text(encoding="utf-8")
    return CompatibilityKB.from_yaml(text, "hetpool/catalog/data/compat.yaml")


def max_cuda_for_driver(driver: str) -> str | None:
    """Highest CUDA the driver runs natively, per the built-in KB."""
    return CompatibilityKB.builtin().max_cuda_for_driver(driver)


def supported_frameworks(model: DeviceModelSpec, stack: SoftwareStack | None) -> dict[str, list[str]]:
    return CompatibilityKB.builtin().supported_frameworks(model, stack)
