"""Every row of the built-in compatibility tables, checked at the boundaries it states:
the last supported and the first unsupported release on each side. Derived from the rows
themselves, so a row added to the tables is checked without a new test — and a row the
interpreter misreads fails here, naming the row."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from packaging.version import Version

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.compat_data import TABLES, builtin_tables
from hetpool.catalog.compat_runtime import at_least, at_most, device_verdict, known_runtime_versions, version_key
from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.versions import ints
from hetpool.core.inventory import RuntimeName, RuntimeVersion, SoftwareStack
from hetpool.core.tasks import FrameworkRequest

KB = CompatibilityKB.builtin()
T = builtin_tables()
CATALOG = DeviceCatalog.builtin()
BASE_MODEL = {
    "cuda": "nvidia-a100-80g",
    "cann": "ascend-910b2",
    "rocm": "amd-mi300x",
    "dtk": "hygon-k100",
    "neuware": "cambricon-mlu370-x8",
    "xre": "kunlunxin-p800",
}
NEW_DRIVER = "590.44.01"  # runs every CUDA build of the tables natively or through minor-version compatibility


def model_for(runtime: str, generation: str):
    return CATALOG.get(BASE_MODEL[runtime]).model_copy(update={"generation": generation})


def node(runtime: str, version: str = "", driver: str = "") -> SoftwareStack:
    rt = RuntimeVersion(name=RuntimeName(runtime), version=version) if runtime != "cuda" else None
    return SoftwareStack(driver=driver, runtime=rt)


def fw(name: str, version: str = "", extras: dict[str, str] | None = None) -> FrameworkRequest:
    return FrameworkRequest(name=name, version=version, extras=extras or {})


def just_below(version: str) -> str:
    """570.26 -> 570.25; 450.36.06 -> 450.36.05; 8.0 -> 7.99 (borrowing)."""
    parts = list(ints(version))
    i = len(parts) - 1
    while i >= 0 and parts[i] == 0:
        parts[i] = 99
        i -= 1
    parts[i] -= 1
    return ".".join(str(p) for p in parts)


def cuda_toolkits() -> list[str]:
    return sorted((str(r.get("cuda")) for r in T.rows("cuda-driver")), key=ints)


def ids(rows):
    return [r.summary()[:60] for r in rows]


# ------------------------------------------------------------------ every row is sourced


def test_every_row_carries_a_source_and_a_date_and_unsourced_rows_say_so() -> None:
    rows = T.all_rows()
    assert len(rows) > 150
    today = dt.date(2026, 12, 31)
    for row in rows:
        assert row.source.strip() and dt.date.fromisoformat(row.checked) <= today, row.cite()
        if row.source.lower().startswith("unsourced") or "3rd-party" in row.source.lower():
            assert not row.verified, f"{row.cite()}: a row without a primary source carries verified: false"
    assert {r.table for r in rows} == set(TABLES), "every table has built-in rows"


def test_device_generation_rows_have_one_row_per_key() -> None:
    for table in ("cuda-arch", "runtime-devices", "cuda-driver", "cuda-minor-compat", "frameworks"):
        keys = [r.key for r in T.rows(table)]
        assert len(keys) == len(set(keys)), f"{table}: a key twice would make the interpreter pick one silently"


# ------------------------------------------------------------------ NVIDIA


@pytest.mark.parametrize("row", T.rows("cuda-driver"), ids=ids(T.rows("cuda-driver")))
def test_cuda_toolkit_needs_its_minimum_driver(row) -> None:
    cuda, driver = str(row.get("cuda")), str(row.get("min_driver"))
    assert ints(KB.max_cuda_for_driver(driver))[:2] >= ints(cuda)[:2]
    below = KB.max_cuda_for_driver(just_below(driver))
    assert below is None or ints(below)[:2] < ints(cuda)[:2], f"driver {just_below(driver)} should not run CUDA {cuda} natively"


@pytest.mark.parametrize("row", T.rows("cuda-minor-compat"), ids=ids(T.rows("cuda-minor-compat")))
def test_minor_version_compatibility_starts_at_its_driver(row) -> None:
    major, driver = str(row.get("cuda_major")), str(row.get("min_driver"))
    newest = max((c for c in cuda_toolkits() if ints(c)[0] == int(major)), key=ints)
    assert KB.cuda.build_runs(newest, driver)[0], f"a CUDA {newest} build runs on {driver}"
    assert not KB.cuda.build_runs(newest, just_below(driver))[0], f"but not on {just_below(driver)}"


@pytest.mark.parametrize("row", T.rows("cuda-arch"), ids=ids(T.rows("cuda-arch")))
def test_cuda_builds_target_a_generation_from_its_first_to_its_last_toolkit(row) -> None:
    gen, first, last = row.get("generation"), str(row.get("first_cuda")), row.get("last_cuda")
    toolkits = cuda_toolkits()
    assert KB.cuda.build_targets(first, gen)[0]
    older = [c for c in toolkits if ints(c)[:2] < ints(first)[:2]]
    if older:
        assert not KB.cuda.build_targets(older[-1], gen)[0], f"CUDA {older[-1]} predates {gen}"
    if last:
        assert KB.cuda.build_targets(str(last), gen)[0]
        newer = [c for c in toolkits if ints(c)[:2] > ints(str(last))[:2]]
        assert newer and not KB.cuda.build_targets(newer[0], gen)[0], f"CUDA {newer[0]} dropped {gen}"
    # The driver must know the device: the first toolkit's minimum driver, and not one below it.
    model = model_for("cuda", gen)
    needed = KB.cuda.driver_for(first)
    if needed is not None:
        assert device_verdict(T, KB.cuda, "cuda", gen, "", str(needed.get("min_driver")))[0]
        assert not device_verdict(T, KB.cuda, "cuda", gen, "", just_below(str(needed.get("min_driver"))))[0]
        assert KB.check(model, node("cuda", driver=just_below(str(needed.get("min_driver")))), fw("pytorch"), has_image=True).status == "incompatible"


def _cuda_release_rows(table: str):
    return [r for r in T.rows(table) if r.get("cuda")]


@pytest.mark.parametrize("table", ["pytorch", "jax", "paddle", "tensorflow"])
def test_cuda_builds_of_every_release_run_from_their_driver_and_not_below(table: str) -> None:
    gpu = model_for("cuda", "sm_90")
    for row in _cuda_release_rows(table):
        release = str(row.get("releases")[-1])
        from hetpool.catalog.compat_releases import cuda_builds

        builds = [b for b, _ in cuda_builds(row) if KB.cuda.build_targets(b, "sm_90")[0]]
        if not builds:
            continue
        newest = max(builds, key=ints)
        driver = KB.cuda.driver_for(newest)
        assert driver is not None, f"{row.cite()}: CUDA {newest} has no cuda-driver row"
        verdict = KB.check(gpu, node("cuda", driver=str(driver.get("min_driver"))), fw(table, f"=={release}"), has_image=True)
        assert verdict.ok, f"{row.cite()} on driver {driver.get('min_driver')}: {verdict.detail}"
        # Below the oldest build's minor-version-compatibility floor nothing of the release runs.
        oldest_major = min(ints(b)[0] for b in builds)
        floor = T.find("cuda-minor-compat", cuda_major=str(oldest_major))
        lowest_native = min((KB.cuda.driver_for(b) for b in builds if KB.cuda.driver_for(b)), key=lambda r: ints(str(r.get("min_driver"))))
        cut = (
            min(ints(str(floor.get("min_driver"))), ints(str(lowest_native.get("min_driver"))))
            if floor
            else ints(str(lowest_native.get("min_driver")))
        )
        below = just_below(".".join(map(str, cut)))
        refused = KB.check(gpu, node("cuda", driver=below), fw(table, f"=={release}"), has_image=True)
        assert refused.status == "incompatible", f"{row.cite()} on driver {below}: {refused.detail}"


@pytest.mark.parametrize("table", ["jax", "vllm"])
def test_a_minimum_generation_admits_it_and_refuses_the_one_below(table: str) -> None:
    gens = sorted({str(r.get("generation")) for r in T.rows("cuda-arch")}, key=lambda g: ints(g))
    for row in T.rows(table):
        minimum = row.get("min_generation")
        if not minimum or minimum not in gens:
            continue
        release = str(row.get("releases")[-1])
        request = fw(table, f"=={release}") if table == "jax" else fw("pytorch", extras={"vllm": f"=={release}"})
        ok = KB.check(model_for("cuda", minimum), node("cuda", driver=NEW_DRIVER), request, has_image=True)
        assert ok.ok, f"{row.cite()} on {minimum}: {ok.detail}"
        below = [g for g in gens if ints(g) < ints(minimum)]
        if below:
            refused = KB.check(model_for("cuda", below[-1]), node("cuda", driver=NEW_DRIVER), request, has_image=True)
            assert not refused.ok, f"{row.cite()} on {below[-1]}"


# ------------------------------------------------------------------ ROCm


def test_rocm_builds_run_on_their_release_and_not_on_the_minor_below_or_the_next_major() -> None:
    gpu = model_for("rocm", "gfx942")
    first = ints(str(T.find("runtime-devices", runtime="rocm", generation="gfx942").get("first")))
    for row in T.rows("pytorch"):
        for build in row.get("rocm") or []:
            if ints(build) < first:
                continue
            release = f"=={row.get('releases')[-1]}"
            assert KB.check(gpu, node("rocm", build), fw("pytorch", release), has_image=True).ok, row.cite()
            major, minor = ints(build)[:2]
            others = [ints(b)[:2] for b in row.get("rocm") if b != build]
            if minor > 0 and not any(o[0] == major and o <= (major, minor - 1) for o in others):
                assert not KB.check(gpu, node("rocm", f"{major}.{minor - 1}"), fw("pytorch", release), has_image=True).ok, row.cite()


# ------------------------------------------------------------------ device runtimes


@pytest.mark.parametrize("row", T.rows("runtime-devices"), ids=ids(T.rows("runtime-devices")))
def test_a_runtime_supports_a_generation_from_its_first_release(row) -> None:
    runtime, gen, first, last = str(row.get("runtime")), str(row.get("generation")), str(row.get("first")), row.get("last")
    assert device_verdict(T, KB.cuda, runtime, gen, first, "")[0]
    known = known_runtime_versions(T, runtime)
    older = [v for v in known if not at_least(runtime, v, first)]
    candidate = older[-1] if older else just_below(first)
    runs, _, note = device_verdict(T, KB.cuda, runtime, gen, candidate, "")
    if row.get("evidence") == "seen":  # only the earliest release seen working: older ones are noted, not refused
        assert runs and "not checked" in note, row.cite()
    else:
        assert not runs, f"{runtime} {candidate} predates {gen}"
    if last:
        assert device_verdict(T, KB.cuda, runtime, gen, str(last), "")[0]
        newer = [v for v in known if not at_most(runtime, v, str(last))]
        assert newer and not device_verdict(T, KB.cuda, runtime, gen, newer[0], "")[0]


# ------------------------------------------------------------------ Ascend


def _torch_on(cann: str) -> set[str]:
    return {Version(v).base_version for r in T.rows("torch-npu") if r.get("cann") == cann for v in r.get("torch_npu")}


ALL_TORCH_NPU = sorted({Version(v).base_version for r in T.rows("torch-npu") for v in r.get("torch_npu")}, key=Version)


@pytest.mark.parametrize("cann", sorted({str(r.get("cann")) for r in T.rows("torch-npu")}))
def test_torch_npu_rows_admit_their_pytorch_range_and_refuse_the_releases_next_to_it(cann: str) -> None:
    npu = model_for("cann", "ascend910")  # the oldest generation: every CANN release of the table supports it
    listed = sorted(_torch_on(cann), key=Version)
    for version in (listed[0], listed[-1]):
        verdict = KB.check(npu, node("cann", cann), fw("pytorch", f"=={version}"), has_image=True)
        assert verdict.ok, f"CANN {cann}, PyTorch {version}: {verdict.detail}"
    above = [v for v in ALL_TORCH_NPU if Version(v) > Version(listed[-1])]
    below = [v for v in ALL_TORCH_NPU if Version(v) < Version(listed[0])]
    for version in above[:1] + below[-1:]:
        verdict = KB.check(npu, node("cann", cann), fw("pytorch", f"=={version}"), has_image=True)
        assert verdict.status == "incompatible", f"CANN {cann} should refuse PyTorch {version}: {verdict.detail}"


ALL_CANN = known_runtime_versions(T, "cann")


def _neighbours(listed: list[str]) -> list[str]:
    """The known CANN releases just below the lowest and just above the highest listed one."""
    keys = [version_key("cann", c) for c in listed]
    below = [c for c in ALL_CANN if version_key("cann", c) < min(keys)]
    above = [c for c in ALL_CANN if version_key("cann", c) > max(keys)]
    return below[-1:] + above[:1]


@pytest.mark.parametrize("release", sorted({v for r in T.rows("mindspore") for v in r.get("releases")}, key=Version))
def test_mindspore_releases_install_on_their_cann_and_not_next_to_it(release: str) -> None:
    npu = model_for("cann", "ascend910")
    listed = sorted({c for r in T.rows("mindspore") if release in r.get("releases") for c in r.get("cann")}, key=lambda c: version_key("cann", c))
    for cann in listed:
        verdict = KB.check(npu, node("cann", cann), fw("mindspore", f"=={release}"), has_image=True)
        assert verdict.ok, f"MindSpore {release} on CANN {cann}: {verdict.detail}"
    for cann in _neighbours(listed):
        if any(version_key("cann", c)[:4] == version_key("cann", cann)[:4] for c in listed):
            continue
        verdict = KB.check(npu, node("cann", cann), fw("mindspore", f"=={release}"), has_image=True)
        assert not verdict.ok, f"MindSpore {release} should not install on CANN {cann}"


@pytest.mark.parametrize("row", T.rows("vllm-ascend"), ids=ids(T.rows("vllm-ascend")))
def test_vllm_ascend_releases_run_on_their_cann_and_chips_only(row) -> None:
    release = str(row.get("releases")[-1])
    gens = row.get("generations") or ["ascend910b"]
    request = fw("pytorch", extras={"vllm-ascend": f"=={release}"})
    same = [r for r in T.rows("vllm-ascend") if release in r.get("releases")]
    listed = sorted({c for r in same for c in r.get("cann")}, key=lambda c: version_key("cann", c))
    for cann in row.get("cann"):
        verdict = KB.check(model_for("cann", gens[0]), node("cann", cann), request, has_image=True)
        assert verdict.ok, f"{row.cite()}: {verdict.detail}"
    for cann in _neighbours(listed):
        if any(re.fullmatch(r"\d+\.\d+", c) and ints(cann)[:2] == ints(c) for c in listed):
            continue  # "8.5" lists every 8.5.x
        assert not KB.check(model_for("cann", gens[0]), node("cann", cann), request, has_image=True).ok, f"{row.cite()} on CANN {cann}"
    chips = {g for r in same for g in (r.get("generations") or [])}
    if chips and "ascend910" not in chips:
        refused = KB.check(model_for("cann", "ascend910"), node("cann", row.get("cann")[0]), request, has_image=True)
        assert not refused.ok, f"{row.cite()} should not run on ascend910"


# ------------------------------------------------------------------ Cambricon


@pytest.mark.parametrize("row", T.rows("torch-mlu"), ids=ids(T.rows("torch-mlu")))
def test_torch_mlu_rows_need_their_cntoolkit(row) -> None:
    mlu = model_for("neuware", "mlu370")
    pytorch, toolkit = str(row.get("pytorch")), str(row.get("cntoolkit"))
    assert KB.check(mlu, node("neuware", toolkit), fw("pytorch", f"=={pytorch}"), has_image=True).ok, row.cite()
    below = just_below(toolkit)
    others = [r for r in T.rows("torch-mlu") if r.get("pytorch") == pytorch and ints(str(r.get("cntoolkit"))) <= ints(below)]
    if not others:
        assert not KB.check(mlu, node("neuware", below), fw("pytorch", f"=={pytorch}"), has_image=True).ok, f"{row.cite()} on {below}"


# ------------------------------------------------------------------ which runtimes a framework runs on


@pytest.mark.parametrize("framework", KB.frameworks())
def test_a_framework_runs_only_where_a_frameworks_row_says_and_unknown_where_it_says_so(framework: str) -> None:
    for runtime, base in BASE_MODEL.items():
        model = CATALOG.get(base)
        rule = KB.rule(framework, runtime)
        verdict = KB.check(model, node(runtime, "1.0", driver=NEW_DRIVER), fw(framework), has_image=True)
        if rule is None:
            assert verdict.reason == "framework not supported on device", (framework, runtime)
        elif rule.get("check") == "unknown":
            assert verdict.status == "unknown", (framework, runtime, verdict)
