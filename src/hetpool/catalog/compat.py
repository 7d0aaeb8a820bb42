"""Software compatibility: can this device model, with this node's software stack, run
the framework (and extras) a task asks for?

The facts are the sourced rows of `data/compat/*.yaml` (catalog/compat_data.py), merged
with operators' rows; this module only interprets them. A verdict is three-valued:
compatible, incompatible, or unknown — the tables do not cover the case (a framework,
a runtime release or a framework release they do not know). Unknown is never a silent
yes: it carries the nearest known rows, and the KB's `unknown` policy decides whether it
blocks (the default) or is let through with a note. Every verdict names the rows it
rests on (`rows`), each with its source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from packaging.version import Version

from hetpool.catalog.compat_data import CompatTables, Row, builtin_tables, read_table_dir, read_table_file
from hetpool.catalog.compat_releases import Releases
from hetpool.catalog.compat_runtime import FAMILY_LABEL, CudaFacts, Trace, device_verdict, known_runtime_versions, nearest_rows, runtime_known
from hetpool.catalog.compat_verdict import (  # noqa: F401 (the reasons are part of this module's interface)
    R_BUILD_MISMATCH,
    R_CANN,
    R_DEVICE,
    R_DRIVER,
    R_EXTRA,
    R_EXTRA_MISMATCH,
    R_EXTRA_NOT_INSTALLED,
    R_INSTALLED_MISMATCH,
    R_NO_RELEASE,
    R_NO_TABLE,
    R_NOT_INSTALLED,
    R_NOT_ON_DEVICE,
    R_RUNTIME,
    R_RUNTIME_UNKNOWN,
    R_STACK_MISMATCH,
    R_STACK_UNKNOWN,
    R_UNKNOWN_FRAMEWORK,
    CompatVerdict,
    _fail,
    _unknown,
)
from hetpool.catalog.names import EXTRA_PACKAGES, FAMILY_WORDS, FRAMEWORK_PACKAGES, close_matches, package_key
from hetpool.catalog.versions import cann_version_key, ints, parse_version, public
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec, RuntimeName, SoftwareStack
from hetpool.core.tasks import FrameworkRequest, parse_version_spec

UNKNOWN_POLICIES = ("block", "allow")
CHECKS = ("cuda-builds", "rocm-builds", "torch-npu", "version-list", "torch-mlu", "any", "unknown")
_RUNTIME_REASON = {"cuda": R_DRIVER, "cann": R_CANN}
DISPLAY = {"pytorch": "PyTorch", "mindspore": "MindSpore", "paddle": "PaddlePaddle", "tensorflow": "TensorFlow", "jax": "JAX", "vllm": "vLLM"}
# Extras the tables know: the framework they need and the table per runtime family.
EXTRAS = {"vllm": {"framework": "pytorch", "tables": {"cuda": "vllm", "rocm": "vllm", "cann": "vllm-ascend"}}}


@dataclass
class _Runtime:
    """What the node offers, normalised: the family and its version facts."""

    family: str
    generation: str = ""
    driver: str = ""
    version: str = ""  # CANN / ROCm / DTK / XRE / CNToolkit release
    notes: tuple[str, ...] = ()


class CompatibilityKB:
    """The compatibility knowledge base: an immutable view over the tables."""

    def __init__(self, tables: CompatTables, unknown: str = "block") -> None:
        if unknown not in UNKNOWN_POLICIES:
            raise SpecError(f"compat unknown policy: {unknown!r} (allowed: {', '.join(UNKNOWN_POLICIES)})")
        self.tables = tables
        self.unknown_policy = unknown
        self.cuda = CudaFacts(tables)
        self.releases = Releases(tables, self.cuda)
        self._rules: dict[str, dict[str, Row]] = {}
        self._known: dict[tuple[str, str], bool] = {}
        runtimes = {r.value for r in RuntimeName}
        for row in tables.rows("frameworks"):
            if row.get("runtime") not in runtimes:
                raise SpecError(f"{row.origin}: frameworks row {row.key}: runtime must be one of {', '.join(sorted(runtimes))}")
            if row.get("check") not in CHECKS:
                raise SpecError(f"{row.origin}: frameworks row {row.key}: check must be one of {', '.join(CHECKS)}")
            self._rules.setdefault(str(row.get("framework")), {})[str(row.get("runtime"))] = row
        self._aliases = {package_key(fw): fw for fw in self._rules}
        self._aliases |= {alias: t for alias, (t, family) in FRAMEWORK_PACKAGES.items() if family is None and t in self._rules}
        self._packages = {alias: t for alias, t in FRAMEWORK_PACKAGES.items() if t[0] in self._rules}
        self._packages |= {alias: (name, None) for alias, name in self._aliases.items()}
        self._extras = {package_key(name): (name, None) for name in EXTRAS} | dict(EXTRA_PACKAGES)

    # -- construction -----------------------------------------------------------------

    @classmethod
    def builtin(cls) -> CompatibilityKB:
        return _builtin_kb()

    def with_rows(self, rows: Iterable[Row]) -> CompatibilityKB:
        """A new KB with operators' rows merged in (same key replaces, else added)."""
        return CompatibilityKB(self.tables.merged(rows), self.unknown_policy)

    def with_overrides(self, source: str | Path) -> CompatibilityKB:
        """Rows from a directory of table files, one file, or a table file's text."""
        if isinstance(source, Path):
            return self.with_rows(read_table_dir(source))
        return self.with_rows(read_table_file(source, "compat overrides"))

    def with_policy(self, unknown: str) -> CompatibilityKB:
        return CompatibilityKB(self.tables, unknown)

    @property
    def version(self) -> str:
        """The newest `checked` date of any row: when the tables were last read against their sources."""
        return self.tables.version

    def frameworks(self) -> list[str]:
        return sorted(self._rules)

    def rule(self, framework: str, family: str) -> Row | None:
        return self._rules.get(framework, {}).get(family)

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
        vllm-ascend X: an extra named as the framework becomes one, under the framework it needs."""
        key = package_key(request.name)
        if key in self._packages or key not in self._extras:
            return request
        needs = EXTRAS[self._extras[key][0]]["framework"]
        return FrameworkRequest(name=needs, extras={request.name: request.version, **request.extras})

    def installed_framework(self, name: str) -> str | None:
        """The framework an installed distribution `name` (a node's stack) is a version of:
        the KB's names and aliases only — a node's `torch_npu` version is not PyTorch's."""
        return self._aliases.get(package_key(name))

    def _implied_family(self, name: str, table: dict, family: str) -> str | None:
        """Why a package name cannot run on `family` (`torch_npu` on a GPU), or None."""
        found = table.get(package_key(name))
        if found is None or found[1] is None or found[1] == family:
            return None
        return f"{name} runs only on {FAMILY_WORDS.get(found[1], found[1])}"

    def max_cuda_for_driver(self, driver: str) -> str | None:
        """Highest CUDA the driver supports natively, or None."""
        return self.cuda.native_cuda(driver)

    # -- the node ---------------------------------------------------------------------

    def _node_runtime(self, model: DeviceModelSpec, stack: SoftwareStack | None) -> _Runtime | CompatVerdict:
        family = model.runtime.value
        if family in ("none", "doca"):
            return _Runtime(family, model.generation)
        if stack is None:
            return _unknown(R_STACK_UNKNOWN, f"no software stack is declared for this {family} node")
        rt = stack.runtime
        if rt is not None and rt.name.value != family:
            return _fail(R_STACK_MISMATCH, f"the device needs the {family} runtime but the stack declares {rt.name.value}")
        if family == "cuda":
            if not ints(stack.driver):
                return _unknown(R_STACK_UNKNOWN, "the stack declares no NVIDIA driver version")
            notes = (f"node reports CUDA runtime {rt.version}; informational, the driver decides",) if rt else ()
            return _Runtime(family, model.generation, driver=stack.driver, notes=notes)
        if rt is None or not rt.version:
            return _unknown(R_STACK_UNKNOWN, f"the stack declares no {FAMILY_LABEL.get(family, family)} runtime version")
        return _Runtime(family, model.generation, driver=stack.driver, version=rt.version)

    # -- public checks ----------------------------------------------------------------

    def check(
        self, model: DeviceModelSpec, stack: SoftwareStack | None, request: FrameworkRequest | None, *, has_image: bool = False
    ) -> CompatVerdict:
        """Can `model` with `stack` run `request`? With `has_image`, the task brings its own
        container image, so it is enough that *some* matching version runs on the node;
        otherwise the version installed on the node (stack.frameworks) is what runs."""
        if request is None or request.name == "none":
            return CompatVerdict(True)
        token = Trace.start()
        try:
            verdict = self._check(model, stack, self.as_request(request), has_image)
        finally:
            rows = Trace.stop(token)
        verdict = replace(verdict, rows=tuple(r.cite() for r in rows))
        if verdict.unknown and self.unknown_policy == "allow":
            note = f"not covered by the compatibility tables ({verdict.detail}); allowed by the compat unknown policy"
            return replace(verdict, ok=True, notes=(*verdict.notes, note))
        return verdict

    def _check(self, model: DeviceModelSpec, stack: SoftwareStack | None, request: FrameworkRequest, has_image: bool) -> CompatVerdict:
        fw = self.canonical_framework(request.name)
        if fw is None:
            close = close_matches(request.name, self.framework_names())
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return _unknown(
                R_UNKNOWN_FRAMEWORK, f"framework {request.name!r} is not in the compatibility KB (known: {', '.join(self.frameworks())}){hint}"
            )
        family, name = model.runtime.value, DISPLAY.get(fw, fw)
        if only := self._implied_family(request.name, self._packages, family):
            return _fail(R_NOT_ON_DEVICE, f"{only}; {model.name} is a {model.device_class.value.upper()} ({family})")
        rule = Trace.use(self.rule(fw, family))
        if rule is None:
            for row in self._rules[fw].values():  # "runs only on …" rests on the runtimes it has rows for
                Trace.use(row)
            families = [FAMILY_WORDS.get(f, f) for f in self._rules[fw]]
            where = ", ".join(families[:-1]) + " and " + families[-1] if len(families) > 1 else families[0]
            return _fail(R_NOT_ON_DEVICE, f"{name} runs only on {where}; {model.name} is a {model.device_class.value.upper()} ({family})")
        node = self._node_runtime(model, stack)
        if isinstance(node, CompatVerdict):
            return node
        notes = list(node.notes)
        check = str(rule.get("check"))
        if check == "unknown":
            return _unknown(R_NO_TABLE, f"the KB has no {name} version table for {FAMILY_WORDS.get(family, family)}", [rule], notes)
        runs, why, note = device_verdict(self.tables, self.cuda, family, node.generation, node.version, node.driver)
        if not runs:
            return _fail(R_DEVICE, f"{why}; {model.name} cannot run {name} there", notes)
        notes += [note] if note else []
        if check != "any" and family not in ("cuda", "none", "doca") and not self._runtime_known(family, node.version):
            return self._runtime_unknown(family, node.version, notes)
        verdict = self._framework_verdict(fw, rule, node, request, stack, has_image, notes)
        if not verdict.ok:
            return verdict
        notes = list(verdict.notes)
        installed_map = stack.frameworks if (stack and not has_image) else {}
        for extra, extra_spec in request.extras.items():
            extra_verdict = self._check_extra(fw, extra, extra_spec, request, node, installed_map)
            if not extra_verdict.ok:
                return replace(extra_verdict, notes=tuple(notes) + extra_verdict.notes)
            notes += extra_verdict.notes
        return CompatVerdict(True, notes=tuple(dict.fromkeys(notes)))

    def _framework_verdict(self, fw, rule: Row, node: _Runtime, request, stack, has_image: bool, notes: list[str]) -> CompatVerdict:
        name = DISPLAY.get(fw, fw)
        check = str(rule.get("check"))
        spec = parse_version_spec(request.version)
        wanted = request.version or "any version"
        installed_map = stack.frameworks if (stack and not has_image) else {}
        if installed_map:
            installed = next((v for k, v in installed_map.items() if self.installed_framework(k) == fw), None)
            if installed is None:
                return _fail(R_NOT_INSTALLED, f"{name} is not installed on the node and the task has no image", notes)
            v = parse_version(installed)
            if v is None or not spec.contains(public(v), prereleases=True):
                return _fail(R_INSTALLED_MISMATCH, f"the node has {name} {installed}; the task needs {wanted}", notes)
            if check == "any":
                return CompatVerdict(True, notes=tuple(notes + ([rule.note] if rule.note else [])))
            if not self.releases.known(fw, check, node, installed):
                return self._release_unknown(fw, installed, notes)
            if not self.releases.informed(fw, check, node.family, installed):
                return self._not_informed(fw, node, installed, notes)
            ok, run_notes = self.releases.can_run(fw, check, node, installed)
            if not ok:
                if run_notes and run_notes[-1].startswith("installed build"):
                    return _fail(R_BUILD_MISMATCH, f"{name} {installed}: {run_notes[-1]}", notes)
                return self._runtime_failure(fw, node, installed, [installed], run_notes)
            return CompatVerdict(True, notes=tuple(notes + run_notes))
        if check == "any":
            return CompatVerdict(True, notes=tuple(notes + ([rule.note] if rule.note else [])))
        candidates = [c for c in self.releases.versions(fw, check, node) if spec.contains(c, prereleases=True)]
        if not candidates:
            return self._release_unknown(fw, wanted, notes)
        if not (candidates := [c for c in candidates if self.releases.informed(fw, check, node.family, c)]):
            return self._not_informed(fw, node, wanted, notes)
        results = []
        for candidate in candidates:  # each candidate's rows traced apart: an answer cites its own rows only
            token = Trace.start()
            ok, run_notes = self.releases.can_run(fw, check, node, candidate)
            results.append((ok, run_notes, Trace.stop(token)))
        runs = [(n, rows) for ok, n, rows in results if ok]
        if not runs:
            for _, _, rows in results:
                for row in rows:
                    Trace.use(row)
            return self._runtime_failure(fw, node, wanted, candidates, [n for _, ns, _ in results for n in ns])
        # Report the caveats of the cleanest option (e.g. a native CUDA build if any).
        best, rows = min(runs, key=lambda r: len(r[0]))
        for row in rows:
            Trace.use(row)
        return CompatVerdict(True, notes=tuple(notes + best))

    def _runtime_known(self, family: str, version: str) -> bool:
        key = (family, version)
        if key not in self._known:  # a handful of (runtime, release) pairs per estate, asked per check
            self._known[key] = runtime_known(self.tables, family, version)
        return self._known[key]

    def _release_unknown(self, fw: str, wanted: str, notes: list[str]) -> CompatVerdict:
        rows = list(self.tables.rows(fw))
        nearest = nearest_rows(rows, "pip", wanted.lstrip("=<>!~ "), "releases") if ints(wanted) else rows[-1:]
        return _unknown(
            R_NO_RELEASE,
            f"no {DISPLAY.get(fw, fw)} release known to the KB matches {wanted}; add rows with a CompatibilityRule",
            nearest or rows[-1:],
            notes,
        )

    def _not_informed(self, fw: str, node: _Runtime, wanted: str, notes: list[str]) -> CompatVerdict:
        label = FAMILY_LABEL.get(node.family, node.family)
        rows = [r for r in self.tables.rows(fw) if r.get(node.family)]
        return _unknown(R_NO_TABLE, f"no {DISPLAY.get(fw, fw)} row for {wanted} lists {label} releases", rows[-2:], notes)

    def _runtime_unknown(self, family: str, version: str, notes: list[str]) -> CompatVerdict:
        label = FAMILY_LABEL.get(family, family)
        known = known_runtime_versions(self.tables, family)
        table = {"cann": "torch-npu", "neuware": "torch-mlu"}.get(family, "runtime-devices")
        column = {"cann": "cann", "neuware": "cntoolkit"}.get(family, "first")
        rows = [r for r in self.tables.rows(table) if table != "runtime-devices" or r.get("runtime") == family]
        shown = ", ".join(known[-8:]) + (" …" if len(known) > 8 else "") if known else "none"
        return _unknown(
            R_RUNTIME_UNKNOWN,
            f"{label} {version} is not in the compatibility KB (known: {shown}); add it with a CompatibilityRule",
            nearest_rows(rows, family, version, column),
            notes,
        )

    def _runtime_failure(self, fw: str, node: _Runtime, wanted: str, versions: list[str], why: list[str]) -> CompatVerdict:
        name = DISPLAY.get(fw, fw)
        arch = next((w for w in why if "predates" in w or "no longer" in w), "")
        tail = f" ({arch})" if arch else ""
        if node.family == "cuda":
            builds = self.releases.builds_text(fw, versions, "cuda")
            return _fail(R_DRIVER, f"{self.cuda.summary(node.driver)}; no {name} {wanted} build can run there{builds}{tail}")
        if node.family == "cann" and fw == "pytorch":
            listed = ", ".join(self.releases.torch_on_cann(node.version) or []) or "nothing"
            return _fail(R_CANN, f"CANN {node.version} supports torch_npu for PyTorch {listed}; the task needs {wanted}")
        if node.family == "cann":
            return _fail(R_CANN, f"CANN {node.version} is not listed for {name} {wanted}{tail}")
        label = FAMILY_LABEL.get(node.family, node.family)
        builds = self.releases.builds_text(fw, versions, node.family) if node.family in ("rocm", "dtk", "xre") else ""
        return _fail(_RUNTIME_REASON.get(node.family, R_RUNTIME), f"{label} {node.version or '?'} cannot run {name} {wanted}{builds}{tail}")

    def _check_extra(self, fw: str, extra: str, spec_text: str, request, node: _Runtime, installed_map) -> CompatVerdict:
        spec = parse_version_spec(spec_text)
        label = DISPLAY.get(extra, extra)
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
        entry = EXTRAS.get(extra)
        if entry is None:
            return CompatVerdict(True, notes=(f"extra {extra!r} is not in the compatibility KB; not checked",))
        if entry["framework"] != fw:
            return _fail(R_EXTRA, f"{label} needs {DISPLAY.get(entry['framework'], entry['framework'])}, the task uses {DISPLAY.get(fw, fw)}")
        table = entry["tables"].get(node.family)
        if table is None:
            return _fail(R_EXTRA, f"{label} runs on {', '.join(entry['tables'])}; this device uses {node.family}")
        return self.releases.extra_verdict(table, label, installed, spec, request.version, node)

    def supported_frameworks(self, model: DeviceModelSpec, stack: SoftwareStack | None) -> dict[str, list[str]]:
        """framework -> versions this model+stack can run ("*" where any version runs).
        Frameworks the device family cannot run, and those the tables do not cover, are left out."""
        family = model.runtime.value
        node = self._node_runtime(model, stack)
        out: dict[str, list[str]] = {}
        for fw in self.frameworks():
            rule = self.rule(fw, family)
            if rule is None or rule.get("check") == "unknown":
                continue
            if rule.get("check") == "any":
                out[fw] = ["*"]
                continue
            if isinstance(node, CompatVerdict) or not device_verdict(self.tables, self.cuda, family, node.generation, node.version, node.driver)[0]:
                out[fw] = []
                continue
            check = str(rule.get("check"))
            out[fw] = [v for v in self.releases.versions(fw, check, node) if self.releases.can_run(fw, check, node, v)[0]]
        return out


@lru_cache(maxsize=1)
def _builtin_kb() -> CompatibilityKB:
    return CompatibilityKB(builtin_tables())


def max_cuda_for_driver(driver: str) -> str | None:
    """Highest CUDA the driver runs natively, per the built-in KB."""
    return CompatibilityKB.builtin().max_cuda_for_driver(driver)


def supported_frameworks(model: DeviceModelSpec, stack: SoftwareStack | None) -> dict[str, list[str]]:
    return CompatibilityKB.builtin().supported_frameworks(model, stack)


__all__ = ["CompatVerdict", "CompatibilityKB", "cann_version_key", "max_cuda_for_driver", "supported_frameworks", "Version"]
