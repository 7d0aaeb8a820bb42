"""What a node's runtime can run, read from the compatibility tables: the CUDA driver and
the CUDA builds it runs, the device generation each runtime release supports, and the
version lists of the other runtimes (CANN, ROCm, DTK, XRE, Neuware).

Every function that reads a row reports it to `Trace.use`, so a verdict can name the rows
it rests on (`hetpool compat check` prints them).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from hetpool.catalog.compat_data import CompatTables, Row
from hetpool.catalog.versions import cann_base, cann_matches, cann_version_key, ints, prefix_match

# Runtime families whose versions follow CANN's scheme (8.0.RC1 < 8.0.0).
_CANN_LIKE = {"cann"}
FAMILY_LABEL = {"cuda": "CUDA", "rocm": "ROCm", "dtk": "DTK", "cann": "CANN", "neuware": "CNToolkit", "xre": "XRE", "doca": "DOCA"}


class Trace:
    """The rows one check read, in order (a context variable: the KB is shared by threads)."""

    _rows: ContextVar[list[Row] | None] = ContextVar("compat_rows", default=None)

    @classmethod
    def start(cls):
        return cls._rows.set([])

    @classmethod
    def stop(cls, token) -> list[Row]:
        rows = cls._rows.get() or []
        cls._rows.reset(token)
        return list({id(r): r for r in rows}.values())

    @classmethod
    def use(cls, row: Row | None) -> Row | None:
        rows = cls._rows.get()
        if rows is not None and row is not None:
            rows.append(row)
        return row


def traced_cache(method):
    """Memoise a method per instance and arguments (in the instance's `caches` field), with
    the rows it read: a hit reports the same rows to the Trace as the first call did."""

    def wrapper(self, *args):
        cache = self.caches.setdefault(method.__name__, {})
        if args not in cache:
            token = Trace.start()
            try:
                value = method(self, *args)
            finally:
                rows = Trace.stop(token)
            cache[args] = (value, rows)
        value, rows = cache[args]
        for row in rows:
            Trace.use(row)
        return value

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


def version_key(family: str, version: str) -> tuple:
    return cann_version_key(version) if family in _CANN_LIKE else ints(version)


def version_matches(family: str, listed: str, node: str) -> bool:
    """A listed runtime version covers the node's: CANN by its base release, others as a
    component prefix ("24.04" covers 24.04.1)."""
    if family in _CANN_LIKE:
        return cann_matches(listed, node)
    return prefix_match(listed, node)


def _padded(node: str, bound: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # Compared on the bound's components, missing ones as 0: "6.0" is "6.0.0", and 6.4.1 is within "6.4".
    n, b = ints(node), ints(bound)
    n = (n + (0,) * len(b))[: len(b)]
    return n, b


def at_least(family: str, node: str, first: str) -> bool:
    if family in _CANN_LIKE:
        return cann_base(cann_version_key(node)) >= cann_base(cann_version_key(first))
    n, b = _padded(node, first)
    return n >= b


def at_most(family: str, node: str, last: str) -> bool:
    if family in _CANN_LIKE:
        return cann_base(cann_version_key(node)) <= cann_base(cann_version_key(last))
    n, b = _padded(node, last)
    return n <= b


@dataclass
class CudaFacts:
    """The CUDA rows, indexed: toolkit -> minimum driver, minor-version compatibility, arch."""

    tables: CompatTables
    caches: dict = field(default_factory=dict, repr=False, compare=False)  # see traced_cache

    @traced_cache
    def native_cuda(self, driver: str) -> str | None:
        """The newest CUDA toolkit whose minimum driver is at most `driver`."""
        best = None
        for row in self.tables.rows("cuda-driver"):
            if ints(driver) >= ints(row.get("min_driver")) and (best is None or ints(row.get("cuda")) > ints(best.get("cuda"))):
                best = row
        return str(Trace.use(best).get("cuda")) if best else None

    @traced_cache
    def driver_for(self, cuda: str) -> Row | None:
        rows = [r for r in self.tables.rows("cuda-driver") if ints(r.get("cuda"))[:2] == ints(cuda)[:2]]
        return rows[0] if rows else None

    @traced_cache
    def build_runs(self, build: str, driver: str) -> tuple[bool, str]:
        """Does a binary built with CUDA `build` run on `driver`? (natively, or through
        CUDA minor-version compatibility within the same major, with its limits)."""
        native = self.native_cuda(driver)
        if native and ints(build)[:2] <= ints(native)[:2]:
            return True, ""
        row = self.tables.find("cuda-minor-compat", cuda_major=str(ints(build)[0]))
        if row is None:
            return False, ""
        # A driver at or past the upper bound is one of a newer major, which runs this
        # build natively (backward compatibility): the bound needs no check of its own.
        if ints(driver) >= ints(row.get("min_driver")):
            Trace.use(row)
            return True, f"CUDA {build} build runs on driver {driver} through CUDA minor-version compatibility (limited feature set)"
        return False, ""

    def summary(self, driver: str) -> str:
        native = self.native_cuda(driver) or "none"
        majors = [str(r.get("cuda_major")) for r in self.tables.rows("cuda-minor-compat") if ints(driver) >= ints(r.get("min_driver"))]
        compat = f", and {'/'.join(m + '.x' for m in sorted(majors, key=int))} builds via minor-version compatibility" if majors else ""
        return f"driver {driver} runs CUDA up to {native} natively{compat}"

    def arch(self, generation: str) -> Row | None:
        return Trace.use(self.tables.find("cuda-arch", generation=generation)) if generation else None

    @traced_cache
    def build_targets(self, build: str, generation: str) -> tuple[bool, str]:
        """Can CUDA `build` produce code for `generation` (sm_XY)? Unknown arch: yes, with a note."""
        row = self.arch(generation)
        if row is None:
            return True, (f"no cuda-arch row for {generation}; the CUDA build's architecture support is not checked" if generation else "")
        if ints(build)[:2] < ints(row.get("first_cuda"))[:2]:
            return False, f"CUDA {build} predates {generation} (first supported in CUDA {row.get('first_cuda')})"
        if row.get("last_cuda") and ints(build)[:2] > ints(row.get("last_cuda"))[:2]:
            return False, f"CUDA {build} no longer builds for {generation} (last: CUDA {row.get('last_cuda')})"
        return True, ""


def sm_number(generation: str) -> int | None:
    digits = ints(generation)
    return digits[0] if generation.startswith("sm_") and digits else None


def generation_at_least(generation: str, minimum: str) -> bool | None:
    """sm_89 >= sm_70; None when either is not an NVIDIA generation."""
    have, need = sm_number(generation), sm_number(minimum)
    return None if have is None or need is None else have >= need


def device_verdict(tables: CompatTables, cuda: CudaFacts, family: str, generation: str, version: str, driver: str) -> tuple[bool, str, str]:
    """(runs, why not, note): does this runtime release know this device generation at all?
    NVIDIA: the driver must be at least the one of the first CUDA for the arch. Others: the
    runtime-devices row gives the first (and last) release for the generation."""
    if not generation:
        return True, "", f"the device model names no generation; {FAMILY_LABEL.get(family, family)} support for it is not checked"
    if family == "cuda":
        row = cuda.arch(generation)
        if row is None or not driver:
            return True, "", f"no cuda-arch row for {generation}; driver support for it is not checked" if row is None else ""
        needed = Trace.use(cuda.driver_for(str(row.get("first_cuda"))))
        if needed is not None and ints(driver) < ints(needed.get("min_driver")):
            why = f"driver {driver} predates {generation} devices (first in CUDA {row.get('first_cuda')}, driver >= {needed.get('min_driver')})"
            return False, why, ""
        return True, "", ""
    row = Trace.use(tables.find("runtime-devices", runtime=family, generation=generation))
    if row is None:
        return True, "", f"no runtime-devices row for {generation} on {FAMILY_LABEL.get(family, family)}; support for it is not checked"
    if not version:
        return True, "", ""
    label = FAMILY_LABEL.get(family, family)
    if not at_least(family, version, str(row.get("first"))):
        if row.get("evidence") == "seen":  # the real first release is at or before this one: not a "no"
            return (
                True,
                "",
                f"{label} {version} is older than the first release the sources show {generation} working on ({row.get('first')}); not checked",
            )
        return False, f"{label} {version} predates {generation} devices (first supported in {label} {row.get('first')})", ""
    if row.get("last") and not at_most(family, version, str(row.get("last"))):
        return False, f"{label} {version} no longer supports {generation} devices (last: {label} {row.get('last')})", ""
    return True, "", ""


def known_runtime_versions(tables: CompatTables, family: str) -> list[str]:
    """Every release of `family` some table names, oldest first (for 'known' and 'nearest')."""
    found: set[str] = set()
    for row in tables.rows("runtime-devices"):
        if row.get("runtime") == family:
            found |= {str(row.get("first"))} | ({str(row.get("last"))} if row.get("last") else set())
    if family == "cann":
        found |= {str(r.get("cann")) for r in tables.rows("torch-npu")}
        for table in ("mindspore", "vllm-ascend", "paddle"):
            found |= {str(v) for r in tables.rows(table) for v in r.get("cann") or []}
    elif family in ("rocm", "dtk", "xre"):
        for table in ("pytorch", "jax", "vllm", "paddle", "tensorflow"):
            found |= {str(v) for r in tables.rows(table) for v in (r.get(family) or [])}
    elif family == "neuware":
        found |= {str(r.get("cntoolkit")) for r in tables.rows("torch-mlu") if r.get("cntoolkit")}
    return sorted(found, key=lambda v: version_key(family, v))


def runtime_known(tables: CompatTables, family: str, version: str) -> bool:
    """Is the node's release one the tables know, or at least not newer than all of them?"""
    known = known_runtime_versions(tables, family)
    if not known or not version:
        return False
    if family == "cann":
        return any(cann_matches(k, version) for k in known)
    return version_key(family, version)[:2] <= max(version_key(family, k)[:2] for k in known)


def nearest_rows(rows: list[Row], family: str, version: str, column: str) -> list[Row]:
    """The rows whose `column` release is nearest below and nearest above `version`."""
    keyed = []
    for row in rows:
        values = row.get(column)
        for v in values if isinstance(values, list) else [values]:
            if v:
                keyed.append((version_key(family, str(v)), row))
    target = version_key(family, version)
    below = [kr for kr in keyed if kr[0] < target]
    above = [kr for kr in keyed if kr[0] > target]
    picked = [max(below, key=lambda kr: kr[0])[1]] if below else []
    picked += [min(above, key=lambda kr: kr[0])[1]] if above else []
    return list({id(r): r for r in picked}.values())
