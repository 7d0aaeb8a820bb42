"""What a Ray job's entrypoint sees of the environment: the task's own variables, and of
Ray's only what a job needs to find Ray and its devices.

Ray runs every job's entrypoint (and the worker processes of the Ray tasks it starts) as a
child of the raylet, with the raylet's environment: whatever the shell that ran `ray start`
held. Started next to hetpool's server or by the same operator, that is where secrets live
(HETPOOL_DATABASE_URL, cloud credentials). So the entrypoint starts the command with
`env -i`, keeping of the inherited variables only

- KEEP: the locale, PATH, HOME, the user's name, TMPDIR, RAY_* (the job's Ray address and
  config: `ray.init()` in the command needs them) and the device variables Ray sets for
  its built-in accelerators (CUDA_VISIBLE_DEVICES …);
- what the operator lists in backend_config `env_passthrough` ("LD_LIBRARY_PATH, NCCL_*");

and never a name that looks like a secret or lets code run in another's place (NEVER), even
when listed. The task's own variables (worker_environment) are then set on top, literally.

Ray runs all jobs as the identity of the Ray cluster itself (there is no per-job user):
see docs/backends.md#the-ray-backend for what that means and how deploy/ray.sh starts it.
"""

from __future__ import annotations

import re
import shlex

from hetpool.engines.base import NEVER_PASSED_THROUGH

KEEP = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "OMP_NUM_THREADS",
    "RAY_*",
    "*_VISIBLE_DEVICES",
    "*_VISIBLE_CORES",
    "*_VISIBLE_CHIPS",
    "*_VISIBLE_MODULES",
    "GPU_DEVICE_ORDINAL",
    "ONEAPI_DEVICE_SELECTOR",
)
# The rule every engine shares (backends/base.py), so one operator list means one thing.
NEVER = NEVER_PASSED_THROUGH
_NEVER = re.compile(NEVER, re.IGNORECASE)
_PATTERN = re.compile(r"\*?[A-Za-z_][A-Za-z0-9_]*\*?")
# Printed through a format so that the marker's literal never appears in the entrypoint, which
# Ray copies into the log ("Running entrypoint for job …: <entrypoint>").
MARKER_COMMAND = "printf 'HETPOOL_%s\\n' OUTPUT_BEGIN"


def parse_passthrough(text: str) -> tuple[str, ...]:
    """backend_config env_passthrough: "NAME, PREFIX*, *SUFFIX" -> patterns; ValueError names the bad one."""
    patterns = []
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        if not _PATTERN.fullmatch(item):
            raise ValueError(f"ray: backend_config.env_passthrough: {item!r} is not a variable name (a leading or trailing * is allowed)")
        if _NEVER.match(item.strip("*")) or _NEVER.match(item.replace("*", "")):
            raise ValueError(
                f"ray: backend_config.env_passthrough: {item!r} is refused: names like HETPOOL_*, *PASSWORD*, *SECRET*, *TOKEN*, "
                "*CREDENTIAL*, LD_PRELOAD, PYTHONPATH and PYTHONHOME never reach a job"
            )
        patterns.append(item)
    return tuple(patterns)


def _regex(patterns: tuple[str, ...]) -> str:
    return "^(" + "|".join(p.replace("*", "[A-Za-z0-9_]*") for p in patterns) + ")$"


def build_entrypoint(command: str, export: dict[str, str], passthrough: tuple[str, ...] = ()) -> str:
    """Shell line that Ray runs: the kept part of Ray's environment plus `export` (literal values),
    the output marker, then the command in its own shell, under `env -i`."""
    keep = _regex(KEEP + passthrough)
    run = ['exec env -i "$@"', *(f"{name}={shlex.quote(value)}" for name, value in export.items()), "/bin/sh -c", shlex.quote(command)]
    return "; ".join(
        [
            # Names only (values may span lines); the values are read back from the shell itself.
            f"hp_keep=$(env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p' | grep -E {shlex.quote(keep)}"
            f" | grep -Eiv {shlex.quote(NEVER)} | sort -u)",
            "set --",
            'for hp_v in $hp_keep; do eval "set -- \\"\\$@\\" \\"$hp_v=\\${$hp_v}\\""; done',
            MARKER_COMMAND,
            " ".join(run),
        ]
    )
