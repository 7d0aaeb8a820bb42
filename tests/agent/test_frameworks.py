"""Framework detection from distribution metadata (hetpool.agent.frameworks).

The environments are real: site-packages directories holding dist-info / egg-info
metadata files as pip and setuptools write them, a venv made with `python -m venv`, and
this project's own interpreter."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from hetpool.agent.frameworks import FRAMEWORK_DISTRIBUTIONS, inspect_env, inspect_envs, os_pretty_name, scan_site_dir, torch_build
from hetpool.catalog.compat import EXTRAS, R_BUILD_MISMATCH, CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import SoftwareStack
from hetpool.core.tasks import FrameworkRequest

DESCRIPTION = "Tensors and Dynamic neural networks in Python with strong GPU acceleration\n" * 50


def dist_info(site: Path, name: str, version: str, *, dir_name: str | None = None) -> None:
    """A wheel's `<name>-<version>.dist-info/METADATA` (name escaped as wheels do)."""
    folder = site / (dir_name or f"{name.replace('-', '_')}-{version}.dist-info")
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\nRequires-Dist: filelock\n\n{DESCRIPTION}", encoding="utf-8"
    )


def egg_info(site: Path, name: str, version: str, *, as_file: bool = False) -> None:
    """setuptools' `<name>.egg-info/PKG-INFO`, or distutils' single-file egg-info."""
    text = f"Metadata-Version: 1.2\nName: {name}\nVersion: {version}\nSummary: x\n"
    if as_file:
        (site / f"{name}-{version}.egg-info").write_text(text, encoding="utf-8")
    else:
        (site / f"{name}.egg-info").mkdir(parents=True)
        (site / f"{name}.egg-info" / "PKG-INFO").write_text(text, encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "env" / "lib" / "python3.10" / "site-packages"
    site.mkdir(parents=True)
    dist_info(site, "torch", "2.4.1+cu121")
    dist_info(site, "vllm", "0.6.3.post1")
    dist_info(site, "paddlepaddle-gpu", "2.6.1")
    dist_info(site, "numpy", "1.26.4")  # not a framework
    dist_info(site, "torch-npu", "2.4.0.post2")
    egg_info(site, "transformers", "4.44.2")
    egg_info(site, "deepspeed", "0.15.1", as_file=True)
    return site


def test_site_dir_metadata(site: Path):
    assert scan_site_dir(site) == {
        "deepspeed": "0.15.1",
        "paddle": "2.6.1",
        "pytorch": "2.4.1+cu121",
        "torch_npu": "2.4.0.post2",
        "transformers": "4.44.2",
        "vllm": "0.6.3.post1",
    }


def test_metadata_name_decides_not_the_folder_name(tmp_path: Path):
    # A folder named like torch whose metadata says otherwise is not torch.
    dist_info(tmp_path, "torchvision", "0.19.1", dir_name="torch-0.19.1.dist-info")
    dist_info(tmp_path, "jax", "0.4.31")
    assert scan_site_dir(tmp_path) == {"jax": "0.4.31"}


def test_env_forms(site: Path):
    by_dir = inspect_env(site)
    assert (by_dir.python, by_dir.frameworks["pytorch"], by_dir.warnings) == ("3.10", "2.4.1+cu121", [])
    # A prefix without a runnable interpreter: its lib/ layout is read.
    by_prefix = inspect_env(site.parents[2])
    assert (by_prefix.python, by_prefix.site_dirs, by_prefix.frameworks) == ("3.10", [str(site)], by_dir.frameworks)
    missing = inspect_env(site.parent / "nope")
    assert missing.frameworks == {} and missing.warnings == [f"python env {site.parent / 'nope'}: not found"]
    empty = inspect_env(site.parents[3])  # neither an interpreter, a prefix nor site-packages
    assert empty.frameworks == {} and "no site-packages found" in empty.warnings[0]


def test_a_real_venv_by_prefix_and_by_interpreter(tmp_path: Path):
    prefix = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120)
    [venv_site] = list(prefix.glob("lib/python*/site-packages"))
    dist_info(venv_site, "mindspore", "2.3.1")
    dist_info(venv_site, "triton", "3.0.0")
    for path in (prefix, prefix / "bin" / "python"):
        scan = inspect_env(path)
        assert scan.warnings == []
        assert scan.python == platform.python_version()
        assert str(venv_site) in scan.site_dirs
        assert scan.frameworks == {"mindspore": "2.3.1", "triton": "3.0.0"}


def test_this_projects_interpreter():
    scan = inspect_env(sys.executable)
    assert scan.warnings == [] and scan.python == platform.python_version()
    assert isinstance(scan.frameworks, dict) and "numpy" not in scan.frameworks
    assert ("pytorch" in scan.frameworks) == (importlib.util.find_spec("torch") is not None)


def test_a_broken_interpreter_is_a_warning(tmp_path: Path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    scan = inspect_env(fake)
    assert scan.frameworks == {} and "cannot ask the interpreter" in scan.warnings[0]


def test_merging_envs_keeps_the_highest_version(site: Path, tmp_path: Path):
    other = tmp_path / "other" / "site-packages"
    other.mkdir(parents=True)
    dist_info(other, "torch", "2.1.0")
    dist_info(other, "tensorflow-cpu", "2.17.0")
    merged = inspect_envs([other, site])
    assert merged.frameworks["pytorch"] == "2.4.1+cu121" and merged.frameworks["tensorflow"] == "2.17.0"
    assert merged.python == "3.10"  # the first env that names its python version
    assert merged.runtime_hint == {"name": "cuda", "version": "12.1"}
    assert f"pytorch: environments disagree; reporting 2.4.1+cu121 ({site}), also found 2.1.0 in {other}" in merged.warnings
    assert [e.path for e in merged.envs] == [str(other), str(site)]
    assert inspect_envs([site, other]).python == "3.10"


def test_torch_build_labels():
    assert torch_build("2.4.1+cu121") == ("cuda", "12.1")
    assert torch_build("2.5.1+rocm6.2") == ("rocm", "6.2")
    assert torch_build("2.4.0+cpu") == ("none", "")
    assert torch_build("2.4.0") is None
    assert inspect_envs([]).runtime_hint is None


def test_os_release(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\n')
    assert os_pretty_name(tmp_path) == "Ubuntu 22.04.4 LTS"
    assert os_pretty_name(tmp_path / "nothing") == ""
    try:
        expected = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        expected = ""
    assert os_pretty_name() == expected and inspect_envs(None).os == expected


def test_names_are_the_compatibility_kbs():
    kb = CompatibilityKB.builtin()
    for framework in set(FRAMEWORK_DISTRIBUTIONS.values()):
        canonical = kb.installed_framework(framework)
        assert canonical in (None, framework), f"{framework} is spelt {canonical} in the KB"
    python_frameworks = {"pytorch", "mindspore", "paddle", "tensorflow", "jax"}
    assert python_frameworks <= set(kb.frameworks()) and python_frameworks <= set(FRAMEWORK_DISTRIBUTIONS.values())
    assert set(EXTRAS) <= set(FRAMEWORK_DISTRIBUTIONS.values())


def test_detected_frameworks_feed_the_compatibility_check(site: Path):
    found = inspect_envs([site])
    a100 = DeviceCatalog.builtin().get("nvidia-a100-80g")
    kb = CompatibilityKB.builtin()
    stack = SoftwareStack(driver="535.54.03", frameworks=found.frameworks)
    assert kb.check(a100, stack, FrameworkRequest(name="pytorch", version="2.4", extras={"vllm": ">=0.6"})).ok
    rocm = SoftwareStack(driver="535.54.03", frameworks={**found.frameworks, "pytorch": "2.5.1+rocm6.2"})
    assert kb.check(a100, rocm, FrameworkRequest(name="pytorch")).reason == R_BUILD_MISMATCH
