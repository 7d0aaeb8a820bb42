"""Installed ML frameworks in the Python environments the agent is told to inspect.

Versions come from distribution metadata (`*.dist-info/METADATA`, `*.egg-info/PKG-INFO`)
read straight from the environment's site-packages: importing torch or paddle is slow,
can touch the devices, and may not even work from the agent's own interpreter.

An environment is given as a python executable (asked for its sys.path with a short
subprocess), a venv / conda prefix, or a site-packages directory. Distribution names map
onto the framework names the compatibility KB uses (`pytorch`, `paddle`, …; extras such
as `vllm` under their own names).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

# The KB keeps its label parser private; reusing it keeps "+cu121" meaning one thing.
from hetpool.catalog.versions import local_build

# normalised distribution name (PEP 503) → framework name in the compatibility KB
FRAMEWORK_DISTRIBUTIONS = {
    "torch": "pytorch",
    "torch-npu": "torch_npu",
    "torch-mlu": "torch_mlu",
    "mindspore": "mindspore",
    "mindspore-ascend": "mindspore",
    "mindspore-gpu": "mindspore",
    "paddlepaddle": "paddle",
    "paddlepaddle-gpu": "paddle",
    "tensorflow": "tensorflow",
    "tensorflow-cpu": "tensorflow",
    "tensorflow-gpu": "tensorflow",
    "tensorflow-rocm": "tensorflow",
    "jax": "jax",
    "vllm": "vllm",
    "vllm-ascend": "vllm-ascend",
    "deepspeed": "deepspeed",
    "transformers": "transformers",
    "triton": "triton",
}
PYTHON_TIMEOUT_S = 15.0
# Printed by the inspected interpreter: its version and its import path in order (the
# first copy of a distribution on sys.path is the one that imports).
_SYS_PATH_SCRIPT = (
    "import json, os, platform, site, sys\n"
    "paths = [p for p in sys.path if p and os.path.isdir(p)]\n"
    "extra = site.getsitepackages() if hasattr(site, 'getsitepackages') else []\n"
    "paths += [p for p in extra if p not in paths and os.path.isdir(p)]\n"
    "print(json.dumps({'python': platform.python_version(), 'paths': paths}))\n"
)
_PYTHON_DIR_RE = re.compile(r"python(\d+\.\d+)")
_META_SUFFIXES = (".dist-info", ".egg-info", ".egg")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_build(version: str) -> tuple[str, str] | None:
    """The build torch's local label names: '2.4.1+cu121' → ('cuda', '12.1'),
    '+rocm6.1' → ('rocm', '6.1'), '+cpu' → ('none', ''); None without a known label."""
    return local_build(version)


@dataclass
class EnvScan:
    """One inspected environment."""

    path: str  # as given
    python: str = ""
    site_dirs: list[str] = field(default_factory=list)
    frameworks: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class FrameworkScan:
    """All inspected environments merged, ready for the node's SoftwareStack."""

    frameworks: dict[str, str] = field(default_factory=dict)
    python: str = ""
    os: str = ""
    runtime_hint: dict | None = None  # {"name": "cuda", "version": "12.1"} from torch's build label
    envs: list[EnvScan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- metadata ---------------------------------------------------------------------------


def _read_headers(path: Path) -> tuple[str, str]:
    """(Name, Version) from a METADATA / PKG-INFO file; both come first in the header
    block, so reading stops there instead of parsing a long description."""
    name = version = ""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()
            elif key == "Version":
                version = value.strip()
            if name and version:
                break
    return name, version


def _metadata_file(entry: Path) -> Path | None:
    if entry.name.endswith(".dist-info"):
        return entry / "METADATA"
    if entry.name.endswith(".egg-info"):
        # A directory (setuptools) or a single file (distutils, Debian's dist-packages).
        return entry / "PKG-INFO" if entry.is_dir() else entry
    if entry.name.endswith(".egg"):
        return entry / "EGG-INFO" / "PKG-INFO"
    return None


def scan_site_dir(site_dir: Path, warnings: list[str] | None = None) -> dict[str, str]:
    """Framework name → version for the known distributions installed in `site_dir`."""
    found: dict[str, str] = {}
    try:
        entries = sorted(site_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.endswith(_META_SUFFIXES):
            continue
        # `torch-2.4.1+cu121.dist-info`: the name is before the first dash (dashes in a
        # name are written as underscores); skip unknown names without opening a file.
        stem = entry.name.removesuffix(".dist-info").removesuffix(".egg-info").removesuffix(".egg")  # "egg-info" has a dash itself
        if normalise(stem.split("-", 1)[0]) not in FRAMEWORK_DISTRIBUTIONS:
            continue
        meta = _metadata_file(entry)
        try:
            name, version = _read_headers(meta) if meta is not None else ("", "")
        except OSError as exc:
            if warnings is not None:
                warnings.append(f"{entry}: cannot read metadata ({exc})")
            continue
        framework = FRAMEWORK_DISTRIBUTIONS.get(normalise(name))
        if framework and version:
            found.setdefault(framework, version)
    return found


# -- environments -----------------------------------------------------------------------


def _python_version_from_path(path: Path) -> str:
    match = _PYTHON_DIR_RE.search(str(path))
    return match.group(1) if match else ""


def _ask_python(executable: Path) -> tuple[str, list[Path]]:
    """(python version, import path) from the interpreter itself. -E: the agent's own
    PYTHON* variables describe the agent's environment, not the inspected one."""
    out = subprocess.run([str(executable), "-E", "-c", _SYS_PATH_SCRIPT], capture_output=True, text=True, timeout=PYTHON_TIMEOUT_S, check=True).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return str(data["python"]), [Path(p) for p in data["paths"]]


def _prefix_site_dirs(prefix: Path) -> list[Path]:
    patterns = ("lib/python*/site-packages", "lib64/python*/site-packages", "lib/python*/dist-packages", "Lib/site-packages")
    return sorted({p for pattern in patterns for p in prefix.glob(pattern) if p.is_dir()})


def _prefix_python(prefix: Path) -> Path | None:
    for candidate in ("bin/python", "bin/python3", "python.exe"):
        if (prefix / candidate).is_file():
            return prefix / candidate
    return None


def _looks_like_site_dir(path: Path) -> bool:
    if path.name in ("site-packages", "dist-packages"):
        return True
    try:
        return any(child.name.endswith((".dist-info", ".egg-info")) for child in path.iterdir())
    except OSError:
        return False


def inspect_env(path: str | Path) -> EnvScan:
    """Frameworks of one environment: a python executable, a venv/conda prefix, or a
    site-packages directory."""
    scan = EnvScan(path=str(path))
    target = Path(path).expanduser()
    site_dirs: list[Path] = []
    if not target.exists():
        scan.warnings.append(f"python env {path}: not found")
        return scan
    if target.is_file():
        try:
            scan.python, site_dirs = _ask_python(target)
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:
            scan.warnings.append(f"python env {path}: cannot ask the interpreter for its site-packages ({exc})")
            return scan
    elif _looks_like_site_dir(target):
        site_dirs = [target]
        scan.python = _python_version_from_path(target)
    else:
        # A prefix: its own interpreter knows its sys.path best (system site-packages,
        # .pth additions); reading the lib/ layout is the fallback when it will not run.
        executable = _prefix_python(target)
        if executable is not None:
            try:
                scan.python, site_dirs = _ask_python(executable)
            except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:
                scan.warnings.append(f"python env {path}: {executable} did not answer ({exc}); reading {target}/lib instead")
        if not site_dirs:
            site_dirs = _prefix_site_dirs(target)
            scan.python = scan.python or next((v for v in map(_python_version_from_path, site_dirs) if v), "")
        if not site_dirs:
            scan.warnings.append(f"python env {path}: no site-packages found (give a python executable, a venv/conda prefix or site-packages)")
            return scan
    scan.site_dirs = [str(d) for d in site_dirs]
    for site_dir in site_dirs:
        for framework, version in scan_site_dir(site_dir, scan.warnings).items():
            scan.frameworks.setdefault(framework, version)  # the first on sys.path imports
    return scan


def _version_key(version: str) -> tuple:
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def os_pretty_name(root: str | Path = "/") -> str:
    """PRETTY_NAME from os-release (systemd's file, present on every current distro)."""
    for relative in ("etc/os-release", "usr/lib/os-release"):
        try:
            text = (Path(root) / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "PRETTY_NAME":
                return value.strip().strip("'\"")
    return ""


def inspect_envs(paths: list[str | Path] | None, root: str | Path = "/") -> FrameworkScan:
    """Merge the frameworks of `paths`. Where environments disagree, the highest version
    is reported (the node can run it somewhere) and the others go into a warning."""
    result = FrameworkScan(os=os_pretty_name(root))
    seen: dict[str, list[tuple[str, str]]] = {}
    for path in paths or []:
        scan = inspect_env(path)
        result.envs.append(scan)
        result.warnings.extend(scan.warnings)
        if scan.python and not result.python:
            result.python = scan.python  # the first environment given (that names its version) is the primary one
        for framework, version in scan.frameworks.items():
            seen.setdefault(framework, []).append((version, scan.path))
    for framework, found in seen.items():
        best = max(found, key=lambda item: _version_key(item[0]))
        result.frameworks[framework] = best[0]
        others = sorted({f"{v} in {p}" for v, p in found if v != best[0]})
        if others:
            result.warnings.append(f"{framework}: environments disagree; reporting {best[0]} ({best[1]}), also found {', '.join(others)}")
    pythons = sorted({s.python for s in result.envs if s.python})
    if len(pythons) > 1:
        result.warnings.append(f"python: the environments run different versions ({', '.join(pythons)}); reporting {result.python}")
    if "pytorch" in result.frameworks and (build := torch_build(result.frameworks["pytorch"])) and build[0] != "none":
        result.runtime_hint = {"name": build[0], "version": build[1]}
    return result
