"""Can one concrete framework (or extra) release run on a node? Read from the release
tables (pytorch, jax, mindspore, paddle, tensorflow, torch-npu, torch-mlu, vllm,
vllm-ascend) by the check its `frameworks` row names:

  cuda-builds   one of the release's CUDA builds runs on the node's driver and builds for
                the device's generation (cuda-arch), above the release's min_generation
  rocm-builds   one of its ROCm builds has the node's ROCm major and a minor <= the node's
                (wheels bundle the user-space libraries), and knows the device generation
  torch-npu     the node's CANN release lists a torch_npu for the release
  version-list  the release row lists the node's runtime release (column named after the
                runtime: cann, xre, dtk, rocm) and, if it names generations, the device's
  torch-mlu     a torch_mlu release pairs with the PyTorch series, on this CNToolkit or newer
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from hetpool.catalog.compat_data import CompatTables, Row
from hetpool.catalog.compat_runtime import CudaFacts, Trace, at_least, generation_at_least, traced_cache, version_matches
from hetpool.catalog.compat_verdict import R_EXTRA, R_NO_RELEASE, CompatVerdict, _fail, _unknown
from hetpool.catalog.versions import build_fits, cann_base, cann_version_key, ints, local_build, parse_version, prefix_match
from hetpool.core.tasks import parse_version_spec


@dataclass(frozen=True)
class _Node:
    """The node facts a release check reads (hashable, so results can be memoised)."""

    family: str
    generation: str
    driver: str
    version: str


_RELEASE_INDEX: dict[int, tuple[tuple[Row, ...], dict[Version, list[Row]]]] = {}


def _release_index(rows: tuple[Row, ...]) -> dict[Version, list[Row]]:
    """Release -> rows listing it, built once per table (checks ask this thousands of times)."""
    found = _RELEASE_INDEX.get(id(rows))
    if found is None or found[0] is not rows:
        if len(_RELEASE_INDEX) > 256:  # one entry per table of each KB built; KBs are rebuilt only when rules change
            _RELEASE_INDEX.clear()
        index: dict[Version, list[Row]] = {}
        for row in rows:
            for release in row.get("releases") or []:
                if (v := parse_version(release)) is not None:
                    index.setdefault(v, []).append(row)
        found = _RELEASE_INDEX[id(rows)] = (rows, index)
    return found[1]


def find_releases(rows: tuple[Row, ...], version: str) -> list[Row]:
    """The release rows for a concrete version: those listing it in `releases`, else those
    of the longest series prefix (a table may hold several rows per series, one per source)."""
    v = parse_version(version)
    listed = _release_index(rows).get(Version(v.public)) if v is not None else None
    if listed:
        return list(listed)
    best = max((len(ints(str(r.get("series")))) for r in rows if prefix_match(str(r.get("series")), version)), default=0)
    return [r for r in rows if best and len(ints(str(r.get("series")))) == best and prefix_match(str(r.get("series")), version)]


def find_release(rows: tuple[Row, ...], version: str) -> Row | None:
    found = find_releases(rows, version)
    return found[0] if found else None


@dataclass
class Releases:
    tables: CompatTables
    cuda: CudaFacts
    caches: dict = field(default_factory=dict, repr=False, compare=False)  # see traced_cache

    # -- which releases exist ------------------------------------------------------------

    def torch_on_cann(self, cann: str) -> list[str] | None:
        """PyTorch versions (base of each torch_npu) for a CANN release, or None if unknown.
        The exact release's rows first; a build of it (8.0.RC2.beta1) reads its base release."""
        rows = self.tables.rows("torch-npu")
        key = cann_version_key(cann)
        found = [r for r in rows if cann_version_key(str(r.get("cann"))) == key]
        found = found or [r for r in rows if cann_base(cann_version_key(str(r.get("cann")))) == cann_base(key)]
        if not found:
            return None
        versions: list[str] = []
        for row in found:
            Trace.use(row)
            versions += [Version(v).base_version for v in row.get("torch_npu")]
        return list(dict.fromkeys(versions))

    def versions(self, fw: str, check: str, node) -> list[str]:
        found = {r for row in self.tables.rows(fw) for r in row.get("releases") or []}
        if check == "torch-npu":  # every PyTorch some CANN release has a torch_npu for
            found |= {Version(v).base_version for row in self.tables.rows("torch-npu") for v in row.get("torch_npu")}
        return sorted(found, key=Version, reverse=True)

    def known(self, fw: str, check: str, node, version: str) -> bool:
        if find_release(self.tables.rows(fw), version) is not None:
            return True
        v = parse_version(version)
        return check == "torch-npu" and v is not None and v.base_version in (self.torch_on_cann(node.version) or [])

    def informed(self, fw: str, check: str, family: str, version: str) -> bool:
        """Do the rows say anything about `version` on `family`? A version-list row with an
        empty column for the family has no source for it (unknown, not "not listed")."""
        if check != "version-list":
            return True
        return any(row.get(family) for row in find_releases(self.tables.rows(fw), version))

    # -- can it run ----------------------------------------------------------------------

    def can_run(self, fw: str, check: str, node, version: str) -> tuple[bool, list[str]]:
        return self._can_run(fw, check, node.family, node.generation, node.driver, node.version, version)

    @traced_cache
    def _can_run(self, fw: str, check: str, family: str, generation: str, driver: str, runtime: str, version: str) -> tuple[bool, list[str]]:
        node = _Node(family, generation, driver, runtime)
        build = local_build(version)
        if build and not build_fits(build[0], node.family):
            return False, [f"installed build '+{parse_version(version).local}' is not for {node.family}"]
        v = parse_version(version)
        if v is None:
            return False, []
        base = v.base_version
        if check == "torch-npu":
            return base in (self.torch_on_cann(node.version) or []), []
        if check == "torch-mlu":
            return self._torch_mlu(base, node)
        rows = find_releases(self.tables.rows(fw), v.public)  # 2.6.0rc1 is its own release, not 2.6.0
        if not rows:
            return False, []
        why: list[str] = []
        for row in rows:
            ok, notes = self._row_runs(row, check, node, build[1] if build else "")
            if ok:
                Trace.use(row)
                return True, ([] if row.verified else [f"{fw} {row.get('series')} compatibility data is not verified"]) + notes
            why += notes
        for row in rows:  # a refusal rests on every row it read
            Trace.use(row)
        return False, why

    def _row_runs(self, row: Row, check: str, node, pinned: str) -> tuple[bool, list[str]]:
        if check == "version-list":
            return self._listed(row, node)
        if check == "cuda-builds":
            return self._cuda(row, node, pinned)
        if check == "rocm-builds":
            return self._rocm(row, node, pinned)
        return False, []

    def _cuda(self, row: Row, node, pinned: str) -> tuple[bool, list[str]]:
        minimum = row.get("min_generation")
        if minimum and generation_at_least(node.generation, minimum) is False:
            return False, [f"{row.table} {row.get('series')} needs {minimum} or newer; the device is {node.generation}"]
        builds = cuda_builds(row)
        if pinned:
            builds = [(b, exp) for b, exp in builds if ints(b)[:2] == ints(pinned)[:2]] or [(pinned, False)]
        results, why = [], []
        for b, exp in builds:
            targets, reason = self.cuda.build_targets(b, node.generation)
            if not targets:
                why.append(reason)
                continue
            ok, note = self.cuda.build_runs(b, node.driver)
            if ok:
                results.append((bool(note), exp, b, [n for n in (reason, note) if n]))
        if not results:
            return False, why
        # Prefer a build the driver runs natively, then a stable one.
        compat, exp, b, notes = min(results, key=lambda r: (r[0], r[1]))
        return True, notes + ([f"uses the experimental CUDA {b} build"] if exp else [])

    def _rocm(self, row: Row, node, pinned: str) -> tuple[bool, list[str]]:
        builds = [str(b) for b in row.get(node.family) or row.get("rocm") or []]
        if pinned:
            builds = [b for b in builds if ints(b)[:2] == ints(pinned)[:2]] or [pinned]
        first = Trace.use(self.tables.find("runtime-devices", runtime="rocm", generation=node.generation)) if node.family == "rocm" else None
        node_v = ints(node.version)[:2]
        why = []
        for b in builds:
            if first is not None and not at_least("rocm", b, str(first.get("first"))):
                why.append(f"ROCm {b} build predates {node.generation} (first in ROCm {first.get('first')})")
                continue
            if ints(b)[0] == node_v[0] and ints(b)[:2] <= node_v:
                return True, []
        return False, why

    def _listed(self, row: Row, node) -> tuple[bool, list[str]]:
        listed = [str(v) for v in row.get(node.family) or []]
        if not any(version_matches(node.family, v, node.version) for v in listed):
            return False, []
        gens = row.get("generations") or []
        if gens and node.generation and node.generation not in gens:
            return False, [f"{row.table} {row.get('series')} builds support {', '.join(gens)}; the device is {node.generation}"]
        return True, []

    def _torch_mlu(self, base: str, node) -> tuple[bool, list[str]]:
        why = []
        for row in self.tables.rows("torch-mlu"):
            if not prefix_match(str(row.get("pytorch")), base):
                continue
            need = row.get("cntoolkit")
            if need and not at_least("neuware", node.version, str(need)):
                why.append(f"torch_mlu {row.get('torch_mlu')} needs CNToolkit {need} or newer")
                continue
            Trace.use(row)
            return True, [f"PyTorch on Cambricon runs through torch_mlu {row.get('torch_mlu')}"]
        return False, why

    def builds_text(self, fw: str, versions: list[str], family: str) -> str:
        """' (CUDA builds 2.8: 12.6, 12.8, 12.9)' for the release series among `versions`."""
        rows = {id(r): r for v in versions for r in find_releases(self.tables.rows(fw), v)}

        def builds(r: Row) -> list[str]:
            return [b for b, _ in cuda_builds(r)] if family == "cuda" else list(r.get(family) or r.get("rocm") or [])

        parts = [f"{r.get('series')}: {', '.join(builds(r)) or 'none'}" for r in sorted(rows.values(), key=lambda r: ints(str(r.get("series"))))]
        label = {"cuda": "CUDA", "rocm": "ROCm", "dtk": "DTK", "xre": "XRE"}.get(family, family)
        return f" ({label} builds {'; '.join(parts)})" if parts else ""

    # -- extras (vLLM) -------------------------------------------------------------------

    def extra_verdict(self, table: str, label: str, installed: str | None, spec, fw_spec_text: str, node) -> CompatVerdict:
        rows = self.tables.rows(table)
        if installed:
            versions = [installed]
            if find_release(rows, installed) is None:
                return _unknown(R_NO_RELEASE, f"{label} {installed} is not in the {table} table", rows[-1:])
        else:
            versions = sorted({r for row in rows for r in row.get("releases") or [] if spec.contains(r, prereleases=True)}, key=Version, reverse=True)
            if not versions:
                return _unknown(R_NO_RELEASE, f"no {label} release in the {table} table matches {spec or 'any'}", rows[-1:])
        fw_spec = _spec(fw_spec_text)
        why: list[str] = []
        for version in versions:
            for row in find_releases(rows, version):
                ok, notes = self._extra_row(row, label, version, node, fw_spec, installed, why)
                if ok:
                    Trace.use(row)
                    return CompatVerdict(True, notes=tuple(notes))
        where = (
            f"CANN {node.version} (vllm-ascend matrix)"
            if node.family == "cann"
            else (f"this node ({self.cuda.summary(node.driver)})" if node.family == "cuda" else f"{node.family} {node.version}")
        )
        wanted = installed or str(spec) or "any version"
        if why and all(w.startswith(_GAP) for w in why):  # only missing facts stood in the way: not a "no"
            return _unknown(R_NO_RELEASE, f"the {table} rows for {label} {wanted} have no sourced {node.family} build", rows[-1:])
        why = [w.removeprefix(_GAP) for w in why]
        tail = f" with PyTorch {fw_spec_text}" if fw_spec_text else ""
        because = f" ({why[0]})" if why else ""
        return _fail(R_EXTRA, f"no {label} release for {wanted} runs on {where}{tail}{because}")

    def _extra_row(self, row: Row, label: str, version: str, node, fw_spec, installed, why: list[str]) -> tuple[bool, list[str]]:
        torch = str(row.get("torch") or "")
        if not installed and torch and fw_spec is not None and not fw_spec.contains(torch, prereleases=True):
            return False, []
        gens = row.get("generations") or row.get("rocm_generations") or []
        if node.family in ("cann", "rocm") and gens and node.generation and node.generation not in gens:
            why.append(f"{row.table} {row.get('series')} supports {', '.join(gens)}; the device is {node.generation}")
            return False, []
        if node.family == "cann":
            if not any(version_matches("cann", str(c), node.version) for c in row.get("cann") or []):
                return False, []
        elif node.family == "rocm" and not row.get("rocm"):
            why.append(f"{_GAP}vLLM {row.get('series')} has no sourced ROCm build")
            return False, []
        else:
            minimum = row.get("min_generation")
            if node.family == "cuda" and minimum and generation_at_least(node.generation, minimum) is False:
                why.append(f"vLLM {row.get('series')} needs {minimum} or newer; the device is {node.generation}")
                return False, []
            pytorch = find_release(self.tables.rows("pytorch"), torch) if torch else None
            check = "cuda-builds" if node.family == "cuda" else "rocm-builds"
            if torch and (pytorch is None or not self.can_run("pytorch", check, node, torch)[0]):
                return False, []
        notes = [f"{label} {version} is built against torch {torch}"] if torch else []
        if node.family == "cann":
            notes.insert(0, f"on Ascend {label} means vllm-ascend {row.get('series')} (CANN {', '.join(row.get('cann') or [])})")
        if not row.verified:
            notes.append(f"{label} {row.get('series')} compatibility data is not verified")
        return True, notes


_GAP = "gap: "  # marks a skip for lack of a sourced fact (an empty column), as opposed to a fact that says no


def cuda_builds(row: Row) -> list[tuple[str, bool]]:
    """(CUDA build, experimental?) of a release row. JAX rows name CUDA majors and the lowest
    CUDA their wheels accept; the others list builds."""
    if row.table == "jax":
        minimum = str(row.get("min_cuda") or "")
        return [(minimum if minimum and ints(minimum)[0] == ints(m)[0] else f"{m}.0", False) for m in row.get("cuda") or []]
    cuda: Any = row.get("cuda") or []
    cuda = cuda if isinstance(cuda, list) else [cuda]
    return [(str(b), False) for b in cuda] + [(str(b), True) for b in row.get("cuda_experimental") or []]


def _spec(text: str):
    return parse_version_spec(text) if text else None
