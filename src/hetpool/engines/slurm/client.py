"""How hetpool talks to Slurm: its command-line clients (scontrol, sbatch, squeue, scancel),
run with a bounded time and a clean environment. Used by compute and inventory alike."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.slurm.config import SlurmAccess

# What Slurm's clients print when slurmctld is down, restarting or overloaded (slurm_errno.c):
# "try again later", never "this job is wrong". Anything else a command prints is the engine's
# verdict on the request.
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|Communication connection failure"
    r"|Connection refused|temporarily unable|Resource temporarily unavailable|Slurmctld is not responding|Transport endpoint"
    r"|Connection timed out|Connection reset by peer|Protocol authentication error|Munge .*(socket|connect)",
    re.IGNORECASE,
)


def transient_failure(output: str) -> bool:
    """Whether a failed Slurm command's stderr says the controller could not be reached."""
    return bool(_TRANSIENT.search(output))


class SlurmCommands:
    """Runs one Slurm command at a time; "cannot run it at all" is BackendUnavailableError."""

    def __init__(self, access: SlurmAccess) -> None:
        self.access = access

    def run(self, program: str, *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        """The finished command (any exit code); `prefix` is e.g. sudo's when the server is not root."""
        bin_dir = self.access.bin_dir
        path = os.path.join(bin_dir, program) if bin_dir else shutil.which(program) or ""
        if not path or not os.access(path, os.X_OK):
            where = f"in bin_dir {bin_dir}" if bin_dir else "on PATH"
            raise BackendUnavailableError(f"slurm: {program} not found {where}; install slurm-client or set bin_dir")
        if prefix and not shutil.which(prefix[0]):
            raise BackendUnavailableError(f"slurm: {prefix[0]} not found: a hetpool server that is not root submits through sudo")
        # Not the server's environment: SBATCH_* / SLURM_* variables there would change the job
        # (SLURM_* even reach it under --export=NONE), and secrets have no business in Slurm.
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        if self.access.conf:
            env["SLURM_CONF"] = self.access.conf
        timeout_s = self.access.timeout_s
        try:
            return subprocess.run([*(prefix or []), path, *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BackendUnavailableError(f"slurm: {program} took longer than {timeout_s:g} s") from None
        except OSError as exc:
            raise BackendUnavailableError(f"slurm: {program} could not run: {exc}") from exc

    def output(self, program: str, *args: str) -> str:
        """stdout of a read-only command that must succeed; the error names the command and its stderr."""
        done = self.run(program, *args)
        if done.returncode != 0:
            conf = self.access.conf
            shown = " ".join([program, *args]) + (f" (SLURM_CONF={conf})" if conf else "")
            detail = (done.stderr or done.stdout).strip()[:2000]
            raise BackendUnavailableError(f"slurm: `{shown}` failed (exit {done.returncode}): {detail}")
        return done.stdout
